// The engine's batches and orphans (batch_table.h).
#include "engine/batch_table.h"

#include <thread>

#include <fmt/format.h>

#include "base/registry.h"
#include "engine/open_segments.h"

namespace hawser {

Status BatchTable::notAllocated(BatchID id) {
  return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
}

size_t BatchTable::myShard() {
  static std::atomic<size_t> next_thread{0};
  thread_local const size_t mine = next_thread.fetch_add(1, std::memory_order_relaxed) % kShards;
  return mine;
}

Status BatchTable::allocate(size_t capacity, BatchID& out, std::shared_ptr<Batch>* held) {
  if (capacity == 0) return {Code::kInvalidArgument, "capacity is 0"};
  if (capacity > settings_.max_capacity)
    return {Code::kInvalidArgument,
            fmt::format("capacity {} exceeds batch.max_capacity {}", capacity, settings_.max_capacity)};
  if (n_orphans_.load(std::memory_order_relaxed) > 0) reapOrphans();
  const size_t k = myShard();
  Shard& sh = shards_[k];
  std::shared_ptr<Batch> b;
  std::unique_lock lk(sh.mu);
  const BatchID id = sh.made * kShards + k + 1;
  // The latest kept batch with tasks enough.
  for (size_t i = sh.kept.size(); i-- > 0;)
    if (sh.kept[i]->tasksMade() >= capacity) {
      b = std::move(sh.kept[i]);
      sh.kept.erase(sh.kept.begin() + static_cast<std::ptrdiff_t>(i));
      b->reissue(id, capacity, capacity * settings_.slices_per_task);
      break;
    }
  if (!b) try {
      b = std::make_shared<Batch>(id, capacity, capacity * settings_.slices_per_task, settings_.spin);
    } catch (const std::bad_alloc&) {
      return {Code::kInvalidArgument, fmt::format("capacity {}: out of memory", capacity)};
    }
  if (held) *held = b;
  if (sh.nodes.empty()) {
    sh.batches.emplace(id, std::move(b));
  } else {
    auto node = std::move(sh.nodes.back());
    sh.nodes.pop_back();
    node.key() = id;
    node.mapped() = std::move(b);
    sh.batches.insert(std::move(node));
  }
  sh.made++;
  out = id;
  return Status::OK();
}

std::shared_ptr<Batch> BatchTable::find(BatchID id) const {
  if (id == kInvalidBatch) return nullptr;
  const Shard& sh = shards_[shardOf(id)];
  std::lock_guard lk(sh.mu);
  auto it = sh.batches.find(id);
  return it == sh.batches.end() ? nullptr : it->second;
}

Status BatchTable::free(BatchID id, bool settle) {
  std::shared_ptr<Batch> batch;
  // A task ends (its status says so) a few instructions before its
  // completer counts it and lets go of the batch: a batch whose last task
  // just ended is waited for, not reported busy (bounded by kReportingBound
  // only against a bug). A transport completes a slice's task before it
  // lets go of the slice's I/O: that gets a short grace. I/O that cannot
  // stop stays busy. Without `settle` (the orphan reaper, which comes back
  // later) neither is waited for.
  // The bounds start at the first hold seen: a batch that is free at
  // once (the common case) reads no clock.
  constexpr auto kReportingBound = std::chrono::seconds(10);
  std::chrono::steady_clock::time_point grace{}, reporting_bound{};
  bool bounded = false;
  auto bound = [&] {
    if (bounded) return;
    const auto now = std::chrono::steady_clock::now();
    grace = now + std::chrono::milliseconds(settle ? 50 : 0);
    reporting_bound = settle ? now + kReportingBound : now;
    bounded = true;
  };
  for (;;) {
    bool settling = false;
    {
      if (id == kInvalidBatch) return notAllocated(id);
      Shard& sh = shards_[shardOf(id)];
      std::lock_guard lk(sh.mu);
      auto it = sh.batches.find(id);
      if (it == sh.batches.end()) return notAllocated(id);
      batch = it->second;
      std::lock_guard sl(batch->submitMutex());
      size_t left = batch->unfinished();
      if (left > 0 && !batch->tasksEnded())
        return {Code::kBatchBusy, fmt::format("batch {} has {} unfinished task(s)", id, left)};
      Transport* t = nullptr;
      switch (batch->hold(t)) {
        case Batch::Hold::kIo:
          bound();
          if (std::chrono::steady_clock::now() >= grace)
            return {Code::kBatchBusy,
                    fmt::format("batch {}: transport {} still has I/O referencing its memory", id, t->name())};
          settling = true;
          break;
        case Batch::Hold::kReporting:
          bound();
          if (std::chrono::steady_clock::now() >= reporting_bound)
            return {Code::kBatchBusy, fmt::format("batch {}: its tasks ended and their completers are still reporting "
                                                  "them",
                                                  id)};
          settling = true;
          break;
        case Batch::Hold::kNone: {
          // The map's node is kept for the shard's next allocate.
          auto node = sh.batches.extract(it);
          node.mapped().reset();
          if (sh.nodes.size() < kKeptPerShard) sh.nodes.push_back(std::move(node));
          break;
        }
      }
    }
    if (!settling) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Nobody can reach the batch now (but who found it before: a status
  // query, a waiter; their batch is not recycled).
  const bool recycle = settings_.segments && settings_.registry && batch->recyclable() && batch.use_count() == 1;
  // use_count() reads the count relaxed: what the last other holder did
  // with the batch before it let go (a release) is seen before it is reused.
  if (recycle) std::atomic_thread_fence(std::memory_order_acquire);
  batch->dropSubBatches(recycle);
  if (recycle) keep(shards_[shardOf(id)], std::move(batch));
  return Status::OK();
}

void BatchTable::keep(Shard& sh, std::shared_ptr<Batch> b) {
  std::vector<std::shared_ptr<const void>> garbage;  // dropped after the lock
  std::unique_lock lk(sh.mu);
  // Read under the shard lock: cool() bumps come first, then take it.
  b->recycle(settings_.segments->generation(), settings_.registry->removals(), garbage);
  if (sh.kept.size() >= kKeptPerShard) {
    garbage.push_back(std::move(sh.kept.front()));
    sh.kept.erase(sh.kept.begin());
  }
  sh.kept.push_back(std::move(b));
}

void BatchTable::cool(bool views, bool regions) {
  std::vector<std::shared_ptr<const void>> garbage;
  for (Shard& sh : shards_) {
    {
      std::unique_lock lk(sh.mu);
      for (auto& b : sh.kept) b->cool(views, regions, garbage);
    }
    garbage.clear();
  }
}

size_t BatchTable::kept() const {
  size_t n = 0;
  for (const Shard& sh : shards_) {
    std::lock_guard lk(sh.mu);
    n += sh.kept.size();
  }
  return n;
}

void BatchTable::orphan(BatchID id) {
  std::lock_guard lk(orphan_mu_);
  orphans_.push_back(id);  // freed by a later allocate once its I/O ends
  n_orphans_.store(orphans_.size(), std::memory_order_relaxed);
}

void BatchTable::reapOrphans() {
  std::vector<BatchID> left;
  std::lock_guard lk(orphan_mu_);
  for (BatchID b : orphans_) {
    if (free(b, false).code() == Code::kBatchBusy)
      left.push_back(b);
    else
      n_reaped_.fetch_add(1, std::memory_order_relaxed);
  }
  orphans_.swap(left);
  n_orphans_.store(orphans_.size(), std::memory_order_relaxed);
}

std::vector<std::shared_ptr<Batch>> BatchTable::live() const {
  std::vector<std::shared_ptr<Batch>> out;
  for (const Shard& sh : shards_) {
    std::lock_guard lk(sh.mu);
    for (auto& [id, b] : sh.batches) out.push_back(b);
  }
  return out;
}

void BatchTable::clear() {
  for (Shard& sh : shards_) {
    std::vector<std::shared_ptr<Batch>> kept;  // dropped after the lock
    std::unique_lock lk(sh.mu);
    for (auto& [id, b] : sh.batches) b->dropSubBatches();
    sh.batches.clear();
    kept.swap(sh.kept);
    lk.unlock();
  }
}

size_t BatchTable::open() const {
  size_t n = 0;
  for (const Shard& sh : shards_) {
    std::lock_guard lk(sh.mu);
    n += sh.batches.size();
  }
  return n;
}

uint64_t BatchTable::allocated() const {
  uint64_t n = 0;
  for (const Shard& sh : shards_) {
    std::lock_guard lk(sh.mu);
    n += sh.made;
  }
  return n;
}

size_t BatchTable::orphans() const {
  std::lock_guard lk(orphan_mu_);
  return orphans_.size();
}

}  // namespace hawser
