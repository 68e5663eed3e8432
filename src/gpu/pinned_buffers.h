// Page-locked staging buffers for copies between the network or a file and
// GPU memory: one anonymous mapping (so io_uring can register it too),
// registered with the CUDA driver, cut into equal slots.
//
// acquire()/release() are thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "hawser/status.h"

namespace hawser::gpu {

class PinnedBuffers {
 public:
  // `count` slots of `size` bytes; kNotSupported without a CUDA driver.
  static Status create(size_t count, size_t size, std::unique_ptr<PinnedBuffers>& out);
  ~PinnedBuffers();

  size_t count() const { return count_; }
  size_t slotSize() const { return size_; }
  char* slot(size_t i) const { return base_ + i * size_; }
  char* base() const { return base_; }
  size_t bytes() const { return count_ * size_; }

  // A free slot's index, or -1 when all are taken.
  long tryAcquire();
  // Waits up to `timeout_ms` for a free slot; -1 on timeout.
  long acquire(int timeout_ms);
  void release(size_t i);

 private:
  PinnedBuffers() = default;
  char* base_ = nullptr;
  size_t count_ = 0, size_ = 0, mapped_ = 0;
  bool registered_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> free_;
};

}  // namespace hawser::gpu
