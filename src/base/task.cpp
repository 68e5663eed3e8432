#include "base/task.h"

#include "base/transport.h"

namespace hawser {

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

void Task::completeSlice(TransferState state, uint64_t bytes, const Status& error) {
  if (state == TransferState::kCompleted) {
    bytes_done_.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    int rank = failureRank(state);
    if (rank == 0) rank = 4;  // a non-terminal state reported as an end is a failure
    std::lock_guard lk(error_mu_);
    if (rank > worst_rank_.load()) {
      worst_rank_.store(rank);
      error_ = error.ok() ? Status(Code::kInternal, "slice failed without a reason") : error;
    }
  }
  uint32_t done = slices_done_.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (done == slices_total_) owner_->taskFinished(id_);
}

void Task::reset(const TransferRequest& request, size_t id, std::shared_ptr<const SegmentDesc> segment,
                 std::shared_ptr<PeerHandle> peer, int remote_buffer) {
  request_ = request;
  id_ = id;
  segment_ = std::move(segment);
  peer_ = std::move(peer);
  remote_buffer_ = remote_buffer;
  slices_total_ = 0;
  slices_done_.store(0, std::memory_order_relaxed);
  bytes_done_.store(0, std::memory_order_relaxed);
  worst_rank_.store(0, std::memory_order_relaxed);
  submitted_.store(false, std::memory_order_relaxed);
  std::lock_guard lk(error_mu_);
  error_ = Status::OK();
}

bool Task::terminal() const {
  return submitted_.load(std::memory_order_acquire) &&
         slices_done_.load(std::memory_order_acquire) >= slices_total_;
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
