#include "engine/batch.h"

#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hawser {

namespace {
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

// The count drops under done_mu_, so that dropSubBatches() (which takes it
// once) waits out a completer still here; a wake-up (a futex call, and one
// for the waiter when it takes the mutex back) only when someone sleeps.
void Batch::taskFinished(size_t task_id) {
  if (has_notifies_.load(std::memory_order_acquire)) {
    // Settled before the task counts as finished: once waitUntil() returns,
    // no notification of this batch is still waiting for its transfer.
    std::unique_lock nl(notify_mu_);
    auto it = notify_groups_.upper_bound(task_id);
    if (it != notify_groups_.begin()) {
      --it;
      if (task_id < it->first + it->second.count && --it->second.left == 0) {
        const size_t first = it->first;
        const NotifyGroup g = it->second;
        nl.unlock();
        settleNotify(first, g);
      }
    }
  }
  std::lock_guard lk(done_mu_);
  if (unfinished_.fetch_sub(1) == 1 && sleepers_ > 0) done_cv_.notify_all();
}

bool Batch::waitUntil(std::chrono::steady_clock::time_point deadline) {
  if (unfinished_.load(std::memory_order_acquire) == 0) return true;
  if (spin_ && spin_->shouldPoll()) {
    // The transports carrying the batch (they live as long as the engine).
    Transport* carriers[4];
    size_t n = 0;
    {
      std::lock_guard sl(submit_mu_);
      for (auto& [t, sb] : subs_)
        if (n < std::size(carriers)) carriers[n++] = t;
    }
    const auto end = std::min(deadline, std::chrono::steady_clock::now() + spin_->window());
    do {
      for (size_t k = 0; k < n; ++k) carriers[k]->poll();
      for (int i = 0; i < 64; ++i) {
        cpuRelax();
        if (unfinished_.load(std::memory_order_acquire) == 0) {
          spin_->result(true);
          return true;
        }
      }
    } while (std::chrono::steady_clock::now() < end);
    spin_->result(false);
  }
  std::unique_lock lk(done_mu_);
  ++sleepers_;
  bool done = done_cv_.wait_until(lk, deadline, [&] { return unfinished_.load() == 0; });
  --sleepers_;
  return done;
}

Status Batch::subBatch(Transport* t, SubBatch*& out) {
  auto& sb = subs_[t];
  if (!sb) {
    Status s = t->newSubBatch(capacity_, sb);
    if (!s.ok() || !sb) {
      subs_.erase(t);
      return {s.ok() ? Code::kInternal : s.code(),
              fmt::format("transport {}: cannot allocate a sub-batch: {}", t->name(), s.message())};
    }
  }
  out = sb.get();
  return Status::OK();
}

void Batch::commit(size_t n, size_t slices) {
  slices_used_ += slices;
  const size_t base = task_count_.load(std::memory_order_relaxed);
  unfinished_.fetch_add(n);
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) tasks_[base + i].markSubmitted(now);
  task_count_.store(base + n, std::memory_order_release);
}

void Batch::addNotify(size_t n, std::shared_ptr<OutgoingNotify> o, NotifyOutbox* outbox) {
  std::lock_guard nl(notify_mu_);
  outbox_ = outbox;
  notify_groups_[task_count_.load(std::memory_order_relaxed)] = NotifyGroup{n, n, std::move(o)};
  has_notifies_.store(true, std::memory_order_release);
}

std::vector<std::shared_ptr<OutgoingNotify>> Batch::notifies() const {
  std::vector<std::shared_ptr<OutgoingNotify>> out;
  std::lock_guard nl(notify_mu_);
  for (auto& [first, g] : notify_groups_) out.push_back(g.item);
  return out;
}

void Batch::settleNotify(size_t first, const NotifyGroup& g) {
  for (size_t i = first; i < first + g.count; ++i) {
    TransferStatus st = tasks_[i].status();
    if (st.s != TransferState::kCompleted) {
      const Notification& n = g.item->notification();
      outbox_->notSent(g.item, Status(st.error.ok() ? Code::kInternal : st.error.code(),
                                      fmt::format("notification '{}' not sent: task {} of batch {} ended {}{}{}",
                                                  n.name, i, id_, stateName(st.s), st.error.ok() ? "" : ": ",
                                                  st.error.message())));
      return;
    }
  }
  outbox_->ready(g.item);
}

Transport* Batch::busyTransport() {
  for (auto& [t, sb] : subs_)
    if (!sb->idle()) return t;
  for (auto& r : runners_)
    if (r->busy()) return r->transport();
  return nullptr;
}

void Batch::dropSubBatches() {
  // Wait out a completer still inside taskFinished().
  { std::lock_guard dl(done_mu_); }
  std::lock_guard sl(submit_mu_);
  subs_.clear();
  runners_.clear();
}

TransferStatus Batch::aggregate() const {
  TransferStatus out;
  size_t n = taskCount();
  if (n == 0) {
    out.s = TransferState::kWaiting;
    return out;
  }
  bool pending = false;
  int worst = 0;
  for (size_t i = 0; i < n; ++i) {
    TransferStatus t = tasks_[i].status();
    out.transferred_bytes += t.transferred_bytes;
    if (!isTerminal(t.s)) {
      pending = true;
      continue;
    }
    int r = failureRank(t.s);
    if (r > worst) {
      worst = r;
      out.error = t.error;
    }
  }
  out.s = pending ? TransferState::kPending : stateOfRank(worst);
  return out;
}

}  // namespace hawser
