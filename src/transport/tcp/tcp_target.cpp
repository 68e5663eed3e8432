// Target side of the tcp transport: serves one data connection on the rpc
// listener thread that accepted it. Requests are served straight out of /
// into registered memory (no staging buffer); anything outside the
// registered, remote-accessible regions is refused with an error response.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "base/log.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

const char* typeName(uint8_t type) {
  switch (type) {
    case kReadReq: return "READ_REQ";
    case kWriteReq: return "WRITE_REQ";
    case kReadResp: return "READ_RESP";
    case kWriteResp: return "WRITE_RESP";
    default: return "UNKNOWN";
  }
}

Status checkRequest(const WireHeader& h, uint64_t max_frame) {
  if (h.magic != kWireMagic) return {Code::kRemoteError, fmt::format("bad magic {:#010x}", h.magic)};
  if (h.version != kWireVersion) return {Code::kRemoteError, fmt::format("unsupported version {}", h.version)};
  if (h.type != kReadReq && h.type != kWriteReq)
    return {Code::kRemoteError, fmt::format("unexpected message type {} in a request", h.type)};
  if (h.status != 0) return {Code::kRemoteError, fmt::format("{} has status {} (must be 0)", typeName(h.type), h.status)};
  if (h.size == 0) return {Code::kRemoteError, fmt::format("{} has size 0", typeName(h.type))};
  if (h.size > max_frame)
    return {Code::kRemoteError,
            fmt::format("{} size {} exceeds tcp.max_frame {}", typeName(h.type), h.size, max_frame)};
  if (h.type == kReadReq && h.length != 0)
    return {Code::kRemoteError, fmt::format("READ_REQ carries {} payload bytes (must be 0)", h.length)};
  if (h.type == kWriteReq && h.length != h.size)
    return {Code::kRemoteError, fmt::format("WRITE_REQ length {} != size {}", h.length, h.size)};
  return Status::OK();
}

namespace {

std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return fmt::format("{}:{}", host, port);
}

// Blocking I/O on a socket whose SO_RCVTIMEO/SO_SNDTIMEO is a short poll
// interval: waits are bounded by "no progress for timeout_ms", except the wait
// for the first byte of a request (an idle connection), which is unbounded
// until the transport stops.
class Channel {
 public:
  Channel(TargetState& st, int fd) : st_(st), fd_(fd), timeout_(std::chrono::milliseconds(st.timeout_ms)) {}

  Status recvExact(void* buf, size_t len, bool idle_ok) {
    char* p = static_cast<char*>(buf);
    size_t got = 0;
    auto last = Clock::now();
    while (got < len) {
      ssize_t n = ::recv(fd_, p + got, len - got, MSG_WAITALL);
      if (n > 0) {
        got += static_cast<size_t>(n);
        last = Clock::now();
        continue;
      }
      if (n == 0)
        return {Code::kUnavailable, got || !idle_ok ? "peer closed the connection in the middle of a message"
                                                   : "peer closed the connection"};
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) {
        if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
        auto now = Clock::now();
        if (got == 0 && idle_ok) {
          last = now;
          continue;
        }
        if (now - last >= timeout_)
          return {Code::kTimeout, fmt::format("no bytes from the peer for {} ms (got {} of {})", st_.timeout_ms, got,
                                              len)};
        continue;
      }
      return {Code::kUnavailable, fmt::format("recv: {}", std::strerror(e))};
    }
    return Status::OK();
  }

  Status sendExact(iovec* iov, int cnt) {
    auto last = Clock::now();
    while (cnt > 0) {
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<size_t>(cnt);
      ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
      if (n < 0) {
        int e = errno;
        if (e == EINTR) continue;
        if (e == EAGAIN || e == EWOULDBLOCK) {
          if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
          if (Clock::now() - last >= timeout_)
            return {Code::kTimeout, fmt::format("peer has not read for {} ms", st_.timeout_ms)};
          continue;
        }
        return {Code::kUnavailable, fmt::format("send: {}", std::strerror(e))};
      }
      if (n > 0) last = Clock::now();
      size_t left = static_cast<size_t>(n);
      while (cnt > 0 && left >= iov->iov_len) {
        left -= iov->iov_len;
        ++iov;
        --cnt;
      }
      if (cnt > 0) {
        iov->iov_base = static_cast<char*>(iov->iov_base) + left;
        iov->iov_len -= left;
      }
    }
    return Status::OK();
  }

  Status drain(size_t len) {
    char buf[16384];
    while (len > 0) {
      size_t n = std::min(len, sizeof(buf));
      Status s = recvExact(buf, n, false);
      if (!s.ok()) return s;
      len -= n;
    }
    return Status::OK();
  }

  Status sendError(WireHeader& r, const Status& why) {
    std::string reason = why.message().substr(0, kMaxReason);
    r.status = static_cast<uint8_t>(why.code());
    r.length = static_cast<uint32_t>(reason.size());
    r.size = 0;
    iovec iov[2] = {{&r, sizeof(r)}, {reason.data(), reason.size()}};
    return sendExact(iov, reason.empty() ? 1 : 2);
  }

 private:
  TargetState& st_;
  int fd_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

