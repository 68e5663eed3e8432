// The CUDA driver, loaded at run time (dlopen of config "gpu.cuda_driver",
// default libcuda.so.1), once per process. A host without it runs hawser
// unchanged: get() is nullptr and memory is host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpu/cuda_api.h"
#include "hawser/status.h"

namespace hawser::gpu {

// What the driver says of an address.
struct PointerInfo {
  bool device = false;  // device memory (cudaMalloc, cuMemAlloc, cuMemMap, managed)
  int ordinal = -1;     // its GPU, when device
  // Device memory that is not a cuMemAlloc allocation: mapped with cuMemMap
  // (virtual memory management) or from a memory pool. A range of it may
  // span several mappings.
  bool mapped = false;
  bool rdma_capable = true;  // CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE (true when unknown)
};

class CudaDriver {
 public:
  // Loads the driver from `path` the first time (later calls return the
  // one loaded; another path is logged and ignored) and runs cuInit.
  // nullptr when it cannot be loaded or has no GPU; reason() says why.
  static const CudaDriver* load(const std::string& path);
  // The loaded driver, or nullptr.
  static const CudaDriver* get();
  // Why load() gave nullptr ("" when it did not, or was not called).
  static std::string reason();

  const cu::Api& api() const { return api_; }
  const std::string& path() const { return path_; }
  int deviceCount() const { return devices_; }

  PointerInfo pointer(const void* addr) const;
  // Makes GPU `ordinal`'s primary context (the one the CUDA runtime and
  // PyTorch use) current on the calling thread.
  Status bindDevice(int ordinal) const;
  cu::Context context(int ordinal) const;
  // The allocation holding addr: [base, base + size).
  Status allocation(const void* addr, uint64_t& base, size_t& size) const;
  // A dma-buf fd (caller closes it) for the allocation holding
  // [addr, addr + len) and the offset of addr in it; kNotSupported when the
  // driver cannot export one. For mapped memory (cuMemMap), the allocations
  // of every mapping the range touches, which must be contiguous and all
  // mapped (the driver exports a fully mapped reserved range). Works from a
  // thread that never used CUDA.
  Status dmabuf(const void* addr, size_t len, int& fd, uint64_t& offset) const;
  // NUMA node of GPU `ordinal` (from its PCI device in sysfs); -1 unknown.
  int numaNode(int ordinal) const;

  // OK for kSuccess, else `code` with "<what>: <driver's text> (CUresult N)".
  Status check(cu::Result rc, std::string_view what, Code code = Code::kIoError) const;
  // The same with the message made only for a failed call (`what()`): for
  // the calls of every request, which should not format a string each time.
  template <class What>
  Status checkLazy(cu::Result rc, What&& what, Code code = Code::kIoError) const {
    return rc == cu::kSuccess ? Status::OK() : check(rc, what(), code);
  }

 private:
  CudaDriver() = default;
  cu::Api api_{};
  std::string path_;
  int devices_ = 0;
};

// Makes GPU `ordinal`'s primary context current for a scope and puts back
// whatever the thread had before (an application thread's own context is
// left as it was). ordinal < 0: does nothing.
class ContextScope {
 public:
  ContextScope(const CudaDriver* d, int ordinal);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  const Status& status() const { return status_; }

 private:
  const CudaDriver* d_;
  cu::Context saved_ = nullptr;
  bool bound_ = false;
  Status status_;
};

}  // namespace hawser::gpu
