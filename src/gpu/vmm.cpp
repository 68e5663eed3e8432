// CUDA virtual memory shared by file descriptor (vmm.h).
#include "gpu/vmm.h"

#include <unistd.h>

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "hawser/device_memory.h"

namespace hawser::gpu::vmm {

bool supported(const CudaDriver* d, std::string& why) {
  const cu::Api& a = d->api();
  std::string missing;
  auto need = [&](const void* fn, const char* name) {
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need(reinterpret_cast<const void*>(a.MemRetainAllocationHandle), "cuMemRetainAllocationHandle");
  need(reinterpret_cast<const void*>(a.MemGetAllocationPropertiesFromHandle), "cuMemGetAllocationPropertiesFromHandle");
  need(reinterpret_cast<const void*>(a.MemExportToShareableHandle), "cuMemExportToShareableHandle");
  need(reinterpret_cast<const void*>(a.MemImportFromShareableHandle), "cuMemImportFromShareableHandle");
  need(reinterpret_cast<const void*>(a.MemRelease), "cuMemRelease");
  need(reinterpret_cast<const void*>(a.MemAddressReserve), "cuMemAddressReserve");
  need(reinterpret_cast<const void*>(a.MemAddressFree), "cuMemAddressFree");
  need(reinterpret_cast<const void*>(a.MemMap), "cuMemMap");
  need(reinterpret_cast<const void*>(a.MemUnmap), "cuMemUnmap");
  need(reinterpret_cast<const void*>(a.MemSetAccess), "cuMemSetAccess");
  if (missing.empty()) return true;
  why = "the CUDA driver lacks " + missing;
  return false;
}

namespace {

// Exports the physical allocation mapped at `at` (a mapping's start) as an fd.
Status exportOne(const CudaDriver* d, uint64_t at, int& fd) {
  const cu::Api& a = d->api();
  cu::MemHandle h = 0;
  Status s = d->check(a.MemRetainAllocationHandle(&h, reinterpret_cast<void*>(at)),
                      fmt::format("cuMemRetainAllocationHandle({:#x})", at), Code::kNotSupported);
  if (!s.ok()) return s;
  cu::MemAllocationProp prop{};
  s = d->check(a.MemGetAllocationPropertiesFromHandle(&prop, h),
               fmt::format("cuMemGetAllocationPropertiesFromHandle({:#x})", at), Code::kNotSupported);
  if (s.ok() && (prop.requestedHandleTypes & cu::kMemHandleTypePosixFd) == 0)
    s = Status(Code::kNotSupported,
               fmt::format("the allocation mapped at {:#x} was made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR "
                           "in CUmemAllocationProp.requestedHandleTypes: it cannot be shared by file descriptor",
                           at));
  int out = -1;
  if (s.ok())
    s = d->check(a.MemExportToShareableHandle(&out, h, cu::kMemHandleTypePosixFd, 0),
                 fmt::format("cuMemExportToShareableHandle({:#x}, POSIX fd)", at), Code::kNotSupported);
  (void)a.MemRelease(h);  // the retain's reference; the mapping keeps the allocation
  if (!s.ok()) return s;
  fd = out;
  return Status::OK();
}

}  // namespace

Status exportRange(const CudaDriver* d, int device, const void* addr, size_t len, uint64_t& base, uint64_t& size,
                   std::vector<Piece>& pieces) {
  pieces.clear();
  std::string why;
  if (!supported(d, why)) return Status(Code::kNotSupported, why);
  ContextScope scope(d, device);
  if (!scope.status().ok()) return scope.status();
  const auto p = reinterpret_cast<uint64_t>(addr);
  auto fail = [&](Status s) {
    for (Piece& pc : pieces) ::close(pc.fd);
    pieces.clear();
    return s;
  };
  uint64_t next = p;
  while (next < p + len) {
    cu::DevicePtr mb = 0;
    size_t ms = 0;
    Status s = d->check(d->api().MemGetAddressRange(&mb, &ms, next), fmt::format("cuMemGetAddressRange({:#x})", next),
                        Code::kInvalidArgument);
    if (!s.ok())
      return fail(pieces.empty() ? s
                                 : Status(Code::kInvalidArgument,
                                          fmt::format("[{:#x}, +{}) is not mapped throughout: nothing is mapped at "
                                                      "{:#x}",
                                                      p, len, next)));
    if (!pieces.empty() && mb != next)
      return fail(Status(Code::kInvalidArgument,
                         fmt::format("[{:#x}, +{}) is not mapped throughout: the mapping after {:#x} starts at {:#x}",
                                     p, len, next, mb)));
    if (pieces.empty()) base = mb;
    Piece pc;
    pc.at = mb - base;
    pc.size = ms;
    if (!(s = exportOne(d, mb, pc.fd)).ok()) return fail(s);
    pieces.push_back(pc);
    next = mb + ms;
  }
  size = next - base;
  return Status::OK();
}

Status importRange(const CudaDriver* d, int device, std::span<const Piece> pieces, uint64_t size,
                   std::span<const int> also, uint64_t& va) {
  std::string why;
  if (!supported(d, why)) return Status(Code::kNotSupported, why);
  ContextScope scope(d, device);
  if (!scope.status().ok()) return scope.status();
  const cu::Api& a = d->api();
  cu::DevicePtr base = 0;
  Status s = d->check(a.MemAddressReserve(&base, size, 0, 0, 0), fmt::format("cuMemAddressReserve({} bytes)", size),
                      Code::kUnavailable);
  if (!s.ok()) return s;
  uint64_t mapped = 0;  // pieces mapped so far, in order
  for (const Piece& pc : pieces) {
    if (pc.at != mapped || pc.size == 0 || pc.at + pc.size > size) {
      s = Status(Code::kInvalidArgument, fmt::format("the pieces of a {}-byte range do not tile it (one at {}, +{})",
                                                     size, pc.at, pc.size));
      break;
    }
    cu::MemHandle h = 0;
    s = d->check(a.MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(pc.fd)),
                                                cu::kMemHandleTypePosixFd),
                 "cuMemImportFromShareableHandle(POSIX fd)", Code::kUnavailable);
    if (!s.ok()) break;
    s = d->check(a.MemMap(base + pc.at, pc.size, 0, h, 0), fmt::format("cuMemMap(+{}, {} bytes)", pc.at, pc.size),
                 Code::kUnavailable);
    (void)a.MemRelease(h);  // the mapping holds the allocation from here on
    if (!s.ok()) break;
    mapped += pc.size;
  }
  if (s.ok() && mapped != size)
    s = Status(Code::kInvalidArgument, fmt::format("the pieces cover {} of the range's {} bytes", mapped, size));
  if (s.ok()) {
    cu::MemAccessDesc access{{cu::kMemLocationTypeDevice, device}, cu::kMemAccessProtReadWrite};
    s = d->check(a.MemSetAccess(base, size, &access, 1), fmt::format("cuMemSetAccess(GPU {})", device),
                 Code::kUnavailable);
  }
  if (!s.ok()) {
    if (mapped) (void)a.MemUnmap(base, mapped);
    (void)a.MemAddressFree(base, size);
    return s;
  }
  // Other GPUs copy with it where they can reach it (peer to peer).
  for (int g : also) {
    if (g == device) continue;
    cu::MemAccessDesc access{{cu::kMemLocationTypeDevice, g}, cu::kMemAccessProtReadWrite};
    (void)a.MemSetAccess(base, size, &access, 1);
  }
  va = base;
  return Status::OK();
}

