#include "base/task.h"

#include <cstddef>

#include "base/traffic_metrics.h"
#include "base/transport.h"

namespace hawser {

const LocalRegion Task::kNoRegion{};

int failureRank(TransferState s) {
  switch (s) {
    case TransferState::kFailed: return 4;
    case TransferState::kTimeout: return 3;
    case TransferState::kCanceled: return 2;
    case TransferState::kInvalid: return 1;
    default: return 0;
  }
}

TransferState stateOfRank(int rank) {
  switch (rank) {
    case 4: return TransferState::kFailed;
    case 3: return TransferState::kTimeout;
    case 2: return TransferState::kCanceled;
    case 1: return TransferState::kInvalid;
    default: return TransferState::kCompleted;
  }
}

namespace {

// The code a failed slice is counted under: its error's, else its state's.
Code failureCode(TransferState state, const Status& error) {
  if (!error.ok()) return error.code();
  return state == TransferState::kTimeout ? Code::kTimeout : Code::kInternal;
}

}  // namespace

uint64_t Task::sinceSubmitNs(std::chrono::steady_clock::time_point now) const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - submitted_at_).count());
}

void Task::completeSlice(TransferState state, uint64_t bytes, const Status& error) {
  completeSlice(state, bytes, error, traffic_p_ ? std::chrono::steady_clock::now() : submitted_at_);
}

void Task::completeSlice(TransferState state, uint64_t bytes, const Status& error,
                         std::chrono::steady_clock::time_point now) {
  // One shard lookup for every count of this slice (and of its task).
  const size_t shard = traffic_p_ ? metrics::threadShard() : 0;
  const uint64_t ns = traffic_p_ ? sinceSubmitNs(now) : 0;
  if (traffic_p_) {
    traffic_p_->sliceEnded(shard, metrics::PeerTraffic::dir(request_.opcode),
                         state == TransferState::kCompleted ? Code::kOk : failureCode(state, error), bytes, ns);
  }
  if (state == TransferState::kCompleted) {
    bytes_done_.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    noteFailure(state, error);
  }
  slicesEnded(1, ns, shard);
}

void Task::completeSlices(uint32_t n, uint64_t bytes) {
  if (n == 0) return;
  const size_t shard = traffic_p_ ? metrics::threadShard() : 0;
  const uint64_t ns = traffic_p_ ? sinceSubmitNs() : 0;
  if (traffic_p_) traffic_p_->slicesEnded(shard, metrics::PeerTraffic::dir(request_.opcode), Code::kOk, n, bytes, ns);
  bytes_done_.fetch_add(bytes, std::memory_order_relaxed);
  slicesEnded(n, ns, shard);
}

void Task::completeWhole(Task* const* tasks, const uint64_t* bytes, size_t n,
                         std::chrono::steady_clock::time_point now) {
  size_t shard = 0;
  bool have_shard = false;
  for (size_t i = 0; i < n;) {
    // A run: tasks i .. j-1 counted together.
    Task* const first = tasks[i];
    metrics::PeerTraffic* const traffic = first->traffic_p_;
    TaskOwner* const owner = first->owner_;
    const size_t first_id = first->id_;
    const OpCode op = first->request_.opcode;
    const auto at = first->submitted_at_;
    uint64_t run_bytes = 0;
    size_t j = i;
    for (; j < n; ++j) {
      Task* t = tasks[j];
      if (j > i && (t->traffic_p_ != traffic || t->owner_ != owner || t->id_ != first_id + (j - i) ||
                    t->request_.opcode != op || t->submitted_at_ != at))
        break;
      run_bytes += bytes[j];
    }
    const uint32_t m = static_cast<uint32_t>(j - i);
    if (traffic) {
      if (!have_shard) shard = metrics::threadShard(), have_shard = true;
      const uint64_t ns = first->sinceSubmitNs(now);
      const int dir = metrics::PeerTraffic::dir(op);
      traffic->slicesEnded(shard, dir, Code::kOk, m, run_bytes, ns);
      traffic->tasksEnded(shard, dir, m, ns);
    }
    // Each task's only completer: plain stores, the count last (release:
    // whoever sees the task terminal sees its bytes).
    for (size_t k = i; k < j; ++k) {
      tasks[k]->bytes_done_.store(bytes[k], std::memory_order_relaxed);
      tasks[k]->slices_done_.store(1, std::memory_order_release);
    }
    owner->tasksFinished(first_id, m);
    i = j;
  }
}

void Task::failSlices(uint32_t n, TransferState state, const Status& error) {
  if (n == 0) return;
  const size_t shard = traffic_p_ ? metrics::threadShard() : 0;
  const uint64_t ns = traffic_p_ ? sinceSubmitNs() : 0;
  if (traffic_p_)
    traffic_p_->slicesEnded(shard, metrics::PeerTraffic::dir(request_.opcode), failureCode(state, error), n, 0, ns);
  noteFailure(state, error);
  slicesEnded(n, ns, shard);
}

void Task::noteFailure(TransferState state, const Status& error) {
  int rank = failureRank(state);
  if (rank == 0) rank = 4;  // a non-terminal state reported as an end is a failure
  std::lock_guard lk(error_mu_);
  if (rank > worst_rank_.load()) {
    worst_rank_.store(rank);
    error_ = error.ok() ? Status(Code::kInternal, "slice failed without a reason") : error;
  }
}

