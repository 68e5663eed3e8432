// The few CUDA driver calls GPU memory registration needs, resolved with
// dlopen("libcuda.so.1") so that hosts (and CI) without CUDA build and run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hawser/status.h"

namespace hawser::rdma {

class CudaDriver {
 public:
  // nullptr when libcuda.so.1 is absent or cuInit fails.
  static const CudaDriver* get();

  // True when `addr` is device memory of the CUDA driver.
  bool isDevicePointer(const void* addr) const;
  // A dma-buf fd for the whole allocation holding [addr, addr+len): `fd`
  // (caller closes it) and `offset` of addr inside it. kNotSupported when
  // the driver has no dma-buf export (older than CUDA 11.7, or refused).
  Status dmabuf(const void* addr, size_t len, int& fd, uint64_t& offset) const;
  // NUMA node of GPU `ordinal` (from its PCI device in sysfs), -1 unknown.
  int numaNode(int ordinal) const;

 private:
  CudaDriver() = default;
  using CUresult = int;
  CUresult (*cuInit_)(unsigned) = nullptr;
  CUresult (*cuPointerGetAttribute_)(void*, int, unsigned long long) = nullptr;
  CUresult (*cuMemGetAddressRange_)(unsigned long long*, size_t*, unsigned long long) = nullptr;
  CUresult (*cuMemGetHandleForAddressRange_)(void*, unsigned long long, size_t, int, unsigned long long) = nullptr;
  CUresult (*cuDeviceGet_)(int*, int) = nullptr;
  CUresult (*cuDeviceGetPCIBusId_)(char*, int, int) = nullptr;
};

}  // namespace hawser::rdma
