#include "py_managed.h"

#include <unistd.h>

#include <fmt/format.h>

#include "hawser/host_memory.h"
#include "py_support.h"

namespace hawser::pymod {

void ManagedBuffers::setPoolSize(uint64_t bytes) {
  const long page = ::sysconf(_SC_PAGESIZE);
  std::lock_guard lk(mu_);
  page_ = page > 0 ? static_cast<uint64_t>(page) : 4096;
  pool_size_ = (bytes + page_ - 1) / page_ * page_;
}

bool ManagedBuffers::owns(uint64_t addr) {
  std::lock_guard lk(mu_);
  if (allocs_.count(addr) > 0) return true;
  for (auto& p : pools_)
    if (p->base == addr) return true;
  return false;
}

void ManagedBuffers::unmapAll() {
  std::lock_guard lk(mu_);
  for (auto& [addr, a] : allocs_)
    if (!a.pool) (void)freeHostMemory(reinterpret_cast<void*>(addr));
  allocs_.clear();
  for (auto& p : pools_) (void)freeHostMemory(reinterpret_cast<void*>(p->base));
  pools_.clear();
}

Status ManagedBuffers::allocate(TransferEngine& e, uint64_t length, uint64_t& out) {
  Status s;
  if (length == 0) return {Code::kInvalidArgument, "length is 0"};
  if (length > (1ull << 48)) return {Code::kInvalidArgument, fmt::format("length {} is too large", length)};
  const uint64_t reserve = (length + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lk(mu_);
  for (auto& p : pools_)
    if (takeBlock(*p, reserve, out)) {
      allocs_[out] = Alloc{p.get(), length, reserve};
      return Status::OK();
    }
  const bool dedicated = reserve > pool_size_;
  const uint64_t map_len = dedicated ? (reserve + page_ - 1) / page_ * page_ : pool_size_;
  // Shareable memory (a memfd, on huge pages where the kernel can): a shm
  // peer of this host maps it once and copies with memcpy.
  void* mem = nullptr;
  if (Status a = allocateHostMemory(map_len, &mem); !a.ok())
    return {a.code(), fmt::format("length {}: {}", length, a.message())};
  s = e.registerLocalMemory(mem, map_len, "*", true);
  if (!s.ok()) {
    (void)freeHostMemory(mem);
    return s;
  }
  const auto base = reinterpret_cast<uint64_t>(mem);
  if (dedicated) {
    allocs_[base] = Alloc{nullptr, length, map_len};
    out = base;
    return Status::OK();
  }
  auto p = std::make_unique<Pool>();
  p->base = base;
  p->size = map_len;
  p->free_blocks[base] = map_len;
  (void)takeBlock(*p, reserve, out);
  allocs_[out] = Alloc{p.get(), length, reserve};
  pools_.push_back(std::move(p));
  return Status::OK();
}

bool ManagedBuffers::takeBlock(Pool& p, uint64_t size, uint64_t& out) {
  for (auto it = p.free_blocks.begin(); it != p.free_blocks.end(); ++it) {
    if (it->second < size) continue;
    out = it->first;
    uint64_t rest = it->second - size;
    p.free_blocks.erase(it);
    if (rest > 0) p.free_blocks[out + size] = rest;
    return true;
  }
  return false;
}

Status ManagedBuffers::release(TransferEngine& e, uint64_t addr) {
  Status s;
  std::lock_guard lk(mu_);
  auto it = allocs_.find(addr);
  if (it == allocs_.end())
    return {Code::kInvalidArgument,
            fmt::format("addr {} is not a live managed buffer (not from allocate_managed_buffer, or already freed)",
                        hex(addr))};
  Alloc a = it->second;
  if (!a.pool) {
    s = e.unregisterLocalMemory(reinterpret_cast<void*>(addr));
    if (!s.ok()) return s;
    (void)freeHostMemory(reinterpret_cast<void*>(addr));
    allocs_.erase(it);
    return Status::OK();
  }
  allocs_.erase(it);
  auto& fb = a.pool->free_blocks;
  uint64_t start = addr, size = a.reserved;
  auto next = fb.lower_bound(start);
  if (next != fb.end() && start + size == next->first) {
    size += next->second;
    next = fb.erase(next);
  }
  if (next != fb.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      fb.erase(prev);
    }
  }
  fb[start] = size;
  return Status::OK();
}

}  // namespace hawser::pymod
