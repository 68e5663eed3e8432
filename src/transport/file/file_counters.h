// The file transport's counters: one set per transport instance, owned by
// the FileTransport and shared (std::shared_ptr) with its parts that count:
// the in-flight table, the I/O engines, the cuFile engine, a peer's open
// descriptors, the GPU staging lanes. A part may outlive the transport's
// stop (a descriptor a task still holds, an engine that could not be
// stopped), hence shared ownership. stats() reads them (FileTransport::
// stats(): the names below, then gpu_copy_*), so two engines in one process
// count apart.
#pragma once

#include <atomic>
#include <cstdint>

#include "gpu/batch_copy.h"

namespace hawser::file {

struct FileCounters {
  std::atomic<uint64_t> uring_ops{0};  // ops issued through an io_uring engine
  std::atomic<uint64_t> posix_ops{0};  // ops issued through a POSIX engine
  std::atomic<uint64_t> direct_slices{0};  // slices straight between user memory and an O_DIRECT fd
  std::atomic<uint64_t> bounce_slices{0};  // slices through a bounce buffer (unaligned address/offset/length)
  // slices through the page cache (no O_DIRECT on that fs, or write head/tail)
  std::atomic<uint64_t> buffered_slices{0};
  std::atomic<uint64_t> fixed_buffer_ops{0};  // io_uring ops that used a registered buffer
  std::atomic<uint64_t> fixed_file_ops{0};  // io_uring ops that used a registered file
  std::atomic<uint64_t> short_continuations{0};  // short reads/writes resumed for the remainder
  std::atomic<uint64_t> cancel_requests{0};  // in-flight slices asked to cancel
  std::atomic<uint64_t> quarantined{0};  // slices reported CANCELED while their I/O had not stopped
  std::atomic<uint64_t> quarantine_released{0};  // of those, I/O that has since ended
  std::atomic<uint64_t> files_opened{0};  // open() calls that succeeded
  std::atomic<uint64_t> files_open{0};  // descriptors open now
  // Bytes of completed host slices, per path (the *_slices above count slices).
  std::atomic<uint64_t> direct_bytes{0};
  std::atomic<uint64_t> bounce_bytes{0};
  std::atomic<uint64_t> buffered_bytes{0};
  // GPU memory <-> files, per path (slices when first issued; bytes of completed slices):
  std::atomic<uint64_t> gpu_gds_slices{0};  // cuFile, GPUDirect (nvidia-fs)
  std::atomic<uint64_t> gpu_gds_bytes{0};
  std::atomic<uint64_t> gpu_compat_slices{0};  // cuFile in compat mode (its own POSIX I/O and bounce buffers)
  std::atomic<uint64_t> gpu_compat_bytes{0};
  std::atomic<uint64_t> gpu_staged_uring_slices{0};  // io_uring into pinned staging slots + GPU copies
  std::atomic<uint64_t> gpu_staged_uring_bytes{0};
  std::atomic<uint64_t> gpu_staged_posix_slices{0};  // pread/pwrite into pinned staging slots + GPU copies
  std::atomic<uint64_t> gpu_staged_posix_bytes{0};
  std::atomic<uint64_t> cufile_ops{0};  // ops issued through the cuFile engine (short I/O resumed counts again)
  std::atomic<uint64_t> cufile_batches{0};  // cuFileBatchIOSubmit calls
  std::atomic<uint64_t> cufile_refused_files{0};  // descriptors cuFile refused (their GPU slices staged instead)
  // Storage I/O sized by the disk (file_coalesce.h): I/Os that carried more
  // than one slice, and the slices they carried; I/Os issued as one
  // vectored (readv/writev) op straight to/from the slices' memory.
  std::atomic<uint64_t> coalesced_ios{0};
  std::atomic<uint64_t> coalesced_runs{0};
  std::atomic<uint64_t> vectored_ios{0};
  // The staging copies between pinned slots and GPU memory, one window a
  // staged I/O (gpu_copy_* in stats(): gpu/batch_copy.h).
  gpu::CopyCounters copy;
};

// A snapshot of a transport's FileCounters, field by field (the meanings
// are above), for tests and tools: fileStatsOf(transport.stats()).
struct FileStats {
  uint64_t uring_ops = 0;
  uint64_t posix_ops = 0;
  uint64_t direct_slices = 0;
  uint64_t bounce_slices = 0;
  uint64_t buffered_slices = 0;
  uint64_t fixed_buffer_ops = 0;
  uint64_t fixed_file_ops = 0;
  uint64_t short_continuations = 0;
  uint64_t cancel_requests = 0;
  uint64_t quarantined = 0;
  uint64_t quarantine_released = 0;
  uint64_t files_opened = 0;
  uint64_t files_open = 0;
  uint64_t direct_bytes = 0;
  uint64_t bounce_bytes = 0;
  uint64_t buffered_bytes = 0;
  uint64_t gpu_gds_slices = 0;
  uint64_t gpu_gds_bytes = 0;
  uint64_t gpu_compat_slices = 0;
  uint64_t gpu_compat_bytes = 0;
  uint64_t gpu_staged_uring_slices = 0;
  uint64_t gpu_staged_uring_bytes = 0;
  uint64_t gpu_staged_posix_slices = 0;
  uint64_t gpu_staged_posix_bytes = 0;
  uint64_t cufile_ops = 0;
  uint64_t cufile_batches = 0;
  uint64_t cufile_refused_files = 0;
  uint64_t coalesced_ios = 0;
  uint64_t coalesced_runs = 0;
  uint64_t vectored_ios = 0;
};

}  // namespace hawser::file
