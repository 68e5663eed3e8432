// The public GPU memory helpers (hawser/device_memory.h).
#include "hawser/device_memory.h"

#include <fmt/format.h>

#include "gpu/cuda_driver.h"
#include "hawser/config.h"
#include "hawser/engine.h"

namespace hawser {

namespace {
Status driver(const gpu::CudaDriver*& d) {
  d = gpu::CudaDriver::get();
  if (!d) return Status(Code::kNotSupported, "no CUDA driver loaded: " + gpu::CudaDriver::reason());
  return Status::OK();
}
}  // namespace

Status loadCudaDriver(const std::string& path) {
  std::string p = path;
  if (p.empty()) {
    Status s = configValue("gpu.cuda_driver", EngineOptions{}, p);
    if (!s.ok()) return s;
  }
  if (!gpu::CudaDriver::load(p)) return Status(Code::kNotSupported, gpu::CudaDriver::reason());
  return Status::OK();
}

int cudaDeviceCount() {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  return d ? d->deviceCount() : 0;
}

Status allocateDeviceMemory(int device, size_t bytes, void** out) {
  const gpu::CudaDriver* d = nullptr;
  Status s = driver(d);
  if (!s.ok()) return s;
  if (!out || bytes == 0) return Status(Code::kInvalidArgument, "allocateDeviceMemory: null out or zero bytes");
  if (device < 0 || device >= d->deviceCount())
    return Status(Code::kInvalidArgument,
                  fmt::format("GPU {} does not exist ({} GPU(s) on this host)", device, d->deviceCount()));
  if (!(s = d->bindDevice(device)).ok()) return s;
  gpu::cu::DevicePtr p = 0;
  s = d->check(d->api().MemAlloc(&p, bytes), fmt::format("cuMemAlloc({} bytes on GPU {})", bytes, device),
               Code::kInvalidArgument);
  if (!s.ok()) return s;
  *out = reinterpret_cast<void*>(p);
  return Status::OK();
}

Status freeDeviceMemory(void* ptr) {
  const gpu::CudaDriver* d = nullptr;
  Status s = driver(d);
  if (!s.ok()) return s;
  gpu::PointerInfo info = d->pointer(ptr);
  if (!info.device) return Status(Code::kInvalidArgument, fmt::format("{} is not device memory", ptr));
  if (!(s = d->bindDevice(info.ordinal)).ok()) return s;
  return d->check(d->api().MemFree(reinterpret_cast<gpu::cu::DevicePtr>(ptr)), fmt::format("cuMemFree({})", ptr),
                  Code::kInvalidArgument);
}

Status copyMemory(void* dst, const void* src, size_t bytes) {
  const gpu::CudaDriver* d = nullptr;
  Status s = driver(d);
  if (!s.ok()) return s;
  gpu::PointerInfo a = d->pointer(dst), b = d->pointer(src);
  int dev = a.device ? a.ordinal : (b.device ? b.ordinal : 0);
  if (!(s = d->bindDevice(dev)).ok()) return s;
  s = d->check(d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(dst), reinterpret_cast<gpu::cu::DevicePtr>(src),
                               bytes),
               fmt::format("cuMemcpy({} <- {}, {} bytes)", dst, src, bytes));
  if (!s.ok()) return s;
  // cuMemcpy from pageable host memory returns once the bytes are staged,
  // before the DMA to the device has landed them (the driver API's
  // "API synchronization behavior"): a transfer started now on another
  // stream could read the old bytes, or have its bytes overwritten by the
  // late DMA. The copy ran on the legacy default stream; wait for it.
  return d->check(d->api().StreamSynchronize(nullptr), "cuStreamSynchronize(legacy stream) after cuMemcpy",
                  Code::kIoError);
}

Status synchronizeStream(void* stream) {
  const gpu::CudaDriver* d = nullptr;
  Status s = driver(d);
  if (!s.ok()) return s;
  gpu::cu::Context current = nullptr;
  (void)d->api().CtxGetCurrent(&current);
  // A thread without a context (not one CUDA or PyTorch ran on): GPU 0's.
  gpu::ContextScope scope(d, current ? -1 : 0);
  if (!scope.status().ok()) return scope.status();
  return d->check(d->api().StreamSynchronize(static_cast<gpu::cu::Stream>(stream)),
                  fmt::format("cuStreamSynchronize({})", stream), Code::kIoError);
}

}  // namespace hawser
