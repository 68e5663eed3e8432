#include "rpc/rpc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"
#include "rpc/frame_reader.h"

namespace hawser::rpc {

namespace {
std::mutex g_token_mu;
std::string g_token;
}  // namespace

void setAuthToken(const std::string& token) {
  std::lock_guard lk(g_token_mu);
  g_token = token;
}

std::string authToken() {
  std::lock_guard lk(g_token_mu);
  return g_token;
}

Status checkFrame(const Frame& f, uint32_t max_body) {
  if (f.magic != kMagic) return {Code::kRemoteError, fmt::format("bad frame magic {:#x}", f.magic)};
  if (f.version != kVersion) return {Code::kRemoteError, fmt::format("unsupported frame version {}", f.version)};
  if (f.length > max_body) return {Code::kRemoteError, fmt::format("frame body {} bytes exceeds limit {}", f.length, max_body)};
  return Status::OK();
}

Status checkHello(const Frame& hello, std::string_view token, std::string_view want) {
  if (token.size() != hello.length)
    return {Code::kRemoteError, fmt::format("hello carries {} token bytes, its header says {}", token.size(), hello.length)};
  if (hello.type & kReplyBit) return {Code::kRemoteError, fmt::format("hello names connection kind {:#x}", hello.type)};
  if (!want.empty() && token != want) return {Code::kPermissionDenied, "bad auth token"};
  return Status::OK();
}

Status checkReply(const Frame& r, uint16_t method, uint64_t id, std::string_view body) {
  if (body.size() != r.length)
    return {Code::kRemoteError, fmt::format("reply carries {} bytes, its header says {}", body.size(), r.length)};
  if (r.type != (method | kReplyBit) || r.id != id) return {Code::kRemoteError, "reply does not match request"};
  if (r.status == 0) return Status::OK();
  Code c = static_cast<Code>(r.status);
  if (r.status < 0 || r.status > static_cast<int32_t>(Code::kInternal)) c = Code::kRemoteError;
  return {c, std::string(body)};
}

Status recvFrame(int fd, FrameReader& r, std::chrono::milliseconds limit, bool idle_ok) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + limit;
  bool counting = !idle_ok;  // the deadline runs
  while (!r.ready()) {
    std::span<char> into = r.want();
    int wait_ms = -1;
    if (counting) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
    }
    size_t got = 0;
    Status s = net::recvSome(fd, into.data(), into.size(), wait_ms, got);
    if (s.code() == Code::kTimeout || (s.ok() && counting && got == 0 && Clock::now() >= deadline)) {
      const std::string what = r.received() < sizeof(Frame)
                                   ? fmt::format("{} of its {} header bytes", r.received(), sizeof(Frame))
                                   : fmt::format("{} of its {} bytes", r.received(),
                                                 sizeof(Frame) + r.frame().length);
      return {Code::kTimeout, fmt::format("frame not whole within {} ms: {} came", limit.count(), what)};
    }
    if (!s.ok()) return s;
    if (got > 0 && !counting) {
      counting = true;
      deadline = Clock::now() + limit;
    }
    s = r.got(got);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

namespace {
// The peer's address without its port ("10.0.0.5", "::1"); IPv4-mapped IPv6
// as IPv4.
std::string peerAddress(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) ::inet_ntop(AF_INET, &a.s6_addr[12], host, sizeof(host));
    else ::inet_ntop(AF_INET6, &a, host, sizeof(host));
  } else {
    return "?";
  }
  return host;
}
}  // namespace

Status ServerLimits::fromConfig(const Config& config, ServerLimits& out) {
  ServerLimits l;
  Status s;
  if (!(s = config.getInt("rpc.max_connections", l.max_connections)).ok() ||
      !(s = config.getInt("rpc.max_control_connections", l.max_control)).ok() ||
      !(s = config.getInt("rpc.max_control_per_peer", l.max_control_per_peer)).ok() ||
      !(s = config.getDuration("rpc.frame_timeout_ms", l.frame_timeout)).ok() ||
      !(s = config.getDuration("rpc.timeout_ms", l.keepalive)).ok())
    return s;
  out = l;
  return Status::OK();
}

Server::~Server() { stop(); }

Status Server::start(const std::string& host, uint16_t port) {
  host_ = host;
  Status s = net::listenOn(host, port, 512, listen_fd_, port_);
  if (!s.ok()) return s;
  stopping_ = false;
  accept_thread_ = std::thread([this] { acceptLoop(); });
  return Status::OK();
}

void Server::stop() {
  if (!listen_fd_ && !accept_thread_.joinable()) return;
  stopping_ = true;
  if (listen_fd_) ::shutdown(listen_fd_.get(), SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  listen_fd_.reset();
  std::unique_lock lk(mu_);
  for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
  conn_cv_.wait(lk, [&] { return conn_threads_ == 0; });
}

Channel channel(std::string_view name) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  const uint16_t id = static_cast<uint16_t>(16 + (h ^ (h >> 15)) % (0x8000 - 16));
  return Channel{std::string(name), id};
}

