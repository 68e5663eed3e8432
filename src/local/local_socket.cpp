// The local socket (local_socket.h).
#include "local/local_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <random>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace hawser::local {

namespace {

// sockaddr_un of `name` ("@x": abstract x; else a path); false when too long.
bool addressOf(const std::string& name, sockaddr_un& a, socklen_t& len) {
  a = {};
  a.sun_family = AF_UNIX;
  const bool abstract = !name.empty() && name[0] == '@';
  const std::string body = abstract ? name.substr(1) : name;
  if (body.empty() || body.size() + 1 > sizeof a.sun_path) return false;
  std::memcpy(a.sun_path + (abstract ? 1 : 0), body.data(), body.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + (abstract ? 1 : 0) + body.size() +
                               (abstract ? 0 : 1));
  return true;
}

}  // namespace

void putText(char* buf, size_t cap, const std::string& s) {
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(buf, s.data(), n);
  buf[n] = 0;
}

std::string getText(const char* buf, size_t cap) { return std::string(buf, strnlen(buf, cap)); }

void closeAll(std::vector<int>& fds) {
  for (int f : fds)
    if (f >= 0) ::close(f);
  fds.clear();
}

FdsCloser::~FdsCloser() { closeAll(fds); }

Status listenAt(const Place& place, std::string& name, int& fd) {
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  name = place.dir.empty() ? fmt::format("@{}-{:016x}", place.prefix, id)
                           : fmt::format("{}/{}-{:016x}.sock", place.dir, place.prefix, id);
  sockaddr_un a;
  socklen_t len = 0;
  if (!addressOf(name, a, len))
    return {Code::kInvalidArgument,
            fmt::format("{}: '{}' is too long for a Unix socket path", place.dir_key, place.dir)};
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return {Code::kNotSupported, fmt::format("{}: Unix socket: {}", place.prefix, std::strerror(errno))};
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s, 64) != 0) {
    Status st{Code::kNotSupported,
              fmt::format("{}: cannot listen at {}: {}{}", place.prefix, name, std::strerror(errno),
                          place.dir.empty() ? "" : fmt::format(" ({} must be a writable directory)", place.dir_key))};
    ::close(s);
    return st;
  }
  if (!place.dir.empty()) ::chmod(name.c_str(), 0600);  // root, or this user (trusted() checks the rest)
  fd = s;
  return Status::OK();
}

Status connectTo(const std::string& name, const std::string& dir_key, int& fd, RouteReason& reason) {
  reason = RouteReason::kPeerIncompatible;
  sockaddr_un a;
  socklen_t len = 0;
  if (!addressOf(name, a, len)) return {Code::kNotSupported, fmt::format("socket name '{}' is malformed", name)};
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return {Code::kNotSupported, fmt::format("local socket: {}", std::strerror(errno))};
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int err = errno;
    ::close(s);
    const bool abstract = name[0] == '@';
    reason = abstract && (err == ECONNREFUSED || err == ENOENT) ? RouteReason::kOtherNetNamespace
             : err == ENOENT                                    ? RouteReason::kOtherMountNamespace
             : err == EACCES || err == EPERM                    ? RouteReason::kPermissionDenied
             : err == ECONNREFUSED                              ? RouteReason::kPeerGone
                                                                : RouteReason::kRefused;
    if (abstract && (err == ECONNREFUSED || err == ENOENT))
      return {Code::kNotSupported,
              fmt::format("the peer's socket {} is not reachable from here ({}): abstract sockets belong to a network "
                          "namespace, and the peer runs in another one; set {} on both sides to a "
                          "directory both see",
                          name, std::strerror(err), dir_key)};
    if (err == ENOENT)
      return {Code::kNotSupported,
              fmt::format("the peer's socket {} does not exist here: its {} is not a directory this "
                          "process sees (mount the same directory on both sides)",
                          name, dir_key)};
    if (err == EACCES || err == EPERM)
      return {Code::kNotSupported, fmt::format("the peer's socket {}: {} (another user's socket)", name,
                                               std::strerror(err))};
    return {Code::kNotSupported, fmt::format("cannot connect to the peer's socket {}: {}", name, std::strerror(err))};
  }
  fd = s;
  return Status::OK();
}

Status peerCred(int sock, Cred& out) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0)
    return {Code::kNotSupported, fmt::format("SO_PEERCRED: {}", std::strerror(errno))};
  out.pid = c.pid;
  out.uid = c.uid;
  out.gid = c.gid;
  return Status::OK();
}

bool trusted(uid_t uid) { return uid == ::geteuid() || uid == 0; }

int selfPidfd() { return static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)); }

Status sendMessage(int sock, const void* msg, size_t len, std::span<const int> fds) {
  iovec io{const_cast<void*>(msg), len};
  msghdr h{};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    if (fds.size() > kMaxFds) return {Code::kInternal, "local socket: too many fds for one message"};
    h.msg_control = ctl;
    h.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = ::sendmsg(sock, &h, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(len)) return Status::OK();
    if (n < 0 && errno == EINTR) continue;
    return {Code::kUnavailable, fmt::format("local socket: sendmsg: {}", n < 0 ? std::strerror(errno) : "short")};
  }
}

Status recvMessage(int sock, void* msg, size_t len, std::vector<int>& fds, int timeout_ms) {
  fds.clear();
  pollfd p{sock, POLLIN, 0};
  int r;
  while ((r = ::poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  if (r == 0) return {Code::kTimeout, fmt::format("local socket: no answer within {} ms", timeout_ms)};
  iovec io{msg, len};
  msghdr h{};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  ssize_t n;
  while ((n = ::recvmsg(sock, &h, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n >= 0)
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
  if (n == 0) return {Code::kUnavailable, "local socket: the peer closed it"};
  if (n < 0) return {Code::kUnavailable, fmt::format("local socket: recvmsg: {}", std::strerror(errno))};
  if (n != static_cast<ssize_t>(len) || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    for (int fd : fds) ::close(fd);
    fds.clear();
    return {Code::kRemoteError, fmt::format("local socket: a malformed message ({} bytes)", n)};
  }
  return Status::OK();
}

}  // namespace hawser::local