Status releaseRange(const CudaDriver* d, int device, uint64_t va, uint64_t size) {
  ContextScope scope(d, device);
  if (!scope.status().ok()) return scope.status();
  Status s = d->check(d->api().MemUnmap(va, size), fmt::format("cuMemUnmap({:#x}, {})", va, size));
  Status f = d->check(d->api().MemAddressFree(va, size), fmt::format("cuMemAddressFree({:#x}, {})", va, size));
  return s.ok() ? f : s;
}

}  // namespace hawser::gpu::vmm

// ---- the public allocator of mapped memory (hawser/device_memory.h) --------

namespace hawser {

namespace {

struct MappedRange {
  int device = -1;
  uint64_t size = 0;
  std::vector<gpu::cu::MemHandle> handles;
};
std::mutex g_mapped_mu;
std::map<uint64_t, MappedRange> g_mapped;  // by range start

// Unmaps and releases what a range holds (mapped: the bytes mapped so far).
void undoMapped(const gpu::CudaDriver* d, uint64_t va, uint64_t mapped, const MappedRange& r) {
  const gpu::cu::Api& a = d->api();
  if (mapped) (void)a.MemUnmap(va, mapped);
  for (gpu::cu::MemHandle h : r.handles) (void)a.MemRelease(h);
  (void)a.MemAddressFree(va, r.size);
}

}  // namespace

Status allocateMappedDeviceMemory(int device, size_t bytes, size_t chunk, void** out) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  if (!d) return Status(Code::kNotSupported, "no CUDA driver loaded: " + gpu::CudaDriver::reason());
  if (!out || bytes == 0) return Status(Code::kInvalidArgument, "allocateMappedDeviceMemory: null out or zero bytes");
  if (device < 0 || device >= d->deviceCount())
    return Status(Code::kInvalidArgument,
                  fmt::format("GPU {} does not exist ({} GPU(s) on this host)", device, d->deviceCount()));
  const gpu::cu::Api& a = d->api();
  if (!a.MemCreate || !a.MemMap || !a.MemAddressReserve || !a.MemSetAccess || !a.MemGetAllocationGranularity ||
      !a.MemUnmap || !a.MemRelease || !a.MemAddressFree)
    return Status(Code::kNotSupported, "the CUDA driver has no virtual memory management API");
  gpu::ContextScope scope(d, device);
  if (!scope.status().ok()) return scope.status();
  gpu::cu::MemAllocationProp prop{};
  prop.type = gpu::cu::kMemAllocationTypePinned;
  prop.requestedHandleTypes = gpu::cu::kMemHandleTypePosixFd;
  prop.location = {gpu::cu::kMemLocationTypeDevice, device};
  size_t gran = 0;
  Status s = d->check(a.MemGetAllocationGranularity(&gran, &prop, gpu::cu::kMemAllocGranularityMinimum),
                      "cuMemGetAllocationGranularity", Code::kNotSupported);
  if (!s.ok()) return s;
  if (chunk == 0) chunk = gran;
  if (chunk % gran != 0)
    return Status(Code::kInvalidArgument,
                  fmt::format("chunk {} is not a multiple of the driver's granularity {}", chunk, gran));
  MappedRange r;
  r.device = device;
  r.size = (bytes + chunk - 1) / chunk * chunk;
  gpu::cu::DevicePtr va = 0;
  s = d->check(a.MemAddressReserve(&va, r.size, 0, 0, 0), fmt::format("cuMemAddressReserve({} bytes)", r.size),
               Code::kInvalidArgument);
  if (!s.ok()) return s;
  uint64_t mapped = 0;
  while (mapped < r.size) {
    gpu::cu::MemHandle h = 0;
    s = d->check(a.MemCreate(&h, chunk, &prop, 0), fmt::format("cuMemCreate({} bytes on GPU {})", chunk, device),
                 Code::kInvalidArgument);
    if (!s.ok()) break;
    r.handles.push_back(h);
    s = d->check(a.MemMap(va + mapped, chunk, 0, h, 0), "cuMemMap", Code::kInvalidArgument);
    if (!s.ok()) break;
    mapped += chunk;
  }
  if (s.ok()) {
    gpu::cu::MemAccessDesc access{{gpu::cu::kMemLocationTypeDevice, device}, gpu::cu::kMemAccessProtReadWrite};
    s = d->check(a.MemSetAccess(va, r.size, &access, 1), "cuMemSetAccess", Code::kInvalidArgument);
  }
  if (!s.ok()) {
    undoMapped(d, va, mapped, r);
    return s;
  }
  std::lock_guard lk(g_mapped_mu);
  g_mapped[va] = std::move(r);
  *out = reinterpret_cast<void*>(va);
  return Status::OK();
}

Status freeMappedDeviceMemory(void* ptr) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  if (!d) return Status(Code::kNotSupported, "no CUDA driver loaded: " + gpu::CudaDriver::reason());
  MappedRange r;
  {
    std::lock_guard lk(g_mapped_mu);
    auto it = g_mapped.find(reinterpret_cast<uint64_t>(ptr));
    if (it == g_mapped.end())
      return Status(Code::kInvalidArgument, fmt::format("{} is not from allocateMappedDeviceMemory", ptr));
    r = std::move(it->second);
    g_mapped.erase(it);
  }
  gpu::ContextScope scope(d, r.device);
  undoMapped(d, reinterpret_cast<uint64_t>(ptr), r.size, r);
  return Status::OK();
}

}  // namespace hawser