namespace {
Status claim(std::map<uint16_t, std::string>& names, const Channel& c, const char* what) {
  if (c.id < 16 || (c.id & kReplyBit))
    return {Code::kInvalidArgument, fmt::format("{} '{}': id {} is reserved", what, c.name, c.id)};
  auto [it, fresh] = names.emplace(c.id, c.name);
  if (!fresh && it->second != c.name)
    return {Code::kInvalidArgument,
            fmt::format("{} '{}' has the id {} of '{}': rename one of them", what, c.name, c.id, it->second)};
  return Status::OK();
}
}  // namespace

Status Server::onCall(const Channel& method, CallHandler h) {
  std::lock_guard lk(mu_);
  Status s = claim(call_names_, method, "rpc method");
  if (s.ok()) calls_[method.id] = std::move(h);
  return s;
}

Status Server::onStream(const Channel& kind, StreamHandler h) {
  std::lock_guard lk(mu_);
  Status s = claim(stream_names_, kind, "connection kind");
  if (s.ok()) streams_[kind.id] = std::move(h);
  return s;
}

size_t Server::openConnections() const {
  std::lock_guard lk(mu_);
  return conn_threads_;
}

size_t Server::openControlConnections() const {
  std::lock_guard lk(mu_);
  return control_open_;
}

bool Server::admitLocked(const std::string& peer, std::string& why) {
  if (conn_threads_ >= limits_.max_connections) {
    why = fmt::format("{} connections are open (rpc.max_connections)", conn_threads_);
    return false;
  }
  if (control_open_ >= limits_.max_control) {
    why = fmt::format("{} control connections are open (rpc.max_control_connections)", control_open_);
    return false;
  }
  auto it = control_by_peer_.find(peer);
  if (it != control_by_peer_.end() && it->second >= limits_.max_control_per_peer) {
    why = fmt::format("{} control connections from that address are open (rpc.max_control_per_peer)", it->second);
    return false;
  }
  return true;
}

void Server::uncountControl(const std::string& peer) {
  --control_open_;
  auto it = control_by_peer_.find(peer);
  if (it != control_by_peer_.end() && --it->second == 0) control_by_peer_.erase(it);
}

void Server::LimitedLog::warn(const std::string& line) {
  std::lock_guard lk(mu);
  const auto now = std::chrono::steady_clock::now();
  if (now - last < std::chrono::seconds(1)) {
    ++skipped;
    return;
  }
  if (skipped > 0) HLOG_WARN("{} ({} more like it not logged)", line, skipped);
  else HLOG_WARN("{}", line);
  last = now;
  skipped = 0;
}

void Server::acceptLoop() {
  while (!stopping_) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (stopping_) break;
      if (errno == EMFILE || errno == ENFILE) {
        HLOG_WARN("rpc listener: accept: {} (too many open files); retrying", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      break;
    }
    std::string peer = peerAddress(ss);
    std::string why;
    std::unique_lock lk(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    if (!admitLocked(peer, why)) {
      lk.unlock();
      net::setResetOnClose(fd);  // no FIN handshake to wait for: the peer learns at once
      ::close(fd);
      refusal_log_.warn(fmt::format("rpc listener: refusing a connection from {}: {}", peer, why));
      refused_conns_.fetch_add(1);  // after the log line: a reader of the count finds it logged
      continue;
    }
    // Counted as control until its Hello names another kind.
    ++control_open_;
    ++control_by_peer_[peer];
    conn_fds_.push_back(fd);
    ++conn_threads_;
    lk.unlock();
    net::setNoDelay(fd);
    net::setKeepAlive(fd, limits_.keepalive);
    std::thread([this, fd, peer = std::move(peer)]() mutable { serve(net::Fd(fd), std::move(peer)); }).detach();
  }
}

void Server::serve(net::Fd fd, std::string peer) {
  const int raw = fd.get();
  bool control = true;  // counted as control
  auto forget = [&] {
    std::lock_guard lk(mu_);
    conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), raw), conn_fds_.end());
    if (control) uncountControl(peer);
  };
  // Hello: a frame whose type is the connection kind; body = auth token. It
  // must come whole within the frame timeout.
  FrameReader hello(kMaxHelloBody);
  Status s = recvFrame(raw, hello, limits_.frame_timeout, false);
  if (s.ok()) s = checkHello(hello.frame(), hello.body(), authToken());
  const uint16_t kind = hello.frame().type;
  StreamHandler stream;
  if (s.ok() && kind != kConnControl) {
    std::lock_guard lk(mu_);
    auto it = streams_.find(kind);
    if (it == streams_.end()) {
      s = Status(Code::kRemoteError, fmt::format("unknown connection kind {}", kind));
    } else {
      stream = it->second;
      uncountControl(peer);  // a data connection from here on
      control = false;
    }
  }
  if (!s.ok()) {
    if (s.code() != Code::kUnavailable) {
      refused_.fetch_add(1);
      if (s.code() == Code::kTimeout) late_.fetch_add(1);
      close_log_.warn(fmt::format("rpc listener: closing connection from {}: {}", peer, s.toString()));
    }
  } else if (stream) {
    net::setTimeouts(raw, std::chrono::milliseconds(0));
    // The handler owns the socket; stop() may still shut it down.
    stream(std::move(fd));
  } else {
    // A reply the peer does not read must not hold this thread (and the
    // reply's memory) forever either.
    net::setTimeouts(raw, limits_.frame_timeout);
    serveControl(raw, peer);
  }
  forget();
  fd.reset();
  std::lock_guard lk(mu_);
  if (--conn_threads_ == 0) conn_cv_.notify_all();
}

