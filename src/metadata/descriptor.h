// Segment descriptors and their versioned JSON codec.
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

#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

inline constexpr int kDescriptorMajor = 1;
inline constexpr int kDescriptorMinor = 0;

struct BufferDesc {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location = "cpu:0";
  nlohmann::json attrs = nlohmann::json::object();  // per-transport: {"rdma":{"lkey":[],"rkey":[]}}
  uint64_t seq = 0;  // the owner's registration order (optional in the JSON: 0 = unknown)
};

struct SegmentDesc {
  enum class Kind { kMemory, kFile };
  Kind kind = Kind::kMemory;
  std::string name;
  // memory
  std::string host;
  uint16_t rpc_port = 0;
  std::string host_id;
  std::string server_name;
  int64_t pid = 0;
  nlohmann::json transports = nlohmann::json::object();
  std::vector<BufferDesc> buffers;  // sorted by addr
  uint64_t generation = 0;          // owner's registry version when encoded
  // file
  std::vector<FileDesc> files;

  // Index of the buffer that holds [addr, addr+len), or -1.
  int findBuffer(uint64_t addr, uint64_t len) const;
  uint64_t fileSpan() const;  // sum of file lengths
};

nlohmann::json encodeSegment(const SegmentDesc& d);
std::string encodeSegmentText(const SegmentDesc& d);
Status decodeSegment(const nlohmann::json& j, SegmentDesc& out);
Status decodeSegmentText(std::string_view text, SegmentDesc& out);

}  // namespace hawser