void TargetState::serve(net::Fd fd) {
  const int raw = fd.get();
  {
    std::lock_guard lk(mu_);
    if (stopping.load()) return;
    fds_.push_back(raw);
  }
  connections.fetch_add(1, std::memory_order_relaxed);
  open_connections.fetch_add(1, std::memory_order_relaxed);
  net::setBufferSizes(raw, static_cast<int>(sock_buf));
  net::setNoDelay(raw);
  // Poll interval for the blocking calls: lets the thread notice stop() and
  // bound stalls mid-message by timeout_ms.
  uint32_t tick = std::clamp<uint32_t>(timeout_ms / 4, 20, 500);
  net::setTimeouts(raw, std::chrono::milliseconds(tick));
  const std::string who = peerName(raw);
  HLOG_DEBUG("tcp target: serving data connection from {}", who);

  Channel ch(*this, raw);
  Status s;
  WireHeader h, r;
  while (true) {
    s = ch.recvExact(&h, sizeof(h), true);
    if (!s.ok()) break;
    Status v = checkRequest(h, max_frame);
    if (!v.ok()) {
      malformed.fetch_add(1, std::memory_order_relaxed);
      HLOG_WARN("tcp target: closing data connection from {}: malformed frame: {}", who, v.message());
      s = v;
      break;
    }
    MemoryRegistry::Pin pin;
    Status ps = registry->pinRemote(h.addr, h.size, pin);
    if (ps.ok() && non_host_count_.load(std::memory_order_acquire) != 0) {
      ps = checkHost(h.addr, h.size);
      if (!ps.ok()) pin.release();
    }
    r = WireHeader{};
    r.id = h.id;
    if (!ps.ok()) {
      refused.fetch_add(1, std::memory_order_relaxed);
      HLOG_DEBUG("tcp target: refused {} from {}: {}", typeName(h.type), who, ps.message());
    }
    if (h.type == kWriteReq) {
      r.type = kWriteResp;
      if (ps.ok()) {
        s = ch.recvExact(reinterpret_cast<void*>(h.addr), h.length, false);
        pin.release();
        if (!s.ok()) break;
        served_writes.fetch_add(1, std::memory_order_relaxed);
        served_bytes.fetch_add(h.size, std::memory_order_relaxed);
        r.size = h.size;
        iovec iov{&r, sizeof(r)};
        s = ch.sendExact(&iov, 1);
      } else {
        s = ch.drain(h.length);
        if (!s.ok()) break;
        s = ch.sendError(r, ps);
      }
    } else {
      r.type = kReadResp;
      if (ps.ok()) {
        r.length = h.size;
        r.size = h.size;
        served_reads.fetch_add(1, std::memory_order_relaxed);
        served_bytes.fetch_add(h.size, std::memory_order_relaxed);
        iovec iov[2] = {{&r, sizeof(r)}, {reinterpret_cast<void*>(h.addr), h.size}};
        s = ch.sendExact(iov, 2);
        pin.release();
      } else {
        s = ch.sendError(r, ps);
      }
    }
    if (!s.ok()) break;
  }
  if (s.code() == Code::kTimeout) HLOG_WARN("tcp target: closing data connection from {}: {}", who, s.message());
  else HLOG_DEBUG("tcp target: data connection from {} ends: {}", who, s.toString());
  open_connections.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), raw), fds_.end());
  // fd closes here, after it left fds_ (stop() never shuts down a reused number).
}

void TargetState::addNonHost(uint64_t addr, uint64_t len, const std::string& location) {
  std::lock_guard lk(non_host_mu_);
  non_host_.push_back(NonHost{addr, len, location});
  non_host_count_.store(non_host_.size(), std::memory_order_release);
}

void TargetState::removeNonHost(uint64_t addr) {
  std::lock_guard lk(non_host_mu_);
  non_host_.erase(std::remove_if(non_host_.begin(), non_host_.end(), [&](const NonHost& n) { return n.addr == addr; }),
                  non_host_.end());
  non_host_count_.store(non_host_.size(), std::memory_order_release);
}

Status TargetState::checkHost(uint64_t addr, uint64_t len) {
  std::lock_guard lk(non_host_mu_);
  for (const NonHost& n : non_host_)
    if (addr < n.addr + n.len && n.addr < addr + len)
      return {Code::kNotSupported, fmt::format("range [{:#x}, +{}) is {} memory; tcp serves host memory only", addr,
                                               len, n.location)};
  return Status::OK();
}

void TargetState::stop() {
  std::lock_guard lk(mu_);
  stopping.store(true);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace hawser::tcp
