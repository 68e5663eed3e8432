#include "engine/batch.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "base/cpu_relax.h"

namespace hawser {

// A completer is counted in inside_ from before the count drops until its
// last touch of the batch's memory, so that dropSubBatches() (freeBatch runs
// only once the count is 0) waits it out without a lock a waiter could find
// held. Sleepers wait on a futex word, not a condition variable: woken,
// they need no mutex back (no second wake-up); a completer makes the call
// only when someone sleeps, and after it left inside_: the woken waiter
// need not wait for the waker's system call to return before it frees the
// batch. A private FUTEX_WAKE does not read the word (the kernel keys it by
// address alone), so waking a word just freed is harmless: at worst a
// spurious wake-up of whoever waits at that address now, which every futex
// user (this wait loop, glibc's locks) re-checks and sleeps through.
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
  countFinished(1);
}

void Batch::tasksFinished(size_t first_id, size_t n) {
  if (has_notifies_.load(std::memory_order_acquire)) {  // each settles its notification group
    for (size_t i = 0; i < n; ++i) taskFinished(first_id + i);
    return;
  }
  if (n > 0) countFinished(n);
}

void Batch::countFinished(size_t n) {
  inside_.fetch_add(1);
  bool wake = false;
  if (unfinished_.fetch_sub(n) == n) {
    done_seq_.fetch_add(1);
    wake = sleepers_.load() > 0;
  }
  uint32_t* const word = reinterpret_cast<uint32_t*>(&done_seq_);
  inside_.fetch_sub(1, std::memory_order_release);  // last touch of the batch's memory
  if (wake) ::syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

bool Batch::waitUntil(std::chrono::steady_clock::time_point deadline) {
  if (unfinished_.load(std::memory_order_acquire) == 0) return true;
  // Queued work this thread can do itself (shm's copies handed to its copy
  // threads): one copier more, and no wake-up of a copy thread for it. A
  // piece at a time, the submit lock let go in between (cancel, submit).
  for (bool ran = true; ran;) {
    ran = false;
    std::lock_guard sl(submit_mu_);
    for (auto& [t, sb] : subs_) ran = sb->assist() || ran;
    for (auto& r : runners_) ran = r->assist() || ran;
    if (unfinished_.load(std::memory_order_acquire) == 0) return true;
    if (ran && std::chrono::steady_clock::now() >= deadline) break;
  }
  if (spin_ && spin_->shouldPoll()) {
    // The transports carrying the batch, its block requests' included (they
    // live as long as the engine); the first few.
    Transport* carriers[4];
    size_t n = 0;
    auto add = [&](Transport* t) {
      if (n < std::size(carriers) && std::find(carriers, carriers + n, t) == carriers + n) carriers[n++] = t;
    };
    {
      std::lock_guard sl(submit_mu_);
      for (auto& [t, sb] : subs_) add(t);
      for (auto& r : runners_) add(r->transport());
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
  // Pairs with taskFinished(): either it sees this sleeper, or this sees
  // the count at 0 (or the word changed, and the futex call returns at once).
  sleepers_.fetch_add(1);
  bool done = false;
  while (true) {
    const uint32_t seq = done_seq_.load();
    if (unfinished_.load() == 0) {
      done = true;
      break;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&done_seq_), FUTEX_WAIT_PRIVATE, seq, &ts, nullptr, 0);
  }
  sleepers_.fetch_sub(1);
  return done;
}

const LocalRegion* Batch::keepRegions(std::vector<LocalRegion> regions, uint64_t removals) {
  regions_.push_back(KeptRegions{removals, std::move(regions)});  // moving a vector keeps where its elements lie
  return regions_.back().regions.data();
}

namespace {

// Keeps the entries of `v` that `current` accepts, in place; hands the
// references of the others to `drop`.
template <class T, class Current, class Drop>
void keepCurrent(std::vector<T>& v, const Current& current, const Drop& drop) {
  size_t n = 0;
  for (T& e : v) {
    if (!current(e)) drop(e);
    else if (&v[n++] != &e) v[n - 1] = std::move(e);
  }
  v.resize(n);
}

}  // namespace

void Batch::recycle(uint64_t generation, uint64_t removals, std::vector<std::shared_ptr<const void>>& garbage) {
  task_count_.store(0, std::memory_order_relaxed);
  slices_used_ = 0;
  // What earlier uses kept, while current; then what this use found (the
  // latest first): one entry a segment (a registration and transport), at
  // most kWarm of each. Every submit of a batch that kept what it needed
  // found nothing new: nothing is allocated then.
  keepCurrent(
      warm_views_, [&](const WarmView& w) { return w.generation == generation; },
      [&](WarmView& w) { garbage.push_back(std::move(w.view)); });
  keepCurrent(
      warm_regions_, [&](const WarmRegion& w) { return w.removals == removals; },
      [&](WarmRegion& w) { garbage.push_back(std::move(w.region.registrations)); });
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    const bool add = it->generation == generation && warm_views_.size() < kWarm &&
                     std::none_of(warm_views_.begin(), warm_views_.end(),
                                  [&](const WarmView& w) { return w.id == it->id; });
    if (add)
      warm_views_.push_back(std::move(*it));
    else
      garbage.push_back(std::move(it->view));
  }
  kept_.clear();
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it)
    for (LocalRegion& r : it->regions) {
      const bool add = it->removals == removals && warm_regions_.size() < kWarm &&
                       std::none_of(warm_regions_.begin(), warm_regions_.end(), [&](const WarmRegion& w) {
                         return w.region.seq == r.seq && w.region.picked_for == r.picked_for;
                       });
      if (add)
        warm_regions_.push_back(WarmRegion{removals, std::move(r)});
      else
        garbage.push_back(std::move(r.registrations));
    }
  regions_.clear();
}

