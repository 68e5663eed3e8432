// An engine-level batch: up to `capacity` tasks, split into one SubBatch per
// transport involved.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "base/transport.h"
#include "engine/block_runner.h"
#include "engine/notify.h"

namespace hawser {

// How long a wait polls before it sleeps (batch.wait_spin_us), shared by an
// engine's batches. Adaptive: polling pays when transfers end within the
// window; when waits keep outlasting it (a host short of cores, where the
// poller only takes CPU from the threads that would complete the transfer)
// waits sleep at once, and every 16th still polls to notice a change.
class WaitSpin {
 public:
  explicit WaitSpin(std::chrono::microseconds window) : window_(window) {}
  std::chrono::microseconds window() const { return window_; }
  // Whether this wait polls first.
  bool shouldPoll() {
    if (window_.count() == 0) return false;
    return score_.load(std::memory_order_relaxed) > -4 || waits_.fetch_add(1, std::memory_order_relaxed) % 16 == 0;
  }
  // A poll ended: `hit` = the transfer ended within the window.
  // Written only when the score moves: every waiting thread of the engine
  // reads it, and a line they all write bounces between their cores.
  void result(bool hit) {
    const int s = score_.load(std::memory_order_relaxed);
    const int next = hit ? std::min(s + 1, 8) : std::max(s - 2, -8);
    if (next != s) score_.store(next, std::memory_order_relaxed);
  }

 private:
  const std::chrono::microseconds window_;
  std::atomic<int> score_{0};
  std::atomic<uint32_t> waits_{0};
};

struct SegmentView;  // engine/selection.h

class Batch final : public TaskOwner {
 public:
  // `spin` (may be null: sleep at once): how long waitUntil polls before it
  // sleeps; it outlives the batch (the engine's).
  Batch(BatchID id, size_t capacity, size_t slice_capacity, WaitSpin* spin = nullptr)
      : id_(id),
        capacity_(capacity),
        slice_capacity_(slice_capacity),
        spin_(spin),
        tasks_(new Task[capacity]),
        tasks_made_(capacity) {
    for (size_t i = 0; i < capacity; ++i) tasks_[i].attach(this);
  }

  BatchID id() const { return id_; }
  size_t capacity() const { return capacity_; }
  size_t sliceCapacity() const { return slice_capacity_; }
  size_t taskCount() const { return task_count_.load(std::memory_order_acquire); }
  Task& task(size_t i) { return tasks_[i]; }

  // Called by Task when its last slice ends.
  void taskFinished(size_t task_id) override;
  void tasksFinished(size_t first_id, size_t n) override;
  // Tasks submitted and not yet terminal.
  size_t unfinished() const { return unfinished_.load(); }
  // Waits until every submitted task is terminal; false at the deadline.
  // Polls for up to the spin time first (also through Transport::poll() of
  // the transports it uses, which may complete its slices on this thread),
  // then sleeps until taskFinished() wakes it (a completer wakes only
  // sleepers: nobody when the poll saw it).
  bool waitUntil(std::chrono::steady_clock::time_point deadline);

  TransferStatus aggregate() const;

  // Under submitMutex(): the sub-batch of `t`, created on first use.
  Status subBatch(Transport* t, SubBatch*& out);
  // Under submitMutex(): makes `n` more tasks (from taskCount()) visible and
  // counts `slices` against the slice capacity; returns when (the start of
  // their latency clocks).
  std::chrono::steady_clock::time_point commit(size_t n, size_t slices);
  // Under submitMutex(): makes `n` more tasks visible that their transport
  // moved at once (Task::markMoved at `now`): one slice each, counted
  // against the slice capacity; none of them unfinished.
  void commitMoved(size_t n, std::chrono::steady_clock::time_point now);
  size_t slicesUsed() const { return slices_used_; }
  std::mutex& submitMutex() { return submit_mu_; }
  // Every sub-batch; callers hold submitMutex().
  const std::map<Transport*, std::unique_ptr<SubBatch>>& subBatches() const { return subs_; }
  // Under submitMutex(): a block request in flight (block_runner.h).
  void addRunner(std::shared_ptr<BlockRunner> r) {
    recyclable_ = false;
    runners_.push_back(std::move(r));
  }
  const std::vector<std::shared_ptr<BlockRunner>>& runners() const { return runners_; }
  // Under submitMutex(): keeps the local regions a submit's tasks point at
  // (Task::setRegion) as long as the batch; returns where they now lie.
  // `removals`: MemoryRegistry::removals() before they were found.
  // dropRegions: the last kept, for a submit refused after layout.
  const LocalRegion* keepRegions(std::vector<LocalRegion> regions, uint64_t removals);
  void dropRegions() { regions_.pop_back(); }
  // Under submitMutex(): keeps `v`, the view of segment `id` found at
  // OpenSegments generation `generation` (its descriptor, peers and traffic
  // a submit's tasks point into: Task::resetBorrowed), as long as the batch;
  // one reference however many tasks, none again for the view the submit
  // before kept.
  void keepView(SegmentID id, uint64_t generation, std::shared_ptr<const SegmentView> v) {
    if (kept_.empty() || kept_.back().view != v) kept_.push_back(WarmView{id, generation, std::move(v)});
  }

