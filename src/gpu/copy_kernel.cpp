#include "gpu/copy_kernel.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/cuda_driver.h"

namespace hawser::gpu {

namespace {

struct Loaded {
  Status status;
  cu::Module module = nullptr;
  cu::Function fn = nullptr;
};

std::mutex g_kernel_mu;
std::map<int, Loaded> g_kernels;  // by device; modules live as long as the process

}  // namespace

Status copyKernel(const CudaDriver* d, int device, cu::Function& out) {
  std::lock_guard lk(g_kernel_mu);
  auto it = g_kernels.find(device);
  if (it == g_kernels.end()) {
    Loaded l;
    const cu::Api& a = d->api();
    if (!a.ModuleLoadData || !a.ModuleGetFunction || !a.LaunchKernel) {
      l.status = {Code::kNotSupported, "the CUDA driver has no cuModuleLoadData/cuLaunchKernel"};
    } else {
      l.status = d->check(a.ModuleLoadData(&l.module, kCopyKernelPtx),
                          fmt::format("loading hawser's copy kernel (PTX ISA 7.0) on GPU {}", device),
                          Code::kNotSupported);
      if (l.status.ok())
        l.status = d->check(a.ModuleGetFunction(&l.fn, l.module, kCopyKernelEntry),
                            fmt::format("cuModuleGetFunction({})", kCopyKernelEntry), Code::kNotSupported);
    }
    if (l.status.ok())
      HLOG_DEBUG("gpu: copy kernel loaded on GPU {}", device);
    else
      HLOG_WARN("gpu: GPU {} copies without hawser's kernel: {}", device, l.status.message());
    it = g_kernels.emplace(device, l).first;
  }
  if (!it->second.status.ok()) return it->second.status;
  out = it->second.fn;
  return Status::OK();
}

}  // namespace hawser::gpu
