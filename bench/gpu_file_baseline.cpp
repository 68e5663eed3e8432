// Baseline for bench/file_gpu.sh: the simplest way to move a file to or from
// GPU memory, serially: O_DIRECT pread into a pinned host buffer then a
// synchronous copy to the GPU (read), or a copy from the GPU then O_DIRECT
// pwrite (write), one block at a time over the same region hawser bench uses.
//
//   gpu_file_baseline --file PATH --op read|write [--bs 1M] [--span BYTES]
//                     [--seconds 5] [--device 0] [--cuda-driver libcuda.so.1]
//   gpu_file_baseline --probe [--device 0]     # exit 0 when the GPU is usable
//
// Prints one JSON line {"op", "block_size", "bytes", "seconds", "gbps"}.
// The CUDA driver is loaded at run time, so this builds on hosts without
// CUDA; without a GPU it says why and exits 77 (the "skip" code).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/cuda_api.h"

namespace cu = hawser::gpu::cu;

namespace {

struct Driver {
  cu::Result (*Init)(unsigned);
  cu::Result (*DeviceGet)(cu::Device*, int);
  cu::Result (*DevicePrimaryCtxRetain)(cu::Context*, cu::Device);
  cu::Result (*CtxSetCurrent)(cu::Context);
  cu::Result (*MemAlloc)(cu::DevicePtr*, size_t);
  cu::Result (*MemHostAlloc)(void**, size_t, unsigned);
  cu::Result (*Memcpy)(cu::DevicePtr, cu::DevicePtr, size_t);
};

int die(int code, const std::string& msg) {
  std::fprintf(stderr, "gpu_file_baseline: %s\n", msg.c_str());
  return code;
}

uint64_t parseSize(const char* s) {
  char* end = nullptr;
  uint64_t v = std::strtoull(s, &end, 10);
  switch (end && *end ? *end : 0) {
    case 'K': case 'k': return v << 10;
    case 'M': case 'm': return v << 20;
    case 'G': case 'g': return v << 30;
    default: return v;
  }
}

template <typename F>
bool sym(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, op = "read", driver = "libcuda.so.1";
  uint64_t bs = 1 << 20, span = 0;
  double seconds = 5;
  int device = 0;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_file_baseline: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--probe") probe = true;
    else if (a == "--file") file = next();
    else if (a == "--op") op = next();
    else if (a == "--bs") bs = parseSize(next());
    else if (a == "--span") span = parseSize(next());
    else if (a == "--seconds") seconds = std::atof(next());
    else if (a == "--device") device = std::atoi(next());
    else if (a == "--cuda-driver") driver = next();
    else return die(2, "unknown option " + a + " (see the header of bench/gpu_file_baseline.cpp)");
  }
  if (!probe && (file.empty() || (op != "read" && op != "write") || bs == 0 || bs % 4096 != 0))
    return die(2, "need --file PATH, --op read|write and --bs a multiple of 4096");

  void* lib = dlopen(driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return die(77, "no CUDA driver (" + driver + "): " + dlerror());
  Driver d{};
  if (!sym(lib, "cuInit", d.Init) || !sym(lib, "cuDeviceGet", d.DeviceGet) ||
      !sym(lib, "cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain) ||
      !sym(lib, "cuCtxSetCurrent", d.CtxSetCurrent) || !sym(lib, "cuMemAlloc_v2", d.MemAlloc) ||
      !sym(lib, "cuMemHostAlloc", d.MemHostAlloc) || !sym(lib, "cuMemcpy", d.Memcpy))
    return die(77, "the CUDA driver " + driver + " lacks entry points");
  cu::Device dev = 0;
  cu::Context ctx = nullptr;
  if (cu::Result r = d.Init(0); r != cu::kSuccess) return die(77, "no GPU: cuInit failed (CUresult " + std::to_string(r) + ")");
  if (d.DeviceGet(&dev, device) != cu::kSuccess || d.DevicePrimaryCtxRetain(&ctx, dev) != cu::kSuccess ||
      d.CtxSetCurrent(ctx) != cu::kSuccess)
    return die(77, "no GPU " + std::to_string(device));
  if (probe) return 0;
  cu::DevicePtr gpu = 0;
  void* host = nullptr;
  if (d.MemAlloc(&gpu, bs) != cu::kSuccess) return die(1, "cuMemAlloc failed");
  if (d.MemHostAlloc(&host, bs, cu::kMemHostAllocPortable) != cu::kSuccess) return die(1, "cuMemHostAlloc failed");
  std::memset(host, 0x5a, bs);

  const bool write = op == "write";
  int fd = ::open(file.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return die(1, "open " + file + " with O_DIRECT: " + std::strerror(errno));
  if (span == 0) span = static_cast<uint64_t>(::lseek(fd, 0, SEEK_END));
  span -= span % bs;
  if (span < bs) return die(2, file + " is smaller than one block");

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  uint64_t bytes = 0, off = 0;
  double el = 0;
  while ((el = std::chrono::duration<double>(Clock::now() - t0).count()) < seconds) {
    if (write) {
      if (d.Memcpy(reinterpret_cast<cu::DevicePtr>(host), gpu, bs) != cu::kSuccess) return die(1, "cuMemcpy D2H");
      if (::pwrite(fd, host, bs, static_cast<off_t>(off)) != static_cast<ssize_t>(bs))
        return die(1, std::string("pwrite: ") + std::strerror(errno));
    } else {
      if (::pread(fd, host, bs, static_cast<off_t>(off)) != static_cast<ssize_t>(bs))
        return die(1, std::string("pread: ") + std::strerror(errno));
      if (d.Memcpy(gpu, reinterpret_cast<cu::DevicePtr>(host), bs) != cu::kSuccess) return die(1, "cuMemcpy H2D");
    }
    bytes += bs;
    off = (off + bs) % span;
  }
  ::close(fd);
  std::printf("{\"op\":\"%s\",\"block_size\":%llu,\"bytes\":%llu,\"seconds\":%.3f,\"gbps\":%.4f}\n", op.c_str(),
              static_cast<unsigned long long>(bs), static_cast<unsigned long long>(bytes), el, bytes / el / 1e9);
  return 0;
}
