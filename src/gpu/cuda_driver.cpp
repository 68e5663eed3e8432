#include "gpu/cuda_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "base/log.h"

namespace hawser::gpu {

namespace {

std::mutex g_mu;
const CudaDriver* g_driver = nullptr;
bool g_tried = false;
std::string g_reason;

constexpr int kMaxDevices = 64;
// Primary contexts, retained once per device for the life of the process.
std::array<cu::Context, kMaxDevices> g_contexts{};
std::mutex g_ctx_mu;

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

const CudaDriver* CudaDriver::load(const std::string& path) {
  std::lock_guard lk(g_mu);
  if (g_tried) {
    if (g_driver && path != g_driver->path_)
      HLOG_WARN("gpu.cuda_driver '{}' ignored: this process already loaded '{}'", path, g_driver->path_);
    return g_driver;
  }
  g_tried = true;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    g_reason = fmt::format("CUDA driver '{}' not loaded: {}", path, e ? e : "?");
    HLOG_DEBUG("{}", g_reason);
    return nullptr;
  }
  auto* d = new CudaDriver();
  d->path_ = path;
  cu::Api& a = d->api_;
  std::string missing;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(lib, name, fn)) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need("cuInit", a.Init);
  need("cuDeviceGetCount", a.DeviceGetCount);
  need("cuDeviceGet", a.DeviceGet);
  need("cuDeviceGetPCIBusId", a.DeviceGetPCIBusId);
  need("cuDevicePrimaryCtxRetain", a.DevicePrimaryCtxRetain);
  need("cuCtxSetCurrent", a.CtxSetCurrent);
  need("cuCtxGetCurrent", a.CtxGetCurrent);
  need("cuPointerGetAttribute", a.PointerGetAttribute);
  need("cuMemGetAddressRange_v2", a.MemGetAddressRange);
  need("cuMemAlloc_v2", a.MemAlloc);
  need("cuMemFree_v2", a.MemFree);
  need("cuMemHostAlloc", a.MemHostAlloc);
  need("cuMemFreeHost", a.MemFreeHost);
  need("cuMemHostRegister_v2", a.MemHostRegister);
  need("cuMemHostUnregister", a.MemHostUnregister);
  need("cuMemcpy", a.Memcpy);
  need("cuMemcpyAsync", a.MemcpyAsync);
  need("cuMemcpyPeerAsync", a.MemcpyPeerAsync);
  need("cuMemsetD8_v2", a.MemsetD8);
  need("cuStreamCreate", a.StreamCreate);
  need("cuStreamDestroy_v2", a.StreamDestroy);
  need("cuStreamSynchronize", a.StreamSynchronize);
  need("cuEventCreate", a.EventCreate);
  need("cuEventDestroy_v2", a.EventDestroy);
  need("cuEventRecord", a.EventRecord);
  need("cuEventQuery", a.EventQuery);
  need("cuEventSynchronize", a.EventSynchronize);
  need("cuIpcGetMemHandle", a.IpcGetMemHandle);
  need("cuIpcOpenMemHandle_v2", a.IpcOpenMemHandle);
  need("cuIpcCloseMemHandle", a.IpcCloseMemHandle);
  need("cuGetErrorString", a.GetErrorString);
  resolve(lib, "cuMemGetHandleForAddressRange", a.MemGetHandleForAddressRange);
  resolve(lib, "cuMemCreate", a.MemCreate);
  resolve(lib, "cuMemRelease", a.MemRelease);
  resolve(lib, "cuMemAddressReserve", a.MemAddressReserve);
  resolve(lib, "cuMemAddressFree", a.MemAddressFree);
  resolve(lib, "cuMemMap", a.MemMap);
  resolve(lib, "cuMemUnmap", a.MemUnmap);
  resolve(lib, "cuMemSetAccess", a.MemSetAccess);
  resolve(lib, "cuMemGetAllocationGranularity", a.MemGetAllocationGranularity);
  resolve(lib, "cuMemRetainAllocationHandle", a.MemRetainAllocationHandle);
  resolve(lib, "cuMemGetAllocationPropertiesFromHandle", a.MemGetAllocationPropertiesFromHandle);
  resolve(lib, "cuMemExportToShareableHandle", a.MemExportToShareableHandle);
  resolve(lib, "cuMemImportFromShareableHandle", a.MemImportFromShareableHandle);
  resolve(lib, "cuModuleLoadData", a.ModuleLoadData);
  resolve(lib, "cuModuleUnload", a.ModuleUnload);
  resolve(lib, "cuModuleGetFunction", a.ModuleGetFunction);
  resolve(lib, "cuLaunchKernel", a.LaunchKernel);
  resolve(lib, "cuDeviceGetAttribute", a.DeviceGetAttribute);
  resolve(lib, "cuCtxEnablePeerAccess", a.CtxEnablePeerAccess);
  resolve(lib, "cuMemcpyBatchAsync_v2", a.MemcpyBatchAsync);
  if (!missing.empty()) {
    g_reason = fmt::format("CUDA driver '{}' lacks entry points: {}", path, missing);
    HLOG_WARN("{}", g_reason);
    delete d;
    return nullptr;
  }
  cu::Result rc = a.Init(0);
  if (rc != cu::kSuccess) {
    g_reason = fmt::format("CUDA driver '{}': cuInit failed (CUresult {}): no usable GPU", path, rc);
    HLOG_INFO("{}", g_reason);
    delete d;
    return nullptr;
  }
  if (a.DeviceGetCount(&d->devices_) != cu::kSuccess || d->devices_ <= 0) {
    g_reason = fmt::format("CUDA driver '{}' sees no GPU", path);
    HLOG_INFO("{}", g_reason);
    delete d;
    return nullptr;
  }
  HLOG_INFO("CUDA driver '{}' loaded: {} GPU(s)", path, d->devices_);
  g_driver = d;
  return g_driver;
}