  // Recycling (BatchTable keeps a few freed batches for its next
  // allocations). A recycled batch keeps the views and local regions its
  // submits resolved, each with the stamp it was found at (the segments'
  // generation, the registry's removals); a submit to it uses one whose
  // stamp is still current instead of looking it up again: no lock and no
  // reference count on lines every thread submitting to that segment, from
  // that region, shares. They do not change while the batch is allocated,
  // so submits read them without the submit lock.
  //
  // The kept view of segment `id`, if found at `generation`; else null.
  const SegmentView* warmView(SegmentID id, uint64_t generation) const {
    for (const WarmView& w : warm_views_)
      if (w.id == id && w.generation == generation) return w.view.get();
    return nullptr;
  }
  // A kept region holding [addr, +len), checked at `removals`, picked for
  // transport `t` (any transport: null); else null.
  const LocalRegion* warmRegion(uint64_t addr, uint64_t len, uint64_t removals, const Transport* t = nullptr) const {
    for (const WarmRegion& w : warm_regions_)
      if (w.removals == removals && w.region.contains(addr, len) && (!t || w.region.picked_for == t))
        return &w.region;
    return nullptr;
  }
  // Whether the batch can be recycled once freed: no block request and no
  // notification was submitted to it (their tasks and groups hold what a
  // batch at rest must not), and it is not large.
  bool recyclable() const { return recyclable_ && tasks_made_ <= kRecycleTasks; }
  // Under submitMutex(): a task is about to own references (a block
  // request's parent task): never recycled.
  void noRecycle() { recyclable_ = false; }
  static constexpr size_t kRecycleTasks = 1024;  // 272 KiB of tasks
  size_t tasksMade() const { return tasks_made_; }
  // Once freed (no task unfinished, sub-batches dropped, nobody else holds
  // it): keeps what is still current at `generation` and `removals` of the
  // views and regions it resolved (at most kWarm of each), and forgets the
  // rest into `garbage` (dropped by the caller outside its locks).
  static constexpr size_t kWarm = 8;
  void recycle(uint64_t generation, uint64_t removals, std::vector<std::shared_ptr<const void>>& garbage);
  // Drops the views (and/or regions) kept for reuse into `garbage`: a
  // segment was closed, memory unregistered.
  void cool(bool views, bool regions, std::vector<std::shared_ptr<const void>>& garbage);
  // Hands the recycled batch out again as batch `id` of `capacity` tasks
  // (at most tasksMade()).
  void reissue(BatchID id, size_t capacity, size_t slice_capacity) {
    id_ = id;
    capacity_ = capacity;
    slice_capacity_ = slice_capacity;
  }
  // Under submitMutex(), with no task left unfinished() but those whose
  // every slice ended: what keeps the batch from being freed. kIo: a
  // transport's I/O still references memory (`who`: a sub-batch not idle, a
  // block request's window in flight), for as long as that I/O takes.
  // kReporting: only completers between a task's last slice and
  // taskFinished(), or a block window's reporting, a few instructions each.
  enum class Hold { kNone, kReporting, kIo };
  Hold hold(Transport*& who);
  // Every visible task's slices ended (counted by unfinished() or not yet).
  bool tasksEnded() const;
  // Destroys every sub-batch (freeBatch once idle; shutdown after the
  // transports stopped); reusable: but those that can be reused
  // (SubBatch::reuse), for a batch kept for reuse.
  void dropSubBatches(bool reusable = false);

  // Under submitMutex(), before commit(): the `n` tasks about to be
  // committed (from taskCount()) carry notification (or signal) `o`; when the last of
  // them ends, `outbox` sends it if all COMPLETED, else marks it not sent.
  void addNotify(size_t n, std::shared_ptr<OutgoingNotify> o, NotifyOutbox* outbox);
  // The notifications of this batch's notifying submits, in submit order;
  // with_signals: also the outcomes of submits that carry a signal alone.
  std::vector<std::shared_ptr<OutgoingNotify>> notifies(bool with_signals = false) const;

 private:
  // `n` tasks counted finished; wakes the waiters at the last.
  void countFinished(size_t n);
  BatchID id_;              // changed only by reissue(), while nobody else holds the batch
  size_t capacity_;
  size_t slice_capacity_;
  WaitSpin* const spin_;
  std::unique_ptr<Task[]> tasks_;
  const size_t tasks_made_;  // tasks_'s length: capacity_ at most
  std::atomic<size_t> task_count_{0};
  size_t slices_used_ = 0;  // under submit_mu_
  std::map<Transport*, std::unique_ptr<SubBatch>> subs_;  // under submit_mu_
  std::vector<std::shared_ptr<BlockRunner>> runners_;      // under submit_mu_
  struct KeptRegions {
    uint64_t removals;
    std::vector<LocalRegion> regions;
  };
  std::vector<KeptRegions> regions_;  // under submit_mu_
  struct WarmView {
    SegmentID id;
    uint64_t generation;
    std::shared_ptr<const SegmentView> view;
  };
  struct WarmRegion {
    uint64_t removals;
    LocalRegion region;  // picked for region.picked_for
  };
  std::vector<WarmView> kept_;  // under submit_mu_: keepView
  // Kept from earlier uses (recycle()): unchanged while allocated.
  std::vector<WarmView> warm_views_;
  std::vector<WarmRegion> warm_regions_;
  bool recyclable_ = true;  // under submit_mu_
  std::mutex submit_mu_;
  std::atomic<int> inside_{0};          // completers touching the batch in taskFinished()
  std::atomic<uint32_t> done_seq_{0};  // futex word: bumped when the last task ends
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);
  std::atomic<int> sleepers_{0};       // waiters blocked on it
  std::atomic<size_t> unfinished_{0};

  // Notifying submits: by first task id.
  struct NotifyGroup {
    size_t count = 0;
    size_t left = 0;  // tasks not yet ended
    std::shared_ptr<OutgoingNotify> item;
  };
  void settleNotify(size_t first, const NotifyGroup& g);
  std::atomic<bool> has_notifies_{false};
  mutable std::mutex notify_mu_;
  std::map<size_t, NotifyGroup> notify_groups_;  // under notify_mu_
  NotifyOutbox* outbox_ = nullptr;
};

}  // namespace hawser
