// bench/nvlink.sh's baseline: what the CUDA driver alone does for the copies
// the nvlink transport makes, in one process: cuMemcpyPeerAsync GPU 0 ->
// GPU 1 and GPU 1 -> GPU 0, and cuMemcpyAsync device to device within GPU 0,
// back to back on one stream, for each size. One JSON line per measurement:
//   {"kind":"peer","from":0,"to":1,"size":1048576,"gbps":123.4}
//   {"kind":"d2d","gpu":0,"size":1048576,"gbps":456.7}
// The driver is loaded at run time (env HAWSER_GPU_CUDA_DRIVER, default
// libcuda.so.1), so this builds and runs on a host without CUDA: it then
// says so and exits 2. `--count` prints the number of GPUs (0 and why).
//
// Usage: nvlink_baseline [--count] [--seconds S] [--sizes 1,16,64,256]  (sizes in MiB)
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"

using namespace hawser::gpu;
using Clock = std::chrono::steady_clock;

namespace {

bool ok(const CudaDriver* d, cu::Result rc, const char* what) {
  if (rc == cu::kSuccess) return true;
  std::fprintf(stderr, "nvlink_baseline: %s\n", d->check(rc, what).message().c_str());
  return false;
}

// GB/s of back-to-back copies of `size` bytes for about `seconds`.
double measure(const CudaDriver* d, cu::Stream s, double seconds, size_t size,
               const std::function<cu::Result()>& copy) {
  const cu::Api& a = d->api();
  for (int i = 0; i < 3; ++i)
    if (!ok(d, copy(), "warm-up copy")) return -1;
  if (!ok(d, a.StreamSynchronize(s), "cuStreamSynchronize")) return -1;
  uint64_t bytes = 0;
  auto t0 = Clock::now();
  double el = 0;
  do {
    for (int i = 0; i < 8; ++i) {
      if (!ok(d, copy(), "copy")) return -1;
      bytes += size;
    }
    if (!ok(d, a.StreamSynchronize(s), "cuStreamSynchronize")) return -1;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < seconds);
  return bytes / el / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::vector<size_t> sizes = {1, 16, 64, 256};
  bool count_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--count") {
      count_only = true;
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) sizes.push_back(std::atol(p));
    } else {
      std::fprintf(stderr, "usage: nvlink_baseline [--count] [--seconds S] [--sizes 1,16,64,256]  (MiB)\n");
      return 2;
    }
  }
  const char* env = std::getenv("HAWSER_GPU_CUDA_DRIVER");
  const CudaDriver* d = CudaDriver::load(env && *env ? env : "libcuda.so.1");
  if (count_only) {
    if (d) std::printf("%d\n", d->deviceCount());
    else std::printf("0 %s\n", CudaDriver::reason().c_str());
    return 0;
  }
  if (!d) {
    std::fprintf(stderr, "nvlink_baseline: no GPU on this host: %s\n", CudaDriver::reason().c_str());
    return 2;
  }
  const cu::Api& a = d->api();
  const int gpus = d->deviceCount() >= 2 ? 2 : 1;
  size_t biggest = 0;
  for (size_t m : sizes) biggest = std::max(biggest, m << 20);
  // Two buffers on GPU 0 (d2d), one on GPU 1 (peer); a stream on each GPU.
  cu::DevicePtr buf[3] = {0, 0, 0};
  cu::Stream stream[2] = {nullptr, nullptr};
  for (int g = 0; g < gpus; ++g) {
    if (!d->bindDevice(g).ok() || !ok(d, a.StreamCreate(&stream[g], cu::kStreamNonBlocking), "cuStreamCreate"))
      return 1;
    for (int k = g == 0 ? 0 : 2; k < (g == 0 ? 2 : 3); ++k)
      if (!ok(d, a.MemAlloc(&buf[k], biggest), "cuMemAlloc") || !ok(d, a.MemsetD8(buf[k], 1, biggest), "cuMemset"))
        return 1;
  }
  if (gpus < 2) std::fprintf(stderr, "nvlink_baseline: one GPU: peer copies skipped\n");
  for (size_t m : sizes) {
    const size_t size = m << 20;
    if (gpus == 2) {
      for (int from = 0; from < 2; ++from) {
        const int to = 1 - from;
        cu::DevicePtr src = from == 0 ? buf[0] : buf[2], dst = to == 0 ? buf[0] : buf[2];
        (void)d->bindDevice(to);
        double gbps = measure(d, stream[to], seconds, size, [&] {
          return a.MemcpyPeerAsync(dst, d->context(to), src, d->context(from), size, stream[to]);
        });
        if (gbps < 0) return 1;
        std::printf("{\"kind\":\"peer\",\"from\":%d,\"to\":%d,\"size\":%zu,\"gbps\":%.3f}\n", from, to, size, gbps);
        std::fflush(stdout);
      }
    }
    (void)d->bindDevice(0);
    double gbps = measure(d, stream[0], seconds, size,
                          [&] { return a.MemcpyAsync(buf[1], buf[0], size, stream[0]); });
    if (gbps < 0) return 1;
    std::printf("{\"kind\":\"d2d\",\"gpu\":0,\"size\":%zu,\"gbps\":%.3f}\n", size, gbps);
    std::fflush(stdout);
  }
  for (int g = 0; g < gpus; ++g) {
    (void)d->bindDevice(g);
    a.StreamDestroy(stream[g]);
    for (int k = g == 0 ? 0 : 2; k < (g == 0 ? 2 : 3); ++k) a.MemFree(buf[k]);
  }
  return 0;
}