const CudaDriver* CudaDriver::get() {
  std::lock_guard lk(g_mu);
  return g_driver;
}

std::string CudaDriver::reason() {
  std::lock_guard lk(g_mu);
  return g_reason;
}

Status CudaDriver::check(cu::Result rc, std::string_view what, Code code) const {
  if (rc == cu::kSuccess) return Status::OK();
  const char* text = nullptr;
  if (api_.GetErrorString(rc, &text) != cu::kSuccess || !text) text = "unknown CUDA error";
  return Status(code, fmt::format("{}: {} (CUresult {})", what, text, rc));
}

PointerInfo CudaDriver::pointer(const void* addr) const {
  PointerInfo info;
  unsigned type = 0;
  auto p = reinterpret_cast<cu::DevicePtr>(addr);
  if (api_.PointerGetAttribute(&type, cu::kPointerAttributeMemoryType, p) != cu::kSuccess) return info;
  if (type != cu::kMemoryTypeDevice && type != cu::kMemoryTypeUnified) return info;
  info.device = true;
  int ordinal = -1;
  if (api_.PointerGetAttribute(&ordinal, cu::kPointerAttributeDeviceOrdinal, p) == cu::kSuccess)
    info.ordinal = ordinal;
  int legacy = 1;
  if (type == cu::kMemoryTypeDevice &&
      api_.PointerGetAttribute(&legacy, cu::kPointerAttributeIsLegacyCudaIpcCapable, p) == cu::kSuccess)
    info.mapped = legacy == 0;
  int rdma = 1;
  if (api_.PointerGetAttribute(&rdma, cu::kPointerAttributeIsGpuDirectRdmaCapable, p) == cu::kSuccess)
    info.rdma_capable = rdma != 0;
  return info;
}

cu::Context CudaDriver::context(int ordinal) const {
  if (ordinal < 0 || ordinal >= devices_ || ordinal >= kMaxDevices) return nullptr;
  std::lock_guard lk(g_ctx_mu);
  if (!g_contexts[ordinal]) {
    cu::Device dev = 0;
    cu::Context ctx = nullptr;
    if (api_.DeviceGet(&dev, ordinal) != cu::kSuccess) return nullptr;
    if (api_.DevicePrimaryCtxRetain(&ctx, dev) != cu::kSuccess) return nullptr;
    g_contexts[ordinal] = ctx;
  }
  return g_contexts[ordinal];
}

Status CudaDriver::bindDevice(int ordinal) const {
  cu::Context ctx = context(ordinal);
  if (!ctx)
    return Status(Code::kInvalidArgument,
                  fmt::format("GPU {} has no usable context ({} GPU(s) on this host)", ordinal, devices_));
  return checkLazy(api_.CtxSetCurrent(ctx), [&] { return fmt::format("cuCtxSetCurrent(GPU {})", ordinal); });
}

