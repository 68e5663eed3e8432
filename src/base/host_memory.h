// What allocateHostMemory (hawser/host_memory.h) keeps of each allocation:
// its memfd, so that a transport that shares host memory with a peer of this
// host (shm) finds a region's backing from the allocator's own record
// instead of guessing it from /proc/self/maps.
#pragma once

#include <cstdint>

namespace hawser::hostmem {

// Whether [addr, addr + len) lies inside one allocation of
// allocateHostMemory; then `fd` is a new descriptor of its memfd (the
// caller closes it) and `offset` the range's offset in it.
bool backingOf(uint64_t addr, uint64_t len, int& fd, uint64_t& offset);

}  // namespace hawser::hostmem
