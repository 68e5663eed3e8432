// bench/registration.sh's helper: what registering a large region costs,
// through the public API, and how long after init() the first transfer
// from that region completes.
//
// For each size: map the region (host: anonymous mmap, untouched or every
// page written first; GPU: cuMemAlloc on GPU 0), init a target engine,
// register the region, then have a second engine in this process open the
// target's segment and read 4 KiB from the region's last page. One JSON
// line per measurement:
//   {"kind":"host","touched":false,"gib":4,"init_ms":3.1,"register_ms":0.4,
//    "ms_per_gib":0.1,"first_transfer_ms":2.5,"transport":"tcp"}
// first_transfer_ms runs from init() returning to that read completing
// (registration, openSegment and the read itself).
//
// Usage: registration_rate [--kind host|gpu] [--touched 0|1] [--sizes 1,4,16]  (GiB)
// GPU: the CUDA driver is loaded at run time (HAWSER_GPU_CUDA_DRIVER, default
// libcuda.so.1); without one the helper says why and exits 2.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"
#include "hawser/engine.h"

using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

bool check(const hawser::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "registration_rate: %s: %s\n", what, s.toString().c_str());
  return false;
}

// One measurement on [addr, addr + len) of `location`; false on error.
bool measure(void* addr, size_t len, const std::string& location, bool gpu, bool touched) {
  hawser::TransferEngine target, initiator;
  auto t_init = Clock::now();
  if (!check(target.init("p2p", "target", "127.0.0.1", 0), "target init")) return false;
  const double init_ms = msSince(t_init);
  auto t0 = Clock::now();
  if (!check(target.registerLocalMemory(addr, len, location, true), "register")) return false;
  const double reg_ms = msSince(t0);

  // The first transfer: another engine reads the region's last 4 KiB.
  static char local[4096];
  if (!check(initiator.init("p2p", "initiator", "127.0.0.1", 0), "initiator init")) return false;
  if (!check(initiator.registerLocalMemory(local, sizeof local, "cpu:0", true), "register local")) return false;
  hawser::SegmentID seg = 0;
  if (!check(initiator.openSegment(target.segmentName(), seg), "openSegment")) return false;
  hawser::RouteExplanation route;
  (void)initiator.explainRoute(seg, "cpu:0", route);
  const uint64_t remote = reinterpret_cast<uint64_t>(addr) + len - sizeof local;
  if (!check(initiator.transferSync({{hawser::OpCode::kRead, local, seg, remote, sizeof local}},
                                    std::chrono::seconds(30)),
             "first read"))
    return false;
  const double first_ms = msSince(t0);
  const double gib = static_cast<double>(len) / (1ull << 30);
  std::printf(
      "{\"kind\":\"%s\",\"touched\":%s,\"gib\":%g,\"init_ms\":%.3f,\"register_ms\":%.3f,\"ms_per_gib\":%.3f,"
      "\"first_transfer_ms\":%.3f,\"transport\":\"%s\"}\n",
      gpu ? "gpu" : "host", touched ? "true" : "false", gib, init_ms, reg_ms, reg_ms / gib, first_ms,
      route.transport.c_str());
  std::fflush(stdout);
  (void)target.unregisterLocalMemory(addr);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind = "host";
  bool touched = false;
  std::vector<size_t> sizes = {1, 4, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--kind") {
      kind = v;
    } else if (k == "--touched") {
      touched = v == "1";
    } else if (k == "--sizes") {
      sizes.clear();
      for (char* p = argv[i + 1]; *p;) {
        sizes.push_back(std::strtoull(p, &p, 10));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--kind host|gpu] [--touched 0|1] [--sizes 1,4,16]\n", argv[0]);
      return 2;
    }
  }
  if (kind == "gpu") {
    const char* path = std::getenv("HAWSER_GPU_CUDA_DRIVER");
    const auto* d = hawser::gpu::CudaDriver::load(path ? path : "libcuda.so.1");
    if (!d) {
      std::printf("{\"kind\":\"gpu\",\"skipped\":\"%s\"}\n", hawser::gpu::CudaDriver::reason().c_str());
      return 2;
    }
    if (!check(d->bindDevice(0), "bind GPU 0")) return 1;
    for (size_t g : sizes) {
      hawser::gpu::cu::DevicePtr p = 0;
      const size_t len = g << 30;
      if (d->api().MemAlloc(&p, len) != hawser::gpu::cu::kSuccess) {
        std::printf("{\"kind\":\"gpu\",\"gib\":%zu,\"skipped\":\"cuMemAlloc failed\"}\n", g);
        continue;
      }
      if (touched) (void)d->api().MemsetD8(p, 1, len);
      bool good = measure(reinterpret_cast<void*>(p), len, "cuda:0", true, touched);
      (void)d->api().MemFree(p);
      if (!good) return 1;
    }
    return 0;
  }
  for (size_t g : sizes) {
    const size_t len = g << 30;
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::printf("{\"kind\":\"host\",\"gib\":%zu,\"skipped\":\"mmap: %s\"}\n", g, std::strerror(errno));
      continue;
    }
    if (touched)
      for (size_t off = 0; off < len; off += 4096) static_cast<volatile char*>(p)[off] = 1;
    bool good = measure(p, len, "*", false, touched);
    ::munmap(p, len);
    if (!good) return 1;
  }
  return 0;
}
