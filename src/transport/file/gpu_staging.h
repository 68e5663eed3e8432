// Staging for GPU memory when cuFile is not used: file I/O (io_uring or
// POSIX) into page-locked host slots (gpu::PinnedBuffers, file.gpu_staging_buffers
// slots of file.max_io_size + 8 KiB), and the copies between a slot and GPU
// memory queued on gpu::CopyStreams.
//
// Copies are pipelined: each (GPU, direction) has a lane, a thread owning one
// stream; it queues every copy handed to it at once and then waits for the
// oldest, so the GPU copies one slice while the files serve others, and no
// caller ever blocks on a copy. A finished copy is reported to the sink with
// the slice's cookie (one-based, as every completion of the transport).
// Host code never touches GPU memory: only the driver's copies do.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "gpu/pinned_buffers.h"
#include "hawser/status.h"

namespace hawser::file {

class IoEngine;

// Called from a lane's thread when a copy ended (error: the stream's).
using CopySink = std::function<void(uint64_t cookie, const Status& result)>;

class GpuStaging {
 public:
  GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  ~GpuStaging();

  // Creates the slots (pinned; registered with `uring` as fixed buffers
  // when given). kNotSupported without a CUDA driver.
  Status init(size_t slots, size_t slot_size, IoEngine* uring, CopySink sink);
  bool ready() const { return buffers_ != nullptr; }
  size_t slotSize() const { return buffers_ ? buffers_->slotSize() : 0; }
  size_t slots() const { return buffers_ ? buffers_->count() : 0; }

  // A free slot, or -1 (thread-safe).
  long tryAcquire() { return buffers_->tryAcquire(); }
  void release(long slot) { buffers_->release(static_cast<size_t>(slot)); }
  char* slot(long i) const { return buffers_->slot(static_cast<size_t>(i)); }

  // Queues dst <- src on GPU `device`'s lane for that direction; the sink
  // hears of it with `cookie`. Never blocks on the copy.
  void copy(int device, bool to_gpu, void* dst, const void* src, size_t len, uint64_t cookie);

  // Waits for every queued copy and stops the lanes.
  void stop();

 private:
  class Lane;
  Lane* lane(int device, bool to_gpu);

  std::unique_ptr<gpu::PinnedBuffers> buffers_;
  IoEngine* uring_ = nullptr;
  CopySink sink_;
  std::mutex mu_;
  std::map<std::pair<int, bool>, std::unique_ptr<Lane>> lanes_;
};

}  // namespace hawser::file
