// Whether a range of this process's host memory can be mapped by a peer
// process: its pages belong to a file mapped shared (a memfd, a file on
// /dev/shm or any file system), and which file. Found from
// allocateHostMemory's own record, else from /proc/self/maps (the file then
// reached through an open descriptor of this process, /proc/self/map_files,
// or its path).
#pragma once

#include <cstdint>
#include <string>

namespace hawser::shm {

struct Backing {
  int fd = -1;          // opened read-write; the caller closes it
  uint64_t offset = 0;  // of the range's first byte in the file
  std::string what;     // "hawser::allocateHostMemory", "memfd:NAME", a path
};

// true and `out` when [addr, addr + len) is shareable; false and `why` (for
// the logs) when it is private memory or its file cannot be reached.
bool findBacking(uint64_t addr, uint64_t len, Backing& out, std::string& why);

}  // namespace hawser::shm
