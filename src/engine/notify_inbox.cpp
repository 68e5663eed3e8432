// NotifyInbox (notify.h): the wire form and the bounded receiving queue.
#include <cstring>

#include <fmt/format.h>

#include "engine/notify.h"

namespace hawser {

namespace {

void putString(std::string& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  const unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  out.append(reinterpret_cast<const char*>(len), 4);
  out.append(s);
}

bool getString(const std::string& in, size_t& at, std::string& out) {
  if (in.size() - at < 4) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(in.data() + at);
  const uint32_t n = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  at += 4;
  if (in.size() - at < n) return false;
  out.assign(in, at, n);
  at += n;
  return true;
}

}  // namespace

std::string encodeNotification(const std::string& from, const Notification& n) {
  std::string out;
  out.reserve(12 + from.size() + n.name.size() + n.message.size());
  putString(out, from);
  putString(out, n.name);
  putString(out, n.message);
  return out;
}

Status decodeNotification(const std::string& body, ReceivedNotification& out) {
  size_t at = 0;
  if (!getString(body, at, out.peer) || !getString(body, at, out.name) || !getString(body, at, out.message) ||
      at != body.size())
    return {Code::kInvalidArgument, fmt::format("malformed notification ({} bytes)", body.size())};
  return Status::OK();
}

Status NotifyInbox::start(rpc::Server& rpc, size_t depth, size_t max_bytes, const std::string& segment) {
  {
    std::lock_guard lk(mu_);
    depth_ = depth;
    max_bytes_ = max_bytes;
    segment_ = segment;
  }
  return rpc.onCall(kNotifyCall, [this](const std::string& request, std::string&) { return accept(request); });
}

Status NotifyInbox::accept(const std::string& body) {
  ReceivedNotification n;
  Status s = decodeNotification(body, n);
  if (!s.ok()) return s;
  return push(std::move(n));
}

Status NotifyInbox::push(ReceivedNotification n) {
  std::lock_guard lk(mu_);
  if (n.name.size() + n.message.size() > max_bytes_)
    return {Code::kInvalidArgument,
            fmt::format("segment '{}' accepts notifications of at most {} bytes (name + message; config "
                        "notify.max_message_bytes); this one has {}",
                        segment_, max_bytes_, n.name.size() + n.message.size())};
  if (queue_.size() >= depth_) {
    ++refused_full_;
    return {Code::kCapacityExceeded,
            fmt::format("the notification queue of segment '{}' is full ({} undrained; its owner drains it with "
                        "getNotifies; config notify.queue_depth)",
                        segment_, queue_.size())};
  }
  if (n.kind == NotifyKind::kFailed) ++failures_;
  else ++received_;
  queue_.push_back(std::move(n));
  return Status::OK();
}

void NotifyInbox::drain(std::vector<ReceivedNotification>& out, bool with_failures) {
  out.clear();
  std::lock_guard lk(mu_);
  out.reserve(queue_.size());
  for (auto& n : queue_)
    if (with_failures || n.kind == NotifyKind::kDelivered) out.push_back(std::move(n));
  queue_.clear();
}

uint64_t NotifyInbox::failuresReceived() const {
  std::lock_guard lk(mu_);
  return failures_;
}

uint64_t NotifyInbox::received() const {
  std::lock_guard lk(mu_);
  return received_;
}

uint64_t NotifyInbox::refusedFull() const {
  std::lock_guard lk(mu_);
  return refused_full_;
}

}  // namespace hawser
