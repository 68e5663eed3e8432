#include "gpu/memory_probe.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include <fmt/format.h>

#include "base/transport.h"
#include "gpu/cuda_driver.h"

namespace hawser::gpu {

namespace {

int hostNode(const void* addr) {
#ifdef SYS_move_pages
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* pages[1] = {reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(addr) & ~(page - 1))};
  int status[1] = {-1};
  // With no target nodes, move_pages only reports where each page is.
  if (syscall(SYS_move_pages, 0, 1, pages, nullptr, status, 0) == 0 && status[0] >= 0) return status[0];
#endif
  return 0;
}

// "cuda:3" -> (true, 3); "cpu:1" -> (false, 1); anything else false. The
// numbers are read by base's gpuOrdinalOf / hostNodeOf, the one parse of a
// location.
bool parse(const std::string& loc, bool& device, int& index) {
  if (const int g = gpuOrdinalOf(loc); g >= 0) {
    device = true;
    index = g;
    return true;
  }
  if (const int n = hostNodeOf(loc); n >= 0) {
    device = false;
    index = n;
    return true;
  }
  return false;
}

}  // namespace

std::string MemoryPlace::location() const { return fmt::format("{}:{}", device ? "cuda" : "cpu", index); }

MemoryPlace probeMemory(const void* addr) {
  MemoryPlace place;
  if (const CudaDriver* d = CudaDriver::get()) {
    PointerInfo info = d->pointer(addr);
    if (info.device) {
      place.device = true;
      place.index = info.ordinal < 0 ? 0 : info.ordinal;
      return place;
    }
  }
  place.index = hostNode(addr);
  return place;
}

Status resolveLocation(const void* addr, size_t len, const std::string& given, std::string& out) {
  MemoryPlace found = probeMemory(addr);
  if (given.empty() || given == "*") {
    out = found.location();
    return Status::OK();
  }
  bool device = false;
  int index = 0;
  if (!parse(given, device, index))
    return Status(Code::kInvalidArgument,
                  fmt::format("location '{}' is neither '*', 'cpu:N' nor 'cuda:N'", given));
  if (device && !found.device) {
    std::string why = CudaDriver::get() ? "the CUDA driver says it is host memory"
                                        : "no CUDA driver is loaded (" + CudaDriver::reason() + ")";
    return Status(Code::kInvalidArgument,
                  fmt::format("location '{}' given for {:p}+{}, but {}: it would be {}", given, addr, len, why,
                              found.location()));
  }
  if (!device && found.device)
    return Status(Code::kInvalidArgument,
                  fmt::format("location '{}' given for {:p}+{}, but the CUDA driver says it is device memory of {}",
                              given, addr, len, found.location()));
  if (device && index != found.index)
    return Status(Code::kInvalidArgument,
                  fmt::format("location '{}' given for {:p}+{}, but the CUDA driver says it is memory of {}", given,
                              addr, len, found.location()));
  out = given;
  return Status::OK();
}

}  // namespace hawser::gpu
