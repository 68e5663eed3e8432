// The target's side of one data connection: read-ahead of request headers,
// payloads received only while the initiator holds the connection, OK
// responses sent together (tcp_target_channel.h).
#include "transport/tcp/tcp_target_channel.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace hawser::tcp {

TargetChannel::TargetChannel(TargetState& st, int fd, std::chrono::milliseconds tick)
    : st_(st),
      fd_(fd),
      timeout_(std::chrono::milliseconds(st.timeout_ms)),
      tick_(tick),
      in_(new char[kReadAhead]),
      iov_(2 * kMaxQueued + kMaxFrameRuns) {}

Status TargetChannel::recvPayload(iovec* pieces, size_t cnt, bool then_header) {
  size_t len = 0;
  for (size_t i = 0; i < cnt; ++i) len += pieces[i].iov_len;
  size_t got = 0, at = 0;  // bytes landed; the first piece with bytes to come
  auto landed = [&](size_t k) {
    got += k;
    for (; at < cnt && (k > 0 || pieces[at].iov_len == 0); ++at) {
      const size_t t = std::min(k, pieces[at].iov_len);
      pieces[at].iov_base = static_cast<char*>(pieces[at].iov_base) + t;
      pieces[at].iov_len -= t;
      k -= t;
      if (pieces[at].iov_len > 0) break;
    }
  };
  auto last = Clock::now();
  bool first = true;
  while (got < len) {
    const size_t buffered = in_end_ - in_begin_;
    pollfd pfd{fd_, POLLIN | POLLRDHUP, 0};
    // Bytes already read ahead need only a look (timeout 0) before landing.
    int r = ::poll(&pfd, 1, buffered > 0 ? 0 : static_cast<int>(tick_.count()));
    if (r < 0) {
      if (errno == EINTR) continue;
      return {Code::kUnavailable, fmt::format("poll: {}", std::strerror(errno))};
    }
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      st_.abandoned_writes.fetch_add(1, std::memory_order_relaxed);
      return {Code::kUnavailable,
              fmt::format("the initiator closed the connection with {} of a {}-byte write still to come: the "
                          "write was abandoned and is not applied",
                          len - got, len)};
    }
    if (first && buffered > 0) {
      first = false;
      const size_t t = std::min(len - got, buffered);
      for (size_t done = 0, j = at; done < t; ++j) {
        const size_t c = std::min(t - done, pieces[j].iov_len);
        std::memcpy(pieces[j].iov_base, in_.get() + in_begin_ + done, c);
        done += c;
      }
      in_begin_ += t;
      landed(t);
      continue;
    }
    first = false;
    if (r > 0) {
      iovec iov[kMaxIov];
      const size_t k = std::min(cnt - at, static_cast<size_t>(kMaxIov - 1));
      std::copy(pieces + at, pieces + at + k, iov);
      size_t n_iov = k;
      if (then_header && at + k == cnt && in_begin_ == in_end_) {
        in_begin_ = in_end_ = 0;
        iov[n_iov++] = {in_.get(), next_};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n_iov;
      ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT);
      if (n > 0) {
        const size_t got_now = static_cast<size_t>(n), payload = std::min(got_now, len - got);
        landed(payload);
        in_end_ += got_now - payload;
        last = Clock::now();
        continue;
      }
      if (n == 0) return {Code::kUnavailable, "peer closed the connection in the middle of a message"};
      int e = errno;
      if (e != EINTR && e != EAGAIN && e != EWOULDBLOCK)
        return {Code::kUnavailable, fmt::format("recv: {}", std::strerror(e))};
    }
    if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
    if (Clock::now() - last >= timeout_)
      return {Code::kTimeout,
              fmt::format("no bytes from the peer for {} ms (got {} of {})", st_.timeout_ms, got, len)};
  }
  return Status::OK();
}

Status TargetChannel::queue(const WireHeader& r, const RunEntry* runs, size_t n, std::vector<MemoryRegistry::Pin>& pins) {
  if (niov_ + 1 + n > iov_.size()) {
    Status s = flush();
    if (!s.ok()) return s;
  }
  hdrs_[nq_] = r;
  iov_[niov_++] = {&hdrs_[nq_++], sizeof(WireHeader)};
  for (size_t i = 0; i < n; ++i) iov_[niov_++] = {reinterpret_cast<void*>(runs[i].addr), runs[i].len};
  queued_bytes_ += sizeof(WireHeader) + r.length;
  for (auto& p : pins) pins_.push_back(std::move(p));
  pins.clear();
  if (nq_ == kMaxQueued || queued_bytes_ >= kMaxQueuedBytes) return flush();
  return Status::OK();
}

Status TargetChannel::flush() {
  if (niov_ == 0) return Status::OK();
  Status s = sendAll(iov_.data(), static_cast<int>(niov_));
  niov_ = nq_ = 0;
  queued_bytes_ = 0;
  pins_.clear();
  return s;
}

Status TargetChannel::drain(size_t len) {
  char buf[16384];
  while (len > 0) {
    size_t n = std::min(len, sizeof(buf));
    Status s = recvExact(buf, n, false);
    if (!s.ok()) return s;
    len -= n;
  }
  return Status::OK();
}

bool TargetChannel::readable() const {
  if (in_end_ > in_begin_) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status TargetChannel::sendError(WireHeader& r, const Status& why) {
  std::string reason = why.message().substr(0, kMaxReason);
  r.status = static_cast<uint8_t>(why.code());
  r.length = static_cast<uint32_t>(reason.size());
  r.size = 0;
  iovec iov[2] = {{&r, sizeof(r)}, {reason.data(), reason.size()}};
  return sendExact(iov, reason.empty() ? 1 : 2);
}

Status TargetChannel::recvAtLeast(char* p, size_t min, size_t max, bool idle_ok, size_t& got) {
  got = 0;
  auto last = Clock::now();
  while (got < min) {
    ssize_t n = ::recv(fd_, p + got, max - got, max == min ? MSG_WAITALL : 0);
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
                                            min)};
      continue;
    }
    return {Code::kUnavailable, fmt::format("recv: {}", std::strerror(e))};
  }
  return Status::OK();
}

Status TargetChannel::sendAll(iovec* iov, int cnt) {
  auto last = Clock::now();
  while (cnt > 0) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(std::min(cnt, kMaxIov));
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
    net::advanceIov(iov, cnt, static_cast<size_t>(n));
  }
  return Status::OK();
}

}  // namespace hawser::tcp
