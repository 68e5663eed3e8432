// hawser's gather/scatter copy kernel (gpu/copy_kernel.cu, shipped as the
// PTX of gpu/copy_kernel.ptx): loaded through the driver once per GPU and
// shared by every stream of that GPU. CopyStream::copyRuns launches it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/batch_copy.h"
#include "gpu/cuda_api.h"
#include "hawser/status.h"

namespace hawser::gpu {

class CudaDriver;

// The PTX text, embedded at build time.
extern const char kCopyKernelPtx[];
inline constexpr const char* kCopyKernelEntry = "hawser_copy_pieces";

// The launch's parameters as the kernel reads them: `count` pieces of
// CopyRun layout in device memory.
static_assert(sizeof(CopyRun) == 24 && offsetof(CopyRun, src) == 8 && offsetof(CopyRun, len) == 16);
// Runs are cut into pieces of at most CopySettings::piece_bytes (one warp
// copies a piece), so a large run spreads over many warps; a CTA has
// CopySettings::threads_per_cta threads (at most 1024: the kernel's launch
// bound).
inline constexpr unsigned kCopyMaxThreadsPerCta = 1024;

// The kernel's function on GPU `device`, whose primary context the calling
// thread has current; loaded the first time it is asked for. kNotSupported
// with the reason when it cannot be (a driver without the module API, or
// one that refuses the PTX); the failure is remembered.
Status copyKernel(const CudaDriver* d, int device, cu::Function& out);

}  // namespace hawser::gpu