void Server::serveControl(int fd, const std::string& peer) {
  FrameReader in(kMaxControlBody);
  std::string reply;
  while (!stopping_) {
    in.next();
    Status s = recvFrame(fd, in, limits_.frame_timeout, /*idle_ok=*/true);
    if (!s.ok()) {
      if (s.code() != Code::kUnavailable) {
        refused_.fetch_add(1);
        if (s.code() == Code::kTimeout) late_.fetch_add(1);
        close_log_.warn(fmt::format("rpc listener: closing control connection from {}: {}", peer, s.toString()));
      }
      return;
    }
    const Frame& f = in.frame();
    const std::string& body = in.body();
    CallHandler h;
    {
      std::lock_guard lk(mu_);
      auto it = calls_.find(f.type);
      if (it != calls_.end()) h = it->second;
    }
    reply.clear();
    Status rs;
    if (f.type == kPing)
      reply = body;  // the listener answers its own ping: the body, echoed
    else
      rs = h ? h(body, reply) : Status(Code::kNotSupported, fmt::format("unknown method {}", f.type));
    if (!rs.ok()) reply = rs.message();
    if (reply.size() > kMaxControlBody) {
      rs = Status(Code::kInternal, "reply too large");
      reply = rs.message();
    }
    Frame r;
    r.type = static_cast<uint16_t>(f.type | kReplyBit);
    r.id = f.id;
    r.status = static_cast<int32_t>(rs.code());
    r.length = static_cast<uint32_t>(reply.size());
    iovec iov[2] = {{&r, sizeof(r)}, {reply.data(), reply.size()}};
    if (!net::sendAllv(fd, iov, reply.empty() ? 1 : 2).ok()) return;
    if (reply.capacity() > FrameReader::kChunk) std::string().swap(reply);
  }
}

static Status sendHello(int fd, uint16_t kind) {
  std::string token = authToken();
  Frame h;
  h.type = kind;
  h.length = static_cast<uint32_t>(token.size());
  iovec iov[2] = {{&h, sizeof(h)}, {token.data(), token.size()}};
  return net::sendAllv(fd, iov, token.empty() ? 1 : 2);
}

Status openStream(const std::string& host, uint16_t port, uint16_t kind, std::chrono::milliseconds timeout,
                  net::Fd& out, bool* nobody_listens) {
  net::Fd fd;
  Status s = net::connectTo(host, port, timeout, fd, nobody_listens);
  if (!s.ok()) return s;
  s = sendHello(fd.get(), kind);
  if (!s.ok()) return s;
  out = std::move(fd);
  return Status::OK();
}

Status call(const std::string& host, uint16_t port, uint16_t method, const std::string& request,
            std::string& reply, std::chrono::milliseconds timeout, bool* nobody_listens) {
  net::Fd fd;
  Status s = openStream(host, port, kConnControl, timeout, fd, nobody_listens);
  if (!s.ok()) return s;
  net::setTimeouts(fd.get(), timeout);
  Frame f;
  f.type = method;
  f.id = 1;
  f.length = static_cast<uint32_t>(request.size());
  iovec iov[2] = {{&f, sizeof(f)}, {const_cast<char*>(request.data()), request.size()}};
  s = net::sendAllv(fd.get(), iov, request.empty() ? 1 : 2);
  if (!s.ok()) return s;
  FrameReader in(kMaxControlBody);
  s = recvFrame(fd.get(), in, timeout, false);
  if (!s.ok()) {
    if (s.code() == Code::kUnavailable)
      return {Code::kUnavailable,
              fmt::format("{}:{} closed the connection (auth token mismatch, shutting down, or over its connection "
                          "caps rpc.max_*: its log says which)",
                          host, port)};
    return {s.code(), fmt::format("{}:{}: {}", host, port, s.message())};
  }
  std::string& body = in.body();
  s = checkReply(in.frame(), method, f.id, body);
  if (!s.ok()) return {s.code(), fmt::format("{}:{}: {}", host, port, s.message())};
  reply = std::move(body);
  return Status::OK();
}

}  // namespace hawser::rpc
