#include "rpc/rpc.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <unistd.h>
#include <fmt/format.h>

#include "base/log.h"

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

Status readFrame(int fd, Frame& f, uint32_t max_body) {
  Status s = net::recvAll(fd, &f, sizeof(f));
  if (!s.ok()) return s;
  return checkFrame(f, max_body);
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

void Server::acceptLoop() {
  while (!stopping_) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
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
    net::setNoDelay(fd);
    net::setKeepAlive(fd, keepalive_);
    std::lock_guard lk(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    conn_fds_.push_back(fd);
    ++conn_threads_;
    std::thread([this, fd] { serve(net::Fd(fd)); }).detach();
  }
}

void Server::serve(net::Fd fd) {
  const int raw = fd.get();
  auto forget = [&] {
    std::lock_guard lk(mu_);
    conn_fds_.erase(std::remove(conn_fds_.begin(), conn_fds_.end(), raw), conn_fds_.end());
  };
  // Hello: a frame whose type is the connection kind; body = auth token.
  net::setTimeouts(raw, std::chrono::seconds(10));
  Frame hello;
  Status s = readFrame(raw, hello, kMaxHelloBody);
  std::string token;  // sized only once the frame (and its bound) checked out
  if (s.ok() && hello.length) {
    token.resize(hello.length);
    s = net::recvAll(raw, token.data(), token.size());
  }
  if (s.ok()) s = checkHello(hello, token, authToken());
  StreamHandler stream;
  if (s.ok() && hello.type != kConnControl) {
    std::lock_guard lk(mu_);
    auto it = streams_.find(hello.type);
    if (it == streams_.end()) s = Status(Code::kRemoteError, fmt::format("unknown connection kind {}", hello.type));
    else stream = it->second;
  }
  if (!s.ok()) {
    if (s.code() != Code::kUnavailable) {
      refused_.fetch_add(1);
      HLOG_WARN("rpc listener: closing connection: {}", s.toString());
    }
  } else if (stream) {
    net::setTimeouts(raw, std::chrono::milliseconds(0));
    // The handler owns the socket; stop() may still shut it down.
    stream(std::move(fd));
  } else {
    net::setTimeouts(raw, std::chrono::milliseconds(0));
    serveControl(raw);
  }
  forget();
  fd.reset();
  std::lock_guard lk(mu_);
  if (--conn_threads_ == 0) conn_cv_.notify_all();
}

void Server::serveControl(int fd) {
  std::string body, reply;
  while (!stopping_) {
    Frame f;
    Status s = readFrame(fd, f, kMaxControlBody);
    if (!s.ok()) {
      if (s.code() != Code::kUnavailable) {
        refused_.fetch_add(1);
        HLOG_WARN("rpc listener: closing control connection: {}", s.toString());
      }
      return;
    }
    body.resize(f.length);
    if (f.length && !net::recvAll(fd, body.data(), body.size()).ok()) return;
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
                  net::Fd& out) {
  net::Fd fd;
  Status s = net::connectTo(host, port, timeout, fd);
  if (!s.ok()) return s;
  s = sendHello(fd.get(), kind);
  if (!s.ok()) return s;
  out = std::move(fd);
  return Status::OK();
}

Status call(const std::string& host, uint16_t port, uint16_t method, const std::string& request,
            std::string& reply, std::chrono::milliseconds timeout) {
  net::Fd fd;
  Status s = openStream(host, port, kConnControl, timeout, fd);
  if (!s.ok()) return s;
  net::setTimeouts(fd.get(), timeout);
  Frame f;
  f.type = method;
  f.id = 1;
  f.length = static_cast<uint32_t>(request.size());
  iovec iov[2] = {{&f, sizeof(f)}, {const_cast<char*>(request.data()), request.size()}};
  s = net::sendAllv(fd.get(), iov, request.empty() ? 1 : 2);
  if (!s.ok()) return s;
  Frame r;
  s = readFrame(fd.get(), r, kMaxControlBody);
  if (!s.ok()) {
    if (s.code() == Code::kUnavailable)
      return {Code::kUnavailable, fmt::format("{}:{} closed the connection (auth token mismatch or shutting down)", host, port)};
    return {s.code(), fmt::format("{}:{}: {}", host, port, s.message())};
  }
  std::string body(r.length, '\0');
  if (r.length) {
    s = net::recvAll(fd.get(), body.data(), body.size());
    if (!s.ok()) return s;
  }
  s = checkReply(r, method, f.id, body);
  if (!s.ok()) return {s.code(), fmt::format("{}:{}: {}", host, port, s.message())};
  reply = std::move(body);
  return Status::OK();
}

}  // namespace hawser::rpc
