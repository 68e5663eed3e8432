// Copying many small runs of GPU memory with one launch: the vocabulary
// shared by every place that copies GPU memory (the nvlink transport, the
// tcp and file staging paths). A window of runs goes to the GPU as one
// driver call, by one of three mechanisms:
//
//   kernel       hawser's gather/scatter kernel (shipped as PTX, loaded
//                through the driver): one launch per window, at most
//                `max_ctas` CTAs, 16-byte vector copies where alignment
//                allows; uses SMs, reaches HBM speed for small runs.
//   copy_engine  the driver's batched copy (cuMemcpyBatchAsync): one call
//                per window, no SM used.
//   per_run      one cuMemcpyAsync per run (the copy engines; no SM), which
//                is as fast as anything for large runs.
//
// `auto` picks per window by the runs' mean length (gpu.copy_kernel_below).
// CopyStream::copyRuns (gpu/copy_stream.h) executes a window.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "hawser/stats.h"
#include "hawser/status.h"

namespace hawser {
class Config;
}

namespace hawser::gpu {

// One contiguous copy of a window: `len` bytes from `src` to `dst`. Either
// end is device memory (of the stream's GPU, or of another GPU the kernel
// may reach) or page-locked host memory: unified addresses.
struct CopyRun {
  uint64_t dst = 0;
  uint64_t src = 0;
  uint64_t len = 0;
};

enum class CopyMechanism : uint8_t {
  kAuto = 0,
  kKernel = 1,
  kCopyEngine = 2,  // cuMemcpyBatchAsync
  kPerRun = 3,      // one cuMemcpyAsync per run
};
// "auto", "kernel", "copy_engine", "per_run".
const char* copyMechanismName(CopyMechanism m);
// The inverse of copyMechanismName; false for any other text.
bool parseCopyMechanism(std::string_view s, CopyMechanism& out);

// How windows are copied (config gpu.copy_*; docs/gpu.md).
struct CopySettings {
  CopyMechanism mechanism = CopyMechanism::kAuto;  // gpu.copy_mechanism
  uint32_t max_ctas = 32;                           // gpu.copy_max_ctas: 0 = as many as the window has pieces
  uint64_t kernel_below = 1ull << 20;               // gpu.copy_kernel_below: auto uses the kernel below this mean run
  // Not knobs: wait() sleeps in the driver (blocking-sync events) instead
  // of spinning; the kernel's CTA size and the longest piece one warp
  // copies (the defaults were measured on an H200: docs/gpu.md).
  bool blocking_sync = false;
  uint32_t threads_per_cta = 512;
  uint64_t piece_bytes = 64 << 10;

  // Reads the gpu.copy_* knobs (kInvalidArgument naming the key).
  static Status fromConfig(const Config& c, CopySettings& out);
};

// What executing one window did, for stats, doctor and bench --json.
struct CopyReport {
  CopyMechanism used = CopyMechanism::kPerRun;  // never kAuto
  uint32_t ctas = 0;      // CTAs of the kernel launch (0: no kernel)
  uint32_t launches = 0;  // driver calls that queued the window's copies
  uint64_t runs = 0;
  uint64_t bytes = 0;
  // Why `used` is not what the settings asked for ("" when it is): the
  // kernel could not be loaded here, the driver has no batched copy, ...
  const char* fallback = "";
};

// What the windows a transport copied used, as counters of its stats():
// gpu_copy_windows, gpu_copy_runs, gpu_copy_kernel_launches,
// gpu_copy_engine_batches, gpu_copy_per_run, gpu_copy_ctas_max,
// gpu_copy_fallbacks (hawser bench --json reports the mechanism from them).
struct CopyCounters {
  std::atomic<uint64_t> windows{0};
  std::atomic<uint64_t> runs{0};
  std::atomic<uint64_t> kernel_launches{0};
  std::atomic<uint64_t> engine_batches{0};
  std::atomic<uint64_t> per_run{0};    // cuMemcpyAsync calls of per-run windows
  std::atomic<uint64_t> ctas_max{0};   // the most CTAs one launch used
  std::atomic<uint64_t> fallbacks{0};  // windows not copied by the mechanism asked for

  void add(const CopyReport& r);
  void appendTo(Counters& out) const;
};

}  // namespace hawser::gpu