void Task::slicesEnded(uint32_t n, uint64_t ns, size_t shard) {
  // Nothing of the task may be read after the increment unless it made the
  // task terminal: once another thread's increment does, its batch may be
  // freed or the task reused (a completer of an earlier slice read
  // slices_total_ afterwards; found by ThreadSanitizer in
  // rdma_transport_test). The last completer is safe: the batch stays until
  // taskFinished() has counted the task.
  const uint32_t total = slices_total_;
  TaskOwner* const owner = owner_;
  const size_t id = id_;
  const uint32_t done = slices_done_.fetch_add(n, std::memory_order_acq_rel) + n;
  if (done != total) return;
  if (traffic_p_) {
    Code code = Code::kOk;
    if (worst_rank_.load() != 0) {
      std::lock_guard lk(error_mu_);
      code = error_.code();
    }
    traffic_p_->taskEnded(shard, metrics::PeerTraffic::dir(request_.opcode), code, ns);
  }
  owner->taskFinished(id);
}

void Task::countRetry() {
  if (traffic_p_) traffic_p_->retried();
}

void Task::reset(const TransferRequest& request, size_t id, std::shared_ptr<const SegmentDesc> segment,
                 std::shared_ptr<PeerHandle> peer, int remote_buffer,
                 std::shared_ptr<metrics::PeerTraffic> traffic) {
  segment_ = std::move(segment);
  peer_ = std::move(peer);
  traffic_ = std::move(traffic);
  std::lock_guard lk(error_mu_);  // a reused task (a block window's) may still be read
  resetBorrowed(request, id, segment_.get(), peer_.get(), remote_buffer, traffic_.get());
}

void Task::resetBorrowed(const TransferRequest& request, size_t id, const SegmentDesc* segment, PeerHandle* peer,
                         int remote_buffer, metrics::PeerTraffic* traffic) {
  request_ = request;
  id_ = static_cast<uint32_t>(id);  // a batch's index: batch.max_capacity is at most 2^30
  segment_p_ = segment;
  peer_p_ = peer;
  traffic_p_ = traffic;
  region_ = nullptr;
  remote_buffer_ = remote_buffer;
  slices_total_ = 0;
  slices_done_.store(0, std::memory_order_relaxed);
  bytes_done_.store(0, std::memory_order_relaxed);
  submitted_.store(false, std::memory_order_relaxed);
  // The error is read only once worst_rank_ says there is one: a task
  // that never failed does not touch it (nor its cache lines).
  if (worst_rank_.load(std::memory_order_relaxed) != 0) {
    worst_rank_.store(0, std::memory_order_relaxed);
    error_ = Status::OK();
  }
}

void Task::markSubmitted(std::chrono::steady_clock::time_point now) { markSubmitted(this, 1, now); }

void Task::markSubmitted(Task* tasks, size_t n, std::chrono::steady_clock::time_point now) {
  metrics::PeerTraffic* traffic = nullptr;
  uint32_t posted = 0;
  for (size_t i = 0; i < n; ++i) {
    Task& t = tasks[i];
    if (t.traffic_p_ != traffic) {
      if (traffic) traffic->slicesPosted(posted);
      traffic = t.traffic_p_;
      posted = 0;
    }
    posted += t.slices_total_;
    t.submitted_at_ = now;
    t.submitted_.store(true, std::memory_order_release);
  }
  if (traffic) traffic->slicesPosted(posted);
}

void Task::markMoved(Task* tasks, size_t n, std::chrono::steady_clock::time_point now) {
  // What a submit and a completion write lies on the task's first two
  // lines (task.h): the request and its segment, then the state.
  static_assert(offsetof(Task, segment_p_) + sizeof(void*) <= 64, "the request and its segment: line 0");
  static_assert(offsetof(Task, submitted_) < 128 && offsetof(Task, bytes_done_) + 8 <= 128, "the state: line 1");
  static_assert(offsetof(Task, owner_) >= 128, "the owner: after the written lines");
  for (size_t i = 0; i < n; ++i) {
    Task& t = tasks[i];
    t.slices_total_ = 1;
    t.bytes_done_.store(t.request_.length, std::memory_order_relaxed);
    t.slices_done_.store(1, std::memory_order_relaxed);
    t.submitted_at_ = now;
    t.submitted_.store(true, std::memory_order_release);
  }
}

bool Task::terminal() const {
  return submitted_.load(std::memory_order_acquire) &&
         slices_done_.load(std::memory_order_acquire) >= slices_total_;
}

bool Task::completed() const {
  return terminal() && worst_rank_.load(std::memory_order_acquire) == 0 &&
         bytes_done_.load(std::memory_order_relaxed) == request_.length;
}

TransferStatus Task::status() const {
  TransferStatus st;
  if (!submitted_.load(std::memory_order_acquire)) {
    st.s = TransferState::kWaiting;
    return st;
  }
  uint32_t done = slices_done_.load(std::memory_order_acquire);
  st.transferred_bytes = bytes_done_.load(std::memory_order_relaxed);
  if (done < slices_total_) {
    st.s = TransferState::kPending;
    return st;
  }
  int rank = worst_rank_.load();
  st.s = stateOfRank(rank);
  if (rank != 0) {
    std::lock_guard lk(error_mu_);
    st.error = error_;
  } else if (st.transferred_bytes != request_.length) {
    // Every slice reported success but bytes are missing: never report that
    // as COMPLETED.
    st.s = TransferState::kFailed;
    st.error = Status(Code::kInternal, "slices completed but transferred_bytes != length");
  }
  return st;
}

}  // namespace hawser
