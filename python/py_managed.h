// Managed buffers (allocate_managed_buffer / free_managed_buffer): memory
// the module allocates (hawser::allocateHostMemory: shareable, so a shm peer
// of this host maps it once and copies with memcpy; huge pages where the
// kernel can) and registers with the engine itself. Small buffers are
// carved out of pools of python.managed_pool_size bytes (first fit, 64-byte
// aligned, freed blocks coalesced); a buffer larger than a pool gets a
// mapping of its own. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hawser/engine.h"

namespace hawser::pymod {

class ManagedBuffers {
 public:
  // Pools are `bytes` (rounded up to pages) from the next one mapped on.
  void setPoolSize(uint64_t bytes);
  Status allocate(TransferEngine& e, uint64_t length, uint64_t& out);
  // Frees the buffer at `addr` (its length is the allocator's to know).
  Status release(TransferEngine& e, uint64_t addr);
  // True when `addr` is a managed buffer or the start of a pool's mapping.
  bool owns(uint64_t addr);
  // After the engine is gone: unmaps everything, forgets every buffer.
  void unmapAll();

 private:
  struct Pool {
    uint64_t base = 0;
    uint64_t size = 0;
    std::map<uint64_t, uint64_t> free_blocks;  // addr -> length, coalesced
  };
  struct Alloc {
    Pool* pool = nullptr;  // nullptr: a dedicated mapping of `reserved` bytes
    uint64_t length = 0;
    uint64_t reserved = 0;
  };
  static constexpr uint64_t kAlign = 64;
  static bool takeBlock(Pool& p, uint64_t size, uint64_t& out);

  std::mutex mu_;
  uint64_t pool_size_ = 64ull << 20;
  uint64_t page_ = 4096;
  std::vector<std::unique_ptr<Pool>> pools_;
  std::unordered_map<uint64_t, Alloc> allocs_;
};

}  // namespace hawser::pymod
