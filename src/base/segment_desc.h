// A segment's descriptor as data: what its owner publishes (through the
// metadata store, or a transport's own scheme such as file://) and what a
// transport's openPeer decodes its part of. No codec here: the versioned JSON
// encoding lives in metadata/descriptor.h, above base.
//
// The per-transport parts (SegmentDesc::transports, BufferDesc::attrs) stay
// JSON objects: each transport publishes and decodes its own part
// (Transport::describe/registerRegion and its descriptor decoder), so the
// layers between never learn their fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hawser/types.h"

namespace hawser {

// One registered buffer of a memory segment.
struct BufferDesc {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location = "cpu:0";
  nlohmann::json attrs = nlohmann::json::object();  // per-transport: {"rdma":{"lkey":[],"rkey":[]}}
  uint64_t seq = 0;  // the owner's registration order (optional in the JSON: 0 = unknown)
};

// A memory segment (a process's registered buffers) or a file segment.
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

}  // namespace hawser
