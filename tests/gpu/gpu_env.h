// What GPU tests share: the driver they run against (the real one, or the
// stand-in named by HAWSER_TEST_CUDA_DRIVER), device buffers, and the skip
// for a host without a GPU.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"

namespace hawser::test {

// The driver the test runs against: $HAWSER_TEST_CUDA_DRIVER, else libcuda.so.1.
inline std::string testCudaDriverPath() {
  const char* e = getenv("HAWSER_TEST_CUDA_DRIVER");
  return e && *e ? e : "libcuda.so.1";
}

// Engine config that loads the same driver (for engines and child processes).
inline std::map<std::string, std::string> gpuConfig() { return {{"gpu.cuda_driver", testCudaDriverPath()}}; }

inline const gpu::CudaDriver* testCudaDriver() { return gpu::CudaDriver::load(testCudaDriverPath()); }

// IPC mappings this process holds: the stand-in driver counts them; the real
// one cannot tell (-1).
inline int openedIpcHandles() {
  void* h = dlopen(testCudaDriverPath().c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto count = h ? reinterpret_cast<int (*)()>(dlsym(h, "hawserFakeCudaOpenedHandles")) : nullptr;
  int n = count ? count() : -1;
  if (h) dlclose(h);
  const char* sim = getenv("HAWSER_TEST_CUDA_DRIVER");
  EXPECT_TRUE(n >= 0 || !sim || !*sim) << "the stand-in driver's hawserFakeCudaOpenedHandles was not found";
  return n;
}

// Skips the test (with the reason) where there is no GPU.
#define HAWSER_REQUIRE_GPU(n)                                                                              \
  do {                                                                                                     \
    const ::hawser::gpu::CudaDriver* d_ = ::hawser::test::testCudaDriver();                               \
    if (!d_) GTEST_SKIP() << "no GPU on this host: " << ::hawser::gpu::CudaDriver::reason();              \
    if (d_->deviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, this host has " << d_->deviceCount(); \
  } while (0)

// Device memory of one GPU, freed at scope end. Host code never touches it
// directly: fill/read go through the driver's copies.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t n) : device_(device), n_(n) {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    EXPECT_TRUE(d->bindDevice(device).ok());
    gpu::cu::DevicePtr p = 0;
    EXPECT_EQ(d->api().MemAlloc(&p, n), gpu::cu::kSuccess);
    p_ = reinterpret_cast<char*>(p);
  }
  ~DeviceBuffer() {
    if (!p_) return;
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    d->api().MemFree(reinterpret_cast<gpu::cu::DevicePtr>(p_));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  char* data() const { return p_; }
  size_t size() const { return n_; }
  int device() const { return device_; }
  void upload(const std::vector<char>& host, size_t at = 0) const {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    ASSERT_EQ(d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(p_ + at),
                              reinterpret_cast<gpu::cu::DevicePtr>(host.data()), host.size()),
              gpu::cu::kSuccess);
  }
  std::vector<char> download(size_t at = 0, size_t n = SIZE_MAX) const {
    if (n == SIZE_MAX) n = n_ - at;
    std::vector<char> host(n);
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    EXPECT_EQ(d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(host.data()),
                              reinterpret_cast<gpu::cu::DevicePtr>(p_ + at), n),
              gpu::cu::kSuccess);
    return host;
  }
  void fill(unsigned char v) const {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    ASSERT_EQ(d->api().MemsetD8(reinterpret_cast<gpu::cu::DevicePtr>(p_), v, n_), gpu::cu::kSuccess);
  }

 private:
  int device_;
  size_t n_;
  char* p_ = nullptr;
};

}  // namespace hawser::test