ContextScope::ContextScope(const CudaDriver* d, int ordinal) : d_(d) {
  if (ordinal < 0) return;
  if (d_->api().CtxGetCurrent(&saved_) != cu::kSuccess) saved_ = nullptr;
  status_ = d_->bindDevice(ordinal);
  bound_ = status_.ok();
}

ContextScope::~ContextScope() {
  if (bound_) d_->api().CtxSetCurrent(saved_);
}

Status CudaDriver::allocation(const void* addr, uint64_t& base, size_t& size) const {
  cu::DevicePtr b = 0;
  size_t s = 0;
  auto p = reinterpret_cast<cu::DevicePtr>(addr);
  // The range queries need a current context: the caller's thread may never
  // have touched CUDA (a registration from any thread must work).
  PointerInfo info = pointer(addr);
  ContextScope scope(this, info.device ? (info.ordinal < 0 ? 0 : info.ordinal) : -1);
  if (!scope.status().ok()) return scope.status();
  Status st = check(api_.MemGetAddressRange(&b, &s, p), fmt::format("cuMemGetAddressRange({:#x})", p),
                    Code::kInvalidArgument);
  if (!st.ok()) return st;
  base = b;
  size = s;
  return Status::OK();
}

Status CudaDriver::dmabuf(const void* addr, size_t len, int& fd, uint64_t& offset) const {
  if (!api_.MemGetHandleForAddressRange)
    return Status(Code::kNotSupported, "CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7+)");
  // Both calls need a current context, for the whole export.
  PointerInfo info = pointer(addr);
  ContextScope scope(this, info.device ? (info.ordinal < 0 ? 0 : info.ordinal) : -1);
  if (!scope.status().ok()) return scope.status();
  uint64_t base = 0;
  size_t size = 0;
  Status st = allocation(addr, base, size);
  if (!st.ok()) return st;
  auto p = reinterpret_cast<uint64_t>(addr);
  // Mapped memory: cuMemGetAddressRange names only the mapping holding an
  // address; a range may run on into the next mappings of its reservation.
  while (info.mapped && base + size < p + len) {
    uint64_t next = 0;
    size_t next_size = 0;
    if (!allocation(reinterpret_cast<const void*>(base + size), next, next_size).ok() || next != base + size) break;
    size += next_size;
  }
  if (p + len > base + size)
    return Status(Code::kInvalidArgument,
                  fmt::format("GPU range [{:#x}, +{}) crosses the end of its {}", p, len,
                              info.mapped ? "mapped range (an unmapped gap, or another reservation)" : "allocation"));
  // dma-buf export works on whole host pages of the allocation.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t start = base & ~(page - 1);
  uint64_t end = (base + size + page - 1) & ~(page - 1);
  int out = -1;
  cu::Result rc = api_.MemGetHandleForAddressRange(&out, start, end - start, cu::kRangeHandleDmaBufFd, 0);
  // Only "not supported" means the driver cannot export one; any other
  // error is a failure to report as such.
  if (rc != cu::kSuccess || out < 0) {
    Status why = check(rc == cu::kSuccess ? cu::kErrorNotSupported : rc, "cuMemGetHandleForAddressRange(dma-buf)",
                       rc == cu::kSuccess || rc == cu::kErrorNotSupported ? Code::kNotSupported : Code::kIoError);
    if (info.mapped && !info.rdma_capable)
      return Status(why.code(), why.message() + " (this memory was mapped with cuMemMap from an allocation made "
                                                "without CUmemAllocationProp.allocFlags.gpuDirectRDMACapable = 1: "
                                                "a NIC cannot reach it)");
    return why;
  }
  fd = out;
  offset = p - start;
  return Status::OK();
}

int CudaDriver::numaNode(int ordinal) const {
  cu::Device dev = 0;
  if (api_.DeviceGet(&dev, ordinal) != cu::kSuccess) return -1;
  char bus[64] = {0};
  if (api_.DeviceGetPCIBusId(bus, sizeof(bus), dev) != cu::kSuccess) return -1;
  std::string id(bus);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int n = -1;
  if (f >> n) return n < 0 ? -1 : n;
  return -1;
}

}  // namespace hawser::gpu
