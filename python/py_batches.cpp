#include "py_batches.h"

#include <algorithm>

#include <fmt/format.h>

namespace hawser::pymod {

Status outcome(const Limits& limits, const Submitted& sub, const std::vector<TransferStatus>& st, bool timed_out,
               const std::string& where) {
  size_t failed = 0, first = st.size();
  bool all_terminal = true;
  int worst = 0;
  Status worst_error;
  for (size_t i = 0; i < st.size(); ++i) {
    if (!isTerminal(st[i].s)) all_terminal = false;
    if (st[i].s == TransferState::kCompleted) continue;
    if (isTerminal(st[i].s)) {
      ++failed;
      if (first == st.size()) first = i;
    }
    const int r = failureRank(st[i].s);
    if (r > worst) {
      worst = r;
      worst_error = st[i].error;
    }
  }
  if (all_terminal && failed == 0) return Status::OK();  // every byte moved (even if late)
  const uint64_t limit_ms =
      static_cast<uint64_t>(limits.sync_timeout_ms) + sub.bytes * static_cast<uint64_t>(limits.ns_per_byte) / 1000000;
  if (!all_terminal)
    return {Code::kTimeout,
            fmt::format("{}: not finished after {} ms (python.sync_timeout_ms + bytes * "
                        "python.sync_timeout_ns_per_byte); canceled, but I/O still runs after a further {} ms: "
                        "the batch is kept and freed once it ends",
                        where, limit_ms, limits.cancel_wait_ms)};
  // The batch's state: the worst task's, FAILED > TIMEOUT > CANCELED > INVALID.
  TransferState batch_state = TransferState::kFailed;
  for (auto t : {TransferState::kFailed, TransferState::kTimeout, TransferState::kCanceled, TransferState::kInvalid})
    if (failureRank(t) == worst) batch_state = t;
  Code code = worst_error.ok() ? Code::kIoError : worst_error.code();
  if (batch_state == TransferState::kTimeout || timed_out) code = Code::kTimeout;
  std::string msg = fmt::format("{}: {} of {} task(s) did not complete (batch {})", where, failed, sub.tasks,
                                stateName(batch_state));
  if (first < st.size())
    msg += fmt::format("; first is requests[{}] {}{}", first, stateName(st[first].s),
                       st[first].error.ok() ? std::string() : ": " + st[first].error.toString());
  if (timed_out)
    msg += fmt::format(" [not finished after {} ms (python.sync_timeout_ms + bytes * "
                       "python.sync_timeout_ns_per_byte), so canceled]",
                       limit_ms);
  return {code, msg};
}

void BatchTable::track(const Submitted& sub) {
  std::lock_guard lk(mu_);
  async_[sub.id] = sub;
}

Status BatchTable::peek(int64_t id, const char* what, Submitted& out) {
  if (id <= 0)
    return {Code::kInvalidBatch,
            fmt::format("{}: batch id {} is not a batch (a submit that failed returned 0; last_error() said why)",
                        what, id)};
  std::lock_guard lk(mu_);
  auto it = async_.find(static_cast<BatchID>(id));
  if (it == async_.end())
    return {Code::kInvalidBatch,
            fmt::format("{}: batch id {} was not returned by a batch_transfer_async_* / transfer_submit_* call "
                        "of this engine, or its outcome was already collected",
                        what, id)};
  out = it->second;
  return Status::OK();
}

Status BatchTable::take(int64_t id, const char* what, Submitted& out) {
  Status s = peek(id, what, out);
  if (!s.ok()) return s;
  std::lock_guard lk(mu_);
  if (async_.erase(static_cast<BatchID>(id)) == 0)
    return {Code::kInvalidBatch, fmt::format("{}: batch id {}: its outcome was already collected", what, id)};
  return Status::OK();
}

Status BatchTable::finish(TransferEngine& engine, const Limits& limits, const Submitted& sub) {
  TransferEngine* e = &engine;
  const std::string where = fmt::format("{} to '{}'", sub.what, sub.target);
  if (sub.tasks == 0) {  // an empty batch: nothing was submitted, nothing to wait for
    freeOrKeep(engine, sub.id);
    return Status::OK();
  }
  auto now = Clock::now();
  Millis left = sub.deadline > now ? std::chrono::ceil<Millis>(sub.deadline - now) : Millis(0);
  Status w = e->waitTransfer(sub.id, left);
  bool timed_out = false;
  if (w.code() == Code::kTimeout) {
    timed_out = true;
    (void)e->cancelTransfer(sub.id);
    w = e->waitTransfer(sub.id, Millis(limits.cancel_wait_ms));
  }
  if (!w.ok() && w.code() != Code::kTimeout) return context(w, where);
  std::vector<TransferStatus> st(sub.tasks);
  for (size_t i = 0; i < sub.tasks; ++i) {
    Status s = e->getTransferStatus(sub.id, i, st[i]);
    if (!s.ok()) return context(s, where);
  }
  Status result = outcome(limits, sub, st, timed_out, where);
  freeOrKeep(engine, sub.id);
  return result;
}

void BatchTable::freeOrKeep(TransferEngine& e, BatchID id) {
  Status s = e.freeBatchID(id);
  if (s.code() == Code::kBatchBusy) {
    std::lock_guard lk(mu_);
    unreclaimed_.push_back(id);
  }
}

void BatchTable::reap(TransferEngine& e) {
  std::lock_guard lk(mu_);
  std::erase_if(unreclaimed_, [&](BatchID id) {
    Status s = e.freeBatchID(id);
    return s.ok() || s.code() == Code::kInvalidBatch;
  });
}

size_t BatchTable::unreclaimed() {
  std::lock_guard lk(mu_);
  return unreclaimed_.size();
}

}  // namespace hawser::pymod
