// Staging for GPU memory when cuFile is not used (or runs in compat mode):
// file I/O (io_uring or POSIX) into page-locked host slots
// (gpu::PinnedBuffers, file.gpu_staging_buffers slots of file.max_io_size +
// 8 KiB: one large I/O each), and the copies between a slot and GPU memory
// queued on gpu::CopyStreams.
//
// One staged I/O is one copy: its runs (one per slice it carries: the slot
// scattered into the GPU runs after a read, gathered from them before a
// write) go to the stream as one window, gpu::CopyStream::copyRuns, one
// ticket (gpu/batch_copy.h says how the window is executed: gpu.copy_*).
// Copies are pipelined: each (GPU, direction) has a lane, a thread owning one
// stream; it queues every copy handed to it at once and then waits for the
// oldest, so the GPU copies one I/O's runs while the files serve others, and
// no caller ever blocks on a copy. A finished copy is reported to the sink
// with the I/O's cookie (one-based, as every completion of the transport).
// Host code never touches GPU memory: only the driver's copies do.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <vector>

#include "gpu/batch_copy.h"
#include "gpu/pinned_buffers.h"
#include "hawser/status.h"

namespace hawser::file {

class EngineMemory;
class IoEngine;
struct FileCounters;

// Called from a lane's thread when a copy ended (error: the stream's).
using CopySink = std::function<void(uint64_t cookie, const Status& result)>;

class GpuStaging {
 public:
  // `counters`: its transport's (the copies: gpu_copy_*).
  explicit GpuStaging(std::shared_ptr<FileCounters> counters);
  GpuStaging(const GpuStaging&) = delete;
  ~GpuStaging();

  // Creates the slots (pinned; registered with `uring` as fixed buffers
  // when given). kNotSupported without a CUDA driver. `copy`: how the lanes'
  // streams execute a window of runs.
  Status init(size_t slots, size_t slot_size, IoEngine* uring, const gpu::CopySettings& copy, CopySink sink);
  bool ready() const { return buffers_ != nullptr; }
  size_t slotSize() const { return buffers_ ? buffers_->slotSize() : 0; }
  size_t slots() const { return buffers_ ? buffers_->count() : 0; }

  // A free slot, or -1 (thread-safe).
  long tryAcquire() { return buffers_->tryAcquire(); }
  void release(long slot) { buffers_->release(static_cast<size_t>(slot)); }
  char* slot(long i) const { return buffers_->slot(static_cast<size_t>(i)); }
  // What io_uring set up for the slots (IoOp::memory of a staged I/O), or null.
  EngineMemory* memory() const { return memory_.get(); }

  // Queues `runs` (one window: dst <- src each) on GPU `device`'s lane for
  // that direction; the sink hears of the whole window with `cookie`. Never
  // blocks on the copy.
  void copy(int device, bool to_gpu, std::vector<gpu::CopyRun> runs, uint64_t cookie);

  // Waits for every queued copy and stops the lanes.
  void stop();

 private:
  class Lane;
  Lane* lane(int device, bool to_gpu);

  std::shared_ptr<FileCounters> counters_;
  std::unique_ptr<gpu::PinnedBuffers> buffers_;
  IoEngine* uring_ = nullptr;
  std::shared_ptr<EngineMemory> memory_;
  gpu::CopySettings copy_;
  CopySink sink_;
  std::mutex mu_;
  std::map<std::pair<int, bool>, std::unique_ptr<Lane>> lanes_;
};

}  // namespace hawser::file
