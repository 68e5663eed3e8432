#include "rpc/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace hawser::net {

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void setTimeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void setSendBuffer(int fd, int bytes) {
  if (bytes > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

void setBufferSizes(int fd, int bytes) {
  if (bytes <= 0) return;
  setSendBuffer(fd, bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

namespace {

// The address of a socket's end (peer or own), IPv4-mapped IPv6 as IPv4;
// false for a socket that is neither.
bool endAddress(int fd, bool peer, sockaddr_storage& ss) {
  socklen_t len = sizeof(ss);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return false;
  if (ss.ss_family == AF_INET6) {
    const auto a6 = *reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a6.sin6_addr)) {
      sockaddr_in a4{};
      a4.sin_family = AF_INET;
      std::memcpy(&a4.sin_addr, &a6.sin6_addr.s6_addr[12], 4);
      ss = {};
      std::memcpy(&ss, &a4, sizeof(a4));
    }
    return true;
  }
  return ss.ss_family == AF_INET;
}

}  // namespace

bool isLoopback(int fd) {
  sockaddr_storage peer{}, self{};
  if (!endAddress(fd, true, peer) || !endAddress(fd, false, self) || peer.ss_family != self.ss_family) return false;
  if (peer.ss_family == AF_INET) {
    const in_addr p = reinterpret_cast<sockaddr_in*>(&peer)->sin_addr;
    const in_addr s = reinterpret_cast<sockaddr_in*>(&self)->sin_addr;
    return (ntohl(p.s_addr) >> 24) == 127 || p.s_addr == s.s_addr;
  }
  const in6_addr& p = reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr;
  const in6_addr& s = reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&p) || IN6_ARE_ADDR_EQUAL(&p, &s);
}

void setKeepAlive(int fd, std::chrono::milliseconds interval) {
  if (interval.count() <= 0) return;
  int on = 1;
  int secs = static_cast<int>(std::max<int64_t>(1, (interval.count() + 999) / 1000));
  int probes = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof(secs));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof(secs));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

void setResetOnClose(int fd) {
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

Status splitHostPort(const std::string& text, std::string& host, uint16_t& port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return {Code::kInvalidArgument, fmt::format("'{}' is not HOST:PORT", text)};
  std::string h = text.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  unsigned long p = 0;
  for (char c : text.substr(colon + 1)) {
    if (c < '0' || c > '9') return {Code::kInvalidArgument, fmt::format("'{}': port is not a number", text)};
    p = p * 10 + static_cast<unsigned long>(c - '0');
    if (p > 65535) return {Code::kInvalidArgument, fmt::format("'{}': port is over 65535", text)};
  }
  host = h;
  port = static_cast<uint16_t>(p);
  return Status::OK();
}

static Status resolve(const std::string& host, uint16_t port, bool passive, addrinfo** out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  std::string svc = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), svc.c_str(), &hints, out);
  if (rc != 0) return {Code::kUnavailable, fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc))};
  return Status::OK();
}

Status connectTo(const std::string& host, uint16_t port, std::chrono::milliseconds timeout, Fd& out,
                 bool* refused) {
  if (refused) *refused = false;
  addrinfo* ai = nullptr;
  Status s = resolve(host, port, false, &ai);
  if (!s.ok()) return s;
  bool all_refused = ai != nullptr;
  Status last{Code::kUnavailable, fmt::format("cannot connect to {}:{}", host, port)};
  for (addrinfo* p = ai; p; p = p->ai_next) {
    Fd fd(::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol));
    if (!fd) {
      last = {Code::kUnavailable, fmt::format("socket(): {}", std::strerror(errno))};
      all_refused = false;
      continue;
    }
    int rc = ::connect(fd.get(), p->ai_addr, p->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last = {Code::kUnavailable, fmt::format("connect to {}:{}: {}", host, port, std::strerror(errno))};
      all_refused = all_refused && errno == ECONNREFUSED;
      continue;
    }
    if (rc != 0) {
      pollfd pfd{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        last = {Code::kTimeout, fmt::format("connect to {}:{} timed out after {} ms", host, port, timeout.count())};
        all_refused = false;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = {Code::kUnavailable, fmt::format("connect to {}:{}: {}", host, port, std::strerror(err))};
        all_refused = all_refused && err == ECONNREFUSED;
        continue;
      }
    }
    int fl = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
    setNoDelay(fd.get());
    ::freeaddrinfo(ai);
    out = std::move(fd);
    return Status::OK();
  }
  ::freeaddrinfo(ai);
  if (refused) *refused = all_refused;
  return last;
}

Status listenOn(const std::string& host, uint16_t port, int backlog, Fd& out, uint16_t& bound) {
  addrinfo* ai = nullptr;
  Status s = resolve(host, port, true, &ai);
  if (!s.ok()) return s;
  Status last{Code::kUnavailable, fmt::format("cannot listen on {}:{}", host, port)};
  for (addrinfo* p = ai; p; p = p->ai_next) {
    Fd fd(::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol));
    if (!fd) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), p->ai_addr, p->ai_addrlen) != 0) {
      last = {Code::kUnavailable, fmt::format("bind {}:{}: {}", host, port, std::strerror(errno))};
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last = {Code::kUnavailable, fmt::format("listen {}:{}: {}", host, port, std::strerror(errno))};
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    ::freeaddrinfo(ai);
    out = std::move(fd);
    return Status::OK();
  }
  ::freeaddrinfo(ai);
  return last;
}

static Status ioError(const char* what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) return {Code::kTimeout, fmt::format("{} timed out", what)};
  return {Code::kUnavailable, fmt::format("{}: {}", what, std::strerror(err))};
}

Status sendAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ioError("send", errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status sendAllv(int fd, struct iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ioError("send", errno);
    }
    advanceIov(iov, iovcnt, static_cast<size_t>(n));
  }
  return Status::OK();
}

void advanceIov(struct iovec*& iov, int& cnt, size_t n) {
  while (cnt > 0 && n >= iov->iov_len) {
    n -= iov->iov_len;
    ++iov;
    --cnt;
  }
  if (cnt > 0) {
    iov->iov_base = static_cast<char*>(iov->iov_base) + n;
    iov->iov_len -= n;
  }
}

Status recvAll(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_WAITALL);
    if (n == 0) return {Code::kUnavailable, "connection closed by peer"};
    if (n < 0) {
      if (errno == EINTR) continue;
      return ioError("recv", errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status discard(int fd, size_t len) {
  char buf[65536];
  while (len > 0) {
    size_t n = len < sizeof(buf) ? len : sizeof(buf);
    Status s = recvAll(fd, buf, n);
    if (!s.ok()) return s;
    len -= n;
  }
  return Status::OK();
}

Status recvSome(int fd, void* data, size_t len, int wait_ms, size_t& got) {
  got = 0;
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, wait_ms);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return {Code::kUnavailable, fmt::format("poll: {}", std::strerror(errno))};
  if (r == 0) return {Code::kTimeout, "recv timed out"};
  ssize_t n;
  do {
    n = ::recv(fd, data, len, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return {Code::kUnavailable, "connection closed by peer"};
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();  // woken without data: got 0
    return ioError("recv", errno);
  }
  got = static_cast<size_t>(n);
  return Status::OK();
}

}  // namespace hawser::net
