// The CUDA half of GPU memory registration (cuda_dmabuf.cpp): device
// pointers are recognised and exported as a dma-buf of their allocation.
// Skipped where libcuda.so.1 or a GPU is missing (CI).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#if HAWSER_TEST_RDMA
#include "transport/rdma/cuda_dmabuf.h"

namespace {

using hawser::rdma::CudaDriver;

struct DeviceAlloc {
  unsigned long long ptr = 0;
  std::string why;  // non-empty: could not allocate
};

// Allocates `bytes` of GPU 0 memory through the driver API (no cudart needed).
DeviceAlloc allocate(size_t bytes) {
  DeviceAlloc out;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    out.why = "no libcuda.so.1";
    return out;
  }
  using Fn0 = int (*)(int*, int);
  using Fn1 = int (*)(void**, int);
  using Fn2 = int (*)(void*);
  using Fn3 = int (*)(unsigned long long*, size_t);
  auto cuDeviceGet = reinterpret_cast<Fn0>(dlsym(h, "cuDeviceGet"));
  auto retain = reinterpret_cast<Fn1>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  auto setCurrent = reinterpret_cast<Fn2>(dlsym(h, "cuCtxSetCurrent"));
  auto memAlloc = reinterpret_cast<Fn3>(dlsym(h, "cuMemAlloc_v2"));
  int dev = 0;
  void* ctx = nullptr;
  if (!cuDeviceGet || !retain || !setCurrent || !memAlloc || cuDeviceGet(&dev, 0) != 0 || retain(&ctx, dev) != 0 ||
      setCurrent(ctx) != 0 || memAlloc(&out.ptr, bytes) != 0)
    out.why = "no usable GPU";
  return out;
}

TEST(RdmaCudaDmabuf, device_memory_is_recognised_and_exported_as_a_dmabuf) {
  const CudaDriver* drv = CudaDriver::get();
  if (!drv) GTEST_SKIP() << "no CUDA driver (libcuda.so.1) on this host";
  DeviceAlloc a = allocate(64 << 20);
  if (!a.why.empty()) GTEST_SKIP() << a.why;
  void* dptr = reinterpret_cast<void*>(a.ptr);
  void* host = std::malloc(4096);
  EXPECT_TRUE(drv->isDevicePointer(dptr));
  EXPECT_FALSE(drv->isDevicePointer(host));
  std::free(host);
  int fd = -1;
  uint64_t offset = 0;
  hawser::Status s = drv->dmabuf(static_cast<char*>(dptr) + 8192, 1 << 20, fd, offset);
  if (s.code() == hawser::Code::kNotSupported) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(offset % 4096, 8192u % 4096);
  EXPECT_GE(offset, 8192u);
  ::close(fd);
  // A range running past its allocation is refused.
  s = drv->dmabuf(static_cast<char*>(dptr) + (64 << 20) - 4096, 1 << 20, fd, offset);
  EXPECT_EQ(s.code(), hawser::Code::kInvalidArgument) << s.message();
}

}  // namespace
#else
TEST(RdmaCudaDmabuf, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
