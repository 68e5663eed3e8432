// The versioned JSON codec of segment descriptors (the descriptor itself,
// SegmentDesc, is data in base/segment_desc.h).
//
// Memory segment:
//   {"version":"1.0","kind":"memory","name":"127.0.0.1:5000","host":"127.0.0.1",
//    "rpc_port":5000,"host_id":"<boot id>","server_name":"node-a","pid":123,
//    "transports":{"tcp":{...},"rdma":{...}},
//    "buffers":[{"addr":N,"length":N,"location":"cpu:0","seq":N,"attrs":{"rdma":{...}}}]}
// File segment:
//   {"version":"1.0","kind":"file","name":"ckpt",
//    "files":[{"file_path":"/d/a","length":N,"local_path_map":{"node-a":"/mnt/a"}}]}
// Decoding rejects an unknown major version, wrong types and out-of-range
// numbers with kMetadataError naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/segment_desc.h"
#include "hawser/status.h"

namespace hawser {

inline constexpr int kDescriptorMajor = 1;
inline constexpr int kDescriptorMinor = 0;

nlohmann::json encodeSegment(const SegmentDesc& d);
std::string encodeSegmentText(const SegmentDesc& d);
Status decodeSegment(const nlohmann::json& j, SegmentDesc& out);
Status decodeSegmentText(std::string_view text, SegmentDesc& out);

}  // namespace hawser
