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

// Whether the tests run against the stand-in driver (gpu_sim.*).
inline bool simulatedCuda() {
  const char* e = getenv("HAWSER_TEST_CUDA_DRIVER");
  return e && *e;
}

// Why there is no GPU to test on ("" when there is one).
inline std::string noGpuReason() {
  return testCudaDriver() ? "" : "no GPU on this host: " + gpu::CudaDriver::reason();
}

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

// A hook of the stand-in driver (tests/gpu/sim/fake_cuda.cpp), or null with the real one.
template <typename F>
F fakeHook(const char* name) {
  void* h = dlopen(testCudaDriverPath().c_str(), RTLD_NOW | RTLD_NOLOAD);
  F f = h ? reinterpret_cast<F>(dlsym(h, name)) : nullptr;
  if (h) dlclose(h);
  return f;
}

// The stand-in driver's count of calls of `what` (hawserFakeCudaCalls:
// "launch", "batch", "memcpy_async", "pointer"); -1 with the real driver.
inline long long fakeCudaCalls(const char* what) {
  auto f = fakeHook<long long (*)(const char*)>("hawserFakeCudaCalls");
  return f ? f(what) : -1;
}

// Holds the stand-in driver's streams for a scope (nothing queued runs, as
// on a busy GPU): `hold` is its hawserFakeCudaHoldStreams.
struct Held {
  explicit Held(void (*hold)(int)) : hold_(hold) { hold_(1); }
  ~Held() { release(); }
  Held(const Held&) = delete;
  void release() {
    if (hold_) hold_(0);
    hold_ = nullptr;
  }
  void (*hold_)(int);
};

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
    // From pageable memory cuMemcpy returns once the bytes are staged; the
    // DMA may still be landing them when a transfer on another stream starts.
    ASSERT_EQ(d->api().StreamSynchronize(nullptr), gpu::cu::kSuccess);
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
    ASSERT_EQ(d->api().StreamSynchronize(nullptr), gpu::cu::kSuccess);  // memset of device memory is async to the host
  }

 private:
  int device_;
  size_t n_;
  char* p_ = nullptr;
};

// Device memory as PyTorch's expandable segments and NCCL allocate it
// (virtual memory management): `chunks` physical allocations of the
// driver's granularity (cuMemCreate, gpuDirectRDMACapable as asked), mapped
// back to back (cuMemMap) one granularity into a larger reservation, and
// made read-write for `device`. `fd_shareable`: cuMemCreate requests the
// POSIX file descriptor handle type (as PyTorch's expandable segments do),
// so nvlink can share it by fd. reason() says why it could not be made
// (a driver without the API): skip then.
class MappedBuffer {
 public:
  MappedBuffer(int device, int chunks, bool rdma_capable = true, bool fd_shareable = false) : device_(device) {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    const gpu::cu::Api& a = d->api();
    if (!a.MemCreate || !a.MemMap || !a.MemAddressReserve || !a.MemSetAccess || !a.MemGetAllocationGranularity) {
      reason_ = "the CUDA driver has no virtual memory management API";
      return;
    }
    gpu::cu::MemAllocationProp prop{};
    prop.type = gpu::cu::kMemAllocationTypePinned;
    prop.requestedHandleTypes = fd_shareable ? gpu::cu::kMemHandleTypePosixFd : gpu::cu::kMemHandleTypeNone;
    prop.location = {gpu::cu::kMemLocationTypeDevice, device};
    prop.allocFlags.gpuDirectRDMACapable = rdma_capable ? 1 : 0;
    if (a.MemGetAllocationGranularity(&gran_, &prop, gpu::cu::kMemAllocGranularityMinimum) != gpu::cu::kSuccess) {
      reason_ = "cuMemGetAllocationGranularity failed";
      return;
    }
    EXPECT_TRUE(d->bindDevice(device).ok());
    reserved_ = gran_ * static_cast<size_t>(chunks + 2);
    if (a.MemAddressReserve(&base_, reserved_, gran_, 0, 0) != gpu::cu::kSuccess) {
      reason_ = "cuMemAddressReserve failed";
      return;
    }
    n_ = gran_ * static_cast<size_t>(chunks);
    for (int i = 0; i < chunks; ++i) {
      gpu::cu::MemHandle h = 0;
      gpu::cu::Result rc = a.MemCreate(&h, gran_, &prop, 0);
      if (rc != gpu::cu::kSuccess) {
        ADD_FAILURE() << "cuMemCreate: CUresult " << rc;
        return;
      }
      handles_.push_back(h);
      rc = a.MemMap(base_ + gran_ * static_cast<size_t>(1 + i), gran_, 0, h, 0);
      if (rc != gpu::cu::kSuccess) {
        ADD_FAILURE() << "cuMemMap: CUresult " << rc;
        return;
      }
      mapped_ += gran_;
    }
    gpu::cu::MemAccessDesc access{{gpu::cu::kMemLocationTypeDevice, device}, gpu::cu::kMemAccessProtReadWrite};
    gpu::cu::Result rc = a.MemSetAccess(base_ + gran_, n_, &access, 1);
    if (rc != gpu::cu::kSuccess) {
      ADD_FAILURE() << "cuMemSetAccess: CUresult " << rc;
      return;
    }
    p_ = reinterpret_cast<char*>(base_ + gran_);
  }
  ~MappedBuffer() {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d || !base_) return;
    const gpu::cu::Api& a = d->api();
    (void)d->bindDevice(device_);
    if (mapped_) a.MemUnmap(base_ + gran_, mapped_);
    for (gpu::cu::MemHandle h : handles_) a.MemRelease(h);
    a.MemAddressFree(base_, reserved_);
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  const std::string& reason() const { return reason_; }
  char* data() const { return p_; }
  size_t size() const { return n_; }
  size_t granularity() const { return gran_; }
  void upload(const std::vector<char>& host, size_t at = 0) const {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    ASSERT_EQ(d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(p_ + at),
                              reinterpret_cast<gpu::cu::DevicePtr>(host.data()), host.size()),
              gpu::cu::kSuccess);
    // From pageable memory cuMemcpy returns once the bytes are staged; the
    // DMA may still be landing them when a transfer on another stream starts.
    ASSERT_EQ(d->api().StreamSynchronize(nullptr), gpu::cu::kSuccess);
  }
  std::vector<char> download(size_t at, size_t n) const {
    std::vector<char> host(n);
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    (void)d->bindDevice(device_);
    EXPECT_EQ(d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(host.data()),
                              reinterpret_cast<gpu::cu::DevicePtr>(p_ + at), n),
              gpu::cu::kSuccess);
    return host;
  }

 private:
  int device_;
  std::string reason_;
  size_t gran_ = 0, reserved_ = 0, n_ = 0, mapped_ = 0;
  gpu::cu::DevicePtr base_ = 0;
  std::vector<gpu::cu::MemHandle> handles_;
  char* p_ = nullptr;
};

}  // namespace hawser::test
