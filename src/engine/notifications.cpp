// Notifications (hawser/engine.h): sendNotify, getNotifies and the status of
// a batch's notifying submits; the queues themselves are in notify.h.
#include <fmt/format.h>

#include "engine/engine_impl.h"

namespace hawser {

std::string_view notifyStateName(NotifyState s) {
  switch (s) {
    case NotifyState::kWaiting: return "WAITING";
    case NotifyState::kSending: return "SENDING";
    case NotifyState::kDelivered: return "DELIVERED";
    case NotifyState::kNotSent: return "NOT_SENT";
    case NotifyState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

Status EngineImpl::startNotifications() {
  int64_t depth = 0;
  uint64_t max_bytes = 0;
  std::chrono::milliseconds timeout{0};
  Status s;
  if (!(s = config_.getInt("notify.queue_depth", depth)).ok() ||
      !(s = config_.getSize("notify.max_message_bytes", max_bytes)).ok() ||
      !(s = config_.getDuration("rpc.timeout_ms", timeout)).ok())
    return {s.code(), "init: " + s.message()};
  std::chrono::milliseconds peer_timeout{0};
  if (!(s = config_.getDuration("signal.peer_timeout_ms", peer_timeout)).ok())
    return {s.code(), "init: " + s.message()};
  notify_max_bytes_ = max_bytes;
  outbox_.configure(NotifyOutbox::Settings{segment_name_, host_, rpc_.port(), incarnation_, timeout, peer_timeout});
  s = inbox_.start(rpc_, static_cast<size_t>(depth), max_bytes, segment_name_);
  if (!s.ok()) return s;
  return startSignals();
}

Status EngineImpl::notifyTarget(const SegmentView& view, const Notification& n, std::string& host,
                                uint16_t& port) const {
  return listenerOf(view, fmt::format("notification '{}'", n.name.substr(0, 64)), n.name.size() + n.message.size(),
                    host, port);
}

Status EngineImpl::listenerOf(const SegmentView& view, const std::string& what, size_t bytes, std::string& host,
                              uint16_t& port) const {
  const SegmentDesc& d = *view.desc;
  if (d.kind != SegmentDesc::Kind::kMemory)
    return {Code::kInvalidArgument,
            fmt::format("{}: segment '{}' is a file segment; only a memory segment has an engine to notify", what,
                        d.name)};
  if (bytes > notify_max_bytes_)
    return {Code::kInvalidArgument,
            fmt::format("{} has {} bytes; config notify.max_message_bytes allows {}", what, bytes, notify_max_bytes_)};
  if (d.host.empty() || d.rpc_port == 0)
    return {Code::kMetadataError,
            fmt::format("segment '{}': its descriptor names no rpc listener to notify", d.name)};
  host = d.host;
  port = d.rpc_port;
  return Status::OK();
}

Status EngineImpl::sendNotify(SegmentID target, const Notification& n) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto view = segmentView(target);
  if (!view) return {Code::kSegmentNotFound, fmt::format("target {} is not an open segment", target)};
  std::string host;
  uint16_t port = 0;
  if (!(s = notifyTarget(*view, n, host, port)).ok()) return s;
  auto o = outbox_.queue(host, port, view->desc->name, n, true);
  // Settles after those issued before it to this peer; each of them ends
  // with its transfer, and a send is bounded by rpc.timeout_ms.
  o->waitSettled(std::chrono::steady_clock::time_point::max());
  return o->status().error;
}

Status EngineImpl::getNotifies(std::vector<ReceivedNotification>& out, bool with_failures) {
  Status s = checkInit();
  if (!s.ok()) return s;
  inbox_.drain(out, with_failures);
  return Status::OK();
}

Status EngineImpl::notifyStatus(BatchID id, std::vector<NotifyStatus>& out) {
  out.clear();
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  for (auto& o : batch->notifies()) out.push_back(o->status());
  return Status::OK();
}

}  // namespace hawser
