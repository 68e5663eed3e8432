// Prepared plans' windows kept on the GPU as run lists (nvlink_internal.h,
// WindowCache): found by (plan, first run), dropped when the plan is
// released or the budget (nvlink.plan_cache) is exceeded.
#include "transport/nvlink/nvlink_internal.h"

namespace hawser::nvlink {

CachedWindow::~CachedWindow() {
  if (counters) counters->plan_cache_bytes.fetch_sub(pieces.alloc, std::memory_order_relaxed);
  gpu::CopyStream::freePieces(pieces);
}

namespace {
bool samePlan(const std::weak_ptr<const void>& a, const std::weak_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
}  // namespace

std::shared_ptr<CachedWindow> WindowCache::find(const std::weak_ptr<const void>& plan, uint64_t first) {
  auto live = plan.lock();
  if (!live) return nullptr;
  std::lock_guard lk(mu_);
  auto it = map_.find({live.get(), first});
  if (it == map_.end()) return nullptr;
  // The address of a released plan may be a new plan's.
  if (!samePlan(it->second->plan, plan)) {
    bytes_ -= it->second->pieces.alloc;
    map_.erase(it);
    return nullptr;
  }
  it->second->used = ++clock_;
  return it->second;
}

void WindowCache::insert(std::shared_ptr<CachedWindow> w, uint64_t budget) {
  auto live = w->plan.lock();
  if (!live) return;
  std::lock_guard lk(mu_);
  w->used = ++clock_;
  auto& slot = map_[{live.get(), w->first}];
  if (slot) bytes_ -= slot->pieces.alloc;
  bytes_ += w->pieces.alloc;
  slot = std::move(w);
  evictLocked(budget);
}

void WindowCache::drop(const CachedWindow* w) {
  std::lock_guard lk(mu_);
  for (auto it = map_.begin(); it != map_.end(); ++it)
    if (it->second.get() == w) {
      bytes_ -= w->pieces.alloc;
      map_.erase(it);
      return;
    }
}

void WindowCache::clear() {
  std::lock_guard lk(mu_);
  map_.clear();
  bytes_ = 0;
}

void WindowCache::evictLocked(uint64_t budget) {
  // Entries of released plans first; then the least recently used, while over budget.
  for (auto it = map_.begin(); it != map_.end();) {
    if (it->second->plan.expired()) {
      bytes_ -= it->second->pieces.alloc;
      it = map_.erase(it);
    } else {
      ++it;
    }
  }
  while (bytes_ > budget && !map_.empty()) {
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second->used < oldest->second->used) oldest = it;
    bytes_ -= oldest->second->pieces.alloc;
    map_.erase(oldest);
  }
}

}  // namespace hawser::nvlink
