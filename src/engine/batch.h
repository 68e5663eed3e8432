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

class Batch final : public TaskOwner {
 public:
  // `spin` (may be null: sleep at once): how long waitUntil polls before it
  // sleeps; it outlives the batch (the engine's).
  Batch(BatchID id, size_t capacity, size_t slice_capacity, WaitSpin* spin = nullptr)
      : id_(id), capacity_(capacity), slice_capacity_(slice_capacity), spin_(spin), tasks_(new Task[capacity]) {
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
  // counts `slices` against the slice capacity.
  void commit(size_t n, size_t slices);
  size_t slicesUsed() const { return slices_used_; }
  std::mutex& submitMutex() { return submit_mu_; }
  // Every sub-batch; callers hold submitMutex().
  const std::map<Transport*, std::unique_ptr<SubBatch>>& subBatches() const { return subs_; }
  // Under submitMutex(): a block request in flight (block_runner.h).
  void addRunner(std::shared_ptr<BlockRunner> r) { runners_.push_back(std::move(r)); }
  const std::vector<std::shared_ptr<BlockRunner>>& runners() const { return runners_; }
  // Under submitMutex(): keeps the local regions a submit's tasks point at
  // (Task::setRegion) as long as the batch; returns where they now lie.
  // dropRegions: the last kept, for a submit refused after layout.
  const LocalRegion* keepRegions(std::vector<LocalRegion> regions);
  void dropRegions() { regions_.pop_back(); }
  // Under submitMutex(): keeps `p` (a segment view a submit's tasks point
  // into: its descriptor, peers and traffic, Task::resetBorrowed) as long as
  // the batch; one reference however many tasks, none again for the view
  // the submit before kept.
  void keepAlive(std::shared_ptr<const void> p) {
    if (kept_.empty() || kept_.back() != p) kept_.push_back(std::move(p));
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
  // transports stopped).
  void dropSubBatches();

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
  const BatchID id_;
  const size_t capacity_;
  const size_t slice_capacity_;
  WaitSpin* const spin_;
  std::unique_ptr<Task[]> tasks_;
  std::atomic<size_t> task_count_{0};
  size_t slices_used_ = 0;  // under submit_mu_
  std::map<Transport*, std::unique_ptr<SubBatch>> subs_;  // under submit_mu_
  std::vector<std::shared_ptr<BlockRunner>> runners_;      // under submit_mu_
  std::vector<std::vector<LocalRegion>> regions_;          // under submit_mu_
  std::vector<std::shared_ptr<const void>> kept_;          // under submit_mu_: keepAlive
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
