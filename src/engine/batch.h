// An engine-level batch: up to `capacity` tasks, split into one SubBatch per
// transport involved.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "base/transport.h"
#include "engine/notify.h"

namespace hawser {

class Batch final : public TaskOwner {
 public:
  Batch(BatchID id, size_t capacity, size_t slice_capacity)
      : id_(id), capacity_(capacity), slice_capacity_(slice_capacity), tasks_(new Task[capacity]) {
    for (size_t i = 0; i < capacity; ++i) tasks_[i].attach(this);
  }

  BatchID id() const { return id_; }
  size_t capacity() const { return capacity_; }
  size_t sliceCapacity() const { return slice_capacity_; }
  size_t taskCount() const { return task_count_.load(std::memory_order_acquire); }
  Task& task(size_t i) { return tasks_[i]; }

  // Called by Task when its last slice ends.
  void taskFinished(size_t task_id) override;
  // Tasks submitted and not yet terminal.
  size_t unfinished() const { return unfinished_.load(); }
  // Waits until every submitted task is terminal; false at the deadline.
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
  // The first transport whose sub-batch still has I/O referencing memory, or nullptr.
  Transport* busyTransport();
  // Destroys every sub-batch (freeBatch once idle; shutdown after the
  // transports stopped).
  void dropSubBatches();

  // Under submitMutex(), before commit(): the `n` tasks about to be
  // committed (from taskCount()) carry notification `o`; when the last of
  // them ends, `outbox` sends it if all COMPLETED, else marks it not sent.
  void addNotify(size_t n, std::shared_ptr<OutgoingNotify> o, NotifyOutbox* outbox);
  // The notifications of this batch's notifying submits, in submit order.
  std::vector<std::shared_ptr<OutgoingNotify>> notifies() const;

 private:
  const BatchID id_;
  const size_t capacity_;
  const size_t slice_capacity_;
  std::unique_ptr<Task[]> tasks_;
  std::atomic<size_t> task_count_{0};
  size_t slices_used_ = 0;  // under submit_mu_
  std::map<Transport*, std::unique_ptr<SubBatch>> subs_;  // under submit_mu_
  std::mutex submit_mu_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
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
