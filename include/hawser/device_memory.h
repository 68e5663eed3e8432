// GPU memory for tools, tests and examples, through the CUDA driver hawser
// loads at run time. Engines find the kind of the memory they are given by
// themselves (register with location "*"); these calls only make some.
#pragma once

#include <cstddef>
#include <string>

#include "hawser/status.h"

namespace hawser {

// Loads the CUDA driver once per process: `path`, or "" for config
// gpu.cuda_driver (env HAWSER_GPU_CUDA_DRIVER, default libcuda.so.1).
// kNotSupported, with the reason, where there is no driver or no GPU.
Status loadCudaDriver(const std::string& path = "");
// GPUs the loaded driver sees (0 when none is loaded).
int cudaDeviceCount();

// Device memory of GPU `device` (cuMemAlloc), and its release.
Status allocateDeviceMemory(int device, size_t bytes, void** out);
Status freeDeviceMemory(void* ptr);
// Device memory of GPU `device` as CUDA's virtual memory management makes
// it, what PyTorch's expandable_segments:True gives: physical allocations
// of `chunk` bytes (cuMemCreate with the POSIX file descriptor handle type,
// so other processes may import them; 0: the driver's granularity), mapped
// back to back in one reserved range (cuMemMap) and made read-write for the
// GPU. `bytes` is rounded up to whole chunks. kNotSupported where the driver
// lacks the calls. Freed with freeMappedDeviceMemory.
Status allocateMappedDeviceMemory(int device, size_t bytes, size_t chunk, void** out);
Status freeMappedDeviceMemory(void* ptr);
// dst <- src, each host or device memory; returns when the copy is done:
// the bytes are in `dst` (from pageable host memory too, where cuMemcpy
// alone returns before its DMA has landed them), so a transfer started
// next, on any stream, moves them.
Status copyMemory(void* dst, const void* src, size_t bytes);
// Returns when the work queued on CUDA stream `stream` (a CUstream /
// cudaStream_t, e.g. torch.cuda.Stream.cuda_stream; nullptr: the legacy
// default stream of the calling thread's context, GPU 0's primary context
// when the thread has none) has finished. kNotSupported without a driver.
Status synchronizeStream(void* stream);

}  // namespace hawser
