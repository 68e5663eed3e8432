// PyEngine's transfer paths (py_engine.h): requests built and checked, async
// batches submitted, sync batches through transferSync, batch status.
#include "py_engine.h"

namespace hawser::pymod {

Status PyEngine::requests(const char* what, const std::string& target, const std::vector<uint64_t>& buffers,
                          const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                          const std::string& hint, std::vector<TransferRequest>& reqs, Submitted& out) {
  const std::string where = fmt::format("{} to '{}'", what, target);
  TransferEngine* e = nullptr;
  Status s = engine(e);
  if (!s.ok()) return context(s, what);
  (void)hint;  // Mooncake's classic engine ignores it too; hawser picks the transport per request
  if (buffers.size() != peers.size() || buffers.size() != lengths.size())
    return {Code::kInvalidArgument,
            fmt::format("{}: buffers ({}), peer_buffer_addresses ({}) and lengths ({}) differ in length", where,
                        buffers.size(), peers.size(), lengths.size())};
  out.what = what;
  out.target = target;
  out.deadline = Clock::now() + Millis(limits_.sync_timeout_ms);
  if (buffers.empty()) return Status::OK();  // nothing to move: no segment is opened
  SegmentID seg = kInvalidSegment;
  s = segment(e, target, seg);
  if (!s.ok()) return context(s, what);
  reqs.assign(buffers.size(), TransferRequest{});
  const RouteContract route = routeContract();
  uint64_t bytes = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    reqs[i] = TransferRequest{op, reinterpret_cast<void*>(buffers[i]), seg, peers[i], lengths[i], route};
    bytes = bytes + lengths[i] < bytes ? UINT64_MAX : bytes + lengths[i];
  }
  out.tasks = reqs.size();
  out.bytes = bytes;
  // Timeout: python.sync_timeout_ms + bytes * python.sync_timeout_ns_per_byte.
  double ns = static_cast<double>(bytes) * static_cast<double>(limits_.ns_per_byte);
  double total_ms = static_cast<double>(limits_.sync_timeout_ms) + ns / 1e6;
  total_ms = std::min(total_ms, 1e12);
  out.deadline = Clock::now() + Millis(static_cast<int64_t>(total_ms));
  return Status::OK();
}

Status PyEngine::submit(const char* what, const std::string& target, const std::vector<uint64_t>& buffers,
                        const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                        const std::string& hint, Submitted& out, const Notification* notify,
                        const Signal* signal) {
  std::vector<TransferRequest> reqs;
  Status s = requests(what, target, buffers, peers, lengths, op, hint, reqs, out);
  if (!s.ok()) return s;
  const std::string where = fmt::format("{} to '{}'", what, target);
  TransferEngine* e = engine_.get();
  BatchID b = kInvalidBatch;
  s = e->allocateBatchID(std::max<size_t>(reqs.size(), 1), b);
  if (!s.ok()) return context(s, where);
  if (!reqs.empty()) {
    s = notify   ? e->submitTransfer(b, reqs, *notify)
        : signal ? e->submitTransfer(b, reqs, *signal)
                 : e->submitTransfer(b, reqs);
  } else if (notify) {  // an empty batch is complete as it is: the notification goes alone
    SegmentID seg = kInvalidSegment;
    s = segment(e, target, seg);
    if (s.ok()) s = e->sendNotify(seg, *notify);
  }
  if (!s.ok()) {
    (void)e->freeBatchID(b);  // nothing was accepted: the batch is empty
    return context(s, where);
  }
  out.id = b;
  return Status::OK();
}

Status PyEngine::syncTransfer(const std::string& target, const std::vector<uint64_t>& buffers,
                              const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                              const char* what, const std::string& hint, const Notification* notify) {
  reap();
  Submitted sub;
  std::vector<TransferRequest> reqs;
  Status s = requests(what, target, buffers, peers, lengths, op, hint, reqs, sub);
  if (!s.ok()) return s;
  const std::string where = fmt::format("{} to '{}'", what, target);
  if (reqs.empty()) {
    if (!notify) return Status::OK();
    SegmentID seg = kInvalidSegment;  // nothing to move: the notification goes alone
    s = segment(engine_.get(), target, seg);
    if (s.ok()) s = engine_->sendNotify(seg, *notify);
    return context(s, where);
  }
  const auto now = Clock::now();
  const Millis limit = sub.deadline > now ? std::chrono::ceil<Millis>(sub.deadline - now) : Millis(0);
  std::vector<TransferStatus> st;
  const Millis cancel_wait(limits_.cancel_wait_ms);
  Status r = notify ? engine_->transferSync(reqs, *notify, limit, &st, cancel_wait)
                    : engine_->transferSync(reqs, limit, &st, cancel_wait);
  if (!r.ok() && st.empty()) return context(r, where);  // refused at submit
  Status o = outcome(limits_, sub, st, r.code() == Code::kTimeout, where);
  // Every byte moved, the notification did not arrive (queue full, peer gone).
  if (notify && o.ok() && !r.ok()) return context(r, where + ": the notification");
  return o;
}

int PyEngine::batchStatus(const std::vector<py::int_>& ids) {
  std::vector<int64_t> v(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) v[i] = batchId(ids[i]);
  Status first;
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < v.size(); ++i) {
      Submitted sub;
      Status s = take(v[i], "get_batch_transfer_status", sub);
      if (s.ok()) s = finish(sub);
      if (!s.ok() && first.ok()) first = s;
    }
  }
  return ret(first);
}

int PyEngine::cancelTransfer(const py::int_& batch_id) {
  const int64_t id = batchId(batch_id);
  Status s;
  {
    py::gil_scoped_release nogil;
    TransferEngine* e = live();
    if (!e)
      s = {Code::kInvalidArgument, "cancel_transfer: engine is not initialized: call initialize() first"};
    else if (id <= 0)
      s = {Code::kInvalidBatch, fmt::format("cancel_transfer: batch id {} is not allocated", id)};
    else if ((s = e->cancelTransfer(static_cast<BatchID>(id))).ok())
      s = e->waitTransfer(static_cast<BatchID>(id), Millis(limits_.cancel_wait_ms));
  }
  return ret(s);
}

int PyEngine::checkStatus(const py::int_& batch_id) {
  const int64_t id = batchId(batch_id);
  Status s;
  int result = -1;
  {
    py::gil_scoped_release nogil;
    Submitted sub;
    s = peek(id, "transfer_check_status", sub);
    if (s.ok()) {
      TransferEngine* e = engine_.get();
      TransferStatus st;
      if (sub.tasks > 0) {
        (void)e->waitTransfer(sub.id, Millis(0));  // drives polling transports
        s = e->getBatchTransferStatus(sub.id, st);
      } else {
        st.s = TransferState::kCompleted;  // an empty batch
      }
      if (s.ok() && !isTerminal(st.s) && Clock::now() < sub.deadline) {
        result = 0;
      } else if (s.ok()) {
        s = take(id, "transfer_check_status", sub);
        if (s.ok()) s = finish(sub);
        result = s.ok() ? 1 : s.code() == Code::kTimeout ? -2 : -1;
      }
    }
  }
  if (result < 0) fail(s);
  return result;
}

}  // namespace hawser::pymod
