#include "gpu/pinned_buffers.h"

#include <sys/mman.h>

#include <chrono>

#include <fmt/format.h>

#include "gpu/cuda_driver.h"

namespace hawser::gpu {

Status PinnedBuffers::create(size_t count, size_t size, std::unique_ptr<PinnedBuffers>& out) {
  const CudaDriver* d = CudaDriver::get();
  if (!d) return Status(Code::kNotSupported, "no CUDA driver: " + CudaDriver::reason());
  if (count == 0 || size == 0) return Status(Code::kInvalidArgument, "pinned buffers: zero count or size");
  constexpr size_t kAlign = 4096;
  size = (size + kAlign - 1) / kAlign * kAlign;
  std::unique_ptr<PinnedBuffers> p(new PinnedBuffers());
  p->mapped_ = count * size;
  void* m = mmap(nullptr, p->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return Status(Code::kIoError, fmt::format("mmap of {} bytes of staging buffers failed", p->mapped_));
  // Staging memory is not inherited across fork() (a child would share
  // pages with DMA in flight).
  madvise(m, p->mapped_, MADV_DONTFORK);
  p->base_ = static_cast<char*>(m);
  p->count_ = count;
  p->size_ = size;
  // Registration needs a current context; the buffers are portable (every
  // GPU's context may use them), so the first GPU's does, for this call only.
  ContextScope scope(d, 0);
  if (!scope.status().ok()) return scope.status();
  Status st = d->check(d->api().MemHostRegister(m, p->mapped_, cu::kMemHostRegisterPortable),
                       fmt::format("cuMemHostRegister of {} bytes of staging buffers", p->mapped_));
  if (!st.ok()) return st;
  p->registered_ = true;
  for (size_t i = count; i > 0; --i) p->free_.push_back(i - 1);
  out = std::move(p);
  return Status::OK();
}

PinnedBuffers::~PinnedBuffers() {
  if (registered_) {
    if (const CudaDriver* d = CudaDriver::get()) {
      ContextScope scope(d, 0);
      d->api().MemHostUnregister(base_);
    }
  }
  if (base_) munmap(base_, mapped_);
}

long PinnedBuffers::tryAcquire() {
  std::lock_guard lk(mu_);
  if (free_.empty()) return -1;
  size_t i = free_.back();
  free_.pop_back();
  return static_cast<long>(i);
}

long PinnedBuffers::acquire(int timeout_ms) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !free_.empty(); })) return -1;
  size_t i = free_.back();
  free_.pop_back();
  return static_cast<long>(i);
}

void PinnedBuffers::release(size_t i) {
  {
    std::lock_guard lk(mu_);
    free_.push_back(i);
  }
  cv_.notify_one();
}

}  // namespace hawser::gpu