void Batch::cool(bool views, bool regions, std::vector<std::shared_ptr<const void>>& garbage) {
  if (views) {
    for (WarmView& w : warm_views_) garbage.push_back(std::move(w.view));
    warm_views_.clear();
  }
  if (regions) {
    for (WarmRegion& w : warm_regions_) garbage.push_back(std::move(w.region.registrations));
    warm_regions_.clear();
  }
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

std::chrono::steady_clock::time_point Batch::commit(size_t n, size_t slices) {
  slices_used_ += slices;
  const size_t base = task_count_.load(std::memory_order_relaxed);
  unfinished_.fetch_add(n);
  const auto now = std::chrono::steady_clock::now();
  Task::markSubmitted(&tasks_[base], n, now);
  task_count_.store(base + n, std::memory_order_release);
  return now;
}

void Batch::commitMoved(size_t n, std::chrono::steady_clock::time_point now) {
  slices_used_ += n;
  const size_t base = task_count_.load(std::memory_order_relaxed);
  Task::markMoved(&tasks_[base], n, now);
  task_count_.store(base + n, std::memory_order_release);
}

void Batch::addNotify(size_t n, std::shared_ptr<OutgoingNotify> o, NotifyOutbox* outbox) {
  recyclable_ = false;
  std::lock_guard nl(notify_mu_);
  outbox_ = outbox;
  notify_groups_[task_count_.load(std::memory_order_relaxed)] = NotifyGroup{n, n, std::move(o)};
  has_notifies_.store(true, std::memory_order_release);
}

std::vector<std::shared_ptr<OutgoingNotify>> Batch::notifies(bool with_signals) const {
  std::vector<std::shared_ptr<OutgoingNotify>> out;
  std::lock_guard nl(notify_mu_);
  for (auto& [first, g] : notify_groups_)
    if (with_signals || g.item->hasNotification()) out.push_back(g.item);
  return out;
}

void Batch::settleNotify(size_t first, const NotifyGroup& g) {
  for (size_t i = first; i < first + g.count; ++i) {
    TransferStatus st = tasks_[i].status();
    if (st.s != TransferState::kCompleted) {
      // The receiver's view: canceled here, refused by the target (a range
      // it does not serve: kOutOfRange after the submit's own checks), or
      // failed otherwise.
      const SignalReason reason = st.s == TransferState::kCanceled     ? SignalReason::kCanceled
                                  : st.error.code() == Code::kOutOfRange ? SignalReason::kRefused
                                                                         : SignalReason::kTransferFailed;
      outbox_->notSent(g.item,
                       Status(st.error.ok() ? Code::kInternal : st.error.code(),
                              fmt::format("{} not sent: task {} of batch {} ended {}{}{}", g.item->what(), i, id_,
                                          stateName(st.s), st.error.ok() ? "" : ": ", st.error.message())),
                       reason);
      return;
    }
  }
  outbox_->ready(g.item);
}

Batch::Hold Batch::hold(Transport*& who) {
  who = nullptr;
  for (auto& [t, sb] : subs_)
    if (!sb->idle()) {
      who = t;
      return Hold::kIo;
    }
  Hold h = unfinished() > 0 ? Hold::kReporting : Hold::kNone;
  for (auto& r : runners_) {
    BlockRunner::Hold rh = r->hold();
    if (rh == BlockRunner::Hold::kIo) {
      who = r->transport();
      return Hold::kIo;
    }
    if (rh == BlockRunner::Hold::kReporting) h = Hold::kReporting;
  }
  return h;
}

bool Batch::tasksEnded() const {
  const size_t n = taskCount();
  for (size_t i = 0; i < n; ++i)
    if (!tasks_[i].terminal()) return false;
  return true;
}

void Batch::dropSubBatches(bool reusable) {
  // Wait out a completer still inside taskFinished() (a few instructions).
  for (int i = 0; inside_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 1000) cpuRelax();
    else std::this_thread::yield();  // the completer was preempted in there
  }
  std::lock_guard sl(submit_mu_);
  if (reusable)
    std::erase_if(subs_, [](const auto& kv) { return !kv.second->reuse(); });
  else
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
