#include "rpc/connection.h"

#include <poll.h>

#include <fmt/format.h>

#include "rpc/frame_reader.h"
#include "rpc/rpc.h"

namespace hawser::rpc {

bool Connection::stale() const {
  pollfd p{fd_.get(), POLLIN, 0};
  // Nothing may arrive on an idle control connection: readable means the
  // peer closed it (or broke the protocol); either way it cannot be used.
  return ::poll(&p, 1, 0) != 0;
}

void Connection::close() {
  std::lock_guard lk(mu_);
  fd_.reset();
}

Status Connection::call(uint16_t method, const std::string& request, std::string& reply,
                        std::chrono::milliseconds timeout) {
  std::lock_guard lk(mu_);
  const std::string peer = fmt::format("{}:{}", host_, port_);
  if (request.size() > kMaxControlBody)
    return {Code::kInvalidArgument,
            fmt::format("{}: request of {} bytes exceeds the control limit {}", peer, request.size(), kMaxControlBody)};
  if (fd_ && stale()) fd_.reset();
  if (!fd_) {
    Status s = openStream(host_, port_, kConnControl, timeout, fd_);
    if (!s.ok()) {
      fd_.reset();
      return {s.code(), fmt::format("{}: {}", peer, s.message())};
    }
  }
  net::setTimeouts(fd_.get(), timeout);
  Frame f;
  f.type = method;
  f.id = next_id_++;
  f.length = static_cast<uint32_t>(request.size());
  iovec iov[2] = {{&f, sizeof(f)}, {const_cast<char*>(request.data()), request.size()}};
  Status s = net::sendAllv(fd_.get(), iov, request.empty() ? 1 : 2);
  FrameReader in(kMaxControlBody);
  if (s.ok()) s = recvFrame(fd_.get(), in, timeout, false);
  const Frame& r = in.frame();
  if (s.ok() && (r.type != (method | kReplyBit) || r.id != f.id))
    s = {Code::kRemoteError, "reply does not match request"};
  if (!s.ok()) {
    fd_.reset();
    if (s.code() == Code::kUnavailable)
      return {Code::kUnavailable,
              fmt::format("{} closed the connection (auth token mismatch, over its connection caps rpc.max_*, "
                          "shutting down or gone): {}",
                          peer, s.message())};
    return {s.code(), fmt::format("{}: {}", peer, s.message())};
  }
  if (r.status != 0) {
    Code c = static_cast<Code>(r.status);
    if (r.status < 0 || r.status > static_cast<int32_t>(Code::kInternal)) c = Code::kRemoteError;
    return {c, fmt::format("{}: {}", peer, in.body())};
  }
  reply = std::move(in.body());
  return Status::OK();
}

}  // namespace hawser::rpc
