// The public GPU memory helpers (hawser/device_memory.h): copyMemory returns
// once the bytes are in place, so whatever reads them next, on any stream,
// reads them. From pageable host memory cuMemcpy alone does not promise
// that: it returns once the bytes are staged (the stand-in driver lands them
// 2 ms later, as a GPU's DMA may), and a transfer started at once on another
// stream read or overwrote stale bytes (nvlink bench_kv mismatches, H200).
#include <gtest/gtest.h>

#include <vector>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/device_memory.h"

namespace hawser::test {
namespace {

constexpr unsigned kNonBlocking = 1;  // CU_STREAM_NON_BLOCKING: no ordering with the legacy stream

// Device memory read back through a stream of its own, as a transport's
// copy would read it.
std::vector<char> readOnOtherStream(const void* dev, size_t n) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  std::vector<char> host(n);
  gpu::cu::Stream s = nullptr;
  EXPECT_EQ(d->api().StreamCreate(&s, kNonBlocking), gpu::cu::kSuccess);
  EXPECT_EQ(d->api().MemcpyAsync(reinterpret_cast<gpu::cu::DevicePtr>(host.data()),
                                 reinterpret_cast<gpu::cu::DevicePtr>(dev), n, s),
            gpu::cu::kSuccess);
  EXPECT_EQ(d->api().StreamSynchronize(s), gpu::cu::kSuccess);
  EXPECT_EQ(d->api().StreamDestroy(s), gpu::cu::kSuccess);
  return host;
}

TEST(device_memory, copy_from_pageable_host_memory_has_landed_when_it_returns) {
  HAWSER_REQUIRE_GPU(1);
  ASSERT_TRUE(loadCudaDriver(testCudaDriverPath()).ok());
  const size_t n = 16u << 20;
  void* dev = nullptr;
  ASSERT_TRUE(allocateDeviceMemory(0, n, &dev).ok());
  std::vector<char> host(n);  // pageable: a plain heap vector
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    fillPattern(host.data(), n, seed);
    ASSERT_TRUE(copyMemory(dev, host.data(), n).ok());
    const std::vector<char> back = readOnOtherStream(dev, n);
    ASSERT_EQ(checkPattern(back.data(), n, seed), -1) << "copy " << seed << " had not landed when copyMemory returned";
  }
  EXPECT_TRUE(freeDeviceMemory(dev).ok());
}

TEST(device_memory, copy_back_to_host_memory_holds_what_the_device_holds) {
  HAWSER_REQUIRE_GPU(1);
  ASSERT_TRUE(loadCudaDriver(testCudaDriverPath()).ok());
  const size_t n = 4u << 20;
  void* dev = nullptr;
  ASSERT_TRUE(allocateDeviceMemory(0, n, &dev).ok());
  std::vector<char> host(n), back(n);
  fillPattern(host.data(), n, 77);
  ASSERT_TRUE(copyMemory(dev, host.data(), n).ok());
  ASSERT_TRUE(copyMemory(back.data(), dev, n).ok());
  EXPECT_EQ(checkPattern(back.data(), n, 77), -1);
  EXPECT_TRUE(freeDeviceMemory(dev).ok());
}

}  // namespace
}  // namespace hawser::test
