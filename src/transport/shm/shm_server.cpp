// The target's side of the shm transport's local socket (shm_server.h).
#include "transport/shm/shm_server.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "base/log.h"
#include "local/local_socket.h"
#include "transport/shm/shm_socket.h"

namespace hawser::shm {

Server::~Server() {
  stop();
  std::lock_guard lk(mu_);
  for (auto& [gen, s] : shared_) ::close(s.b.fd);
  shared_.clear();
}

Status Server::start(const std::string& dir) {
  pidfd_ = local::selfPidfd();
  if (pidfd_ < 0) return {Code::kNotSupported, fmt::format("shm socket: pidfd_open: {}", std::strerror(errno))};
  return listener_.start(local::Place{dir, "hawser-shm", "shm.socket_dir"},
                         [this](int fd) { return handle(fd, conns_[fd]); }, [this](int fd) { closed(fd); });
}

void Server::stop() {
  listener_.stop();  // every connection's slots freed (closed())
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
}

void Server::share(uint64_t gen, uint64_t addr, uint64_t length, const Backing& b) {
  std::lock_guard lk(mu_);
  shared_[gen] = Shared{addr, length, b};
}

void Server::unshare(uint64_t gen) {
  std::lock_guard lk(mu_);
  auto it = shared_.find(gen);
  if (it == shared_.end()) return;
  ::close(it->second.b.fd);
  shared_.erase(it);
}

void Server::closed(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second.token) {
    table_.readerLeft(it->second.token);  // its slots are free again
    connected_.fetch_sub(1, std::memory_order_relaxed);
  }
  conns_.erase(it);
}

bool Server::handle(int fd, Conn& c) {
  Msg m;
  std::vector<int> fds;
  if (!recvMsg(fd, m, fds, 0).ok()) return false;  // closed, or not ours
  for (int f : fds) ::close(f);                    // initiators send none
  Msg r;
  if (m.type == static_cast<uint32_t>(MsgType::kHello)) {
    r.type = static_cast<uint32_t>(MsgType::kWelcome);
    local::Cred cred;
    Status s = local::peerCred(fd, cred);
    if (c.token) {
      r.status = 1;
      r.setWhy("a second hello on one connection");
    } else if (m.nonce != nonce_) {
      r.status = 1;
      r.setWhy("the nonce does not match this process's (a stale descriptor: the owner restarted?)");
    } else if (!s.ok() || !local::trusted(cred.uid)) {
      r.status = 1;
      r.setWhy(s.ok() ? fmt::format("uid {} may not map the memory of uid {} (same user or root only)", cred.uid,
                                    ::geteuid())
                      : s.message());
    }
    if (r.status != 0) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      HLOG_INFO("shm: refused an initiator: {}", r.whyText());
      (void)sendMsg(fd, r);
      return false;
    }
    c.token = next_token_++;
    table_.readerJoined(c.token);
    connected_.fetch_add(1, std::memory_order_relaxed);
    r.token = c.token;
    r.nonce = nonce_;
    return sendMsg(fd, r, {table_.fd(), pidfd_}).ok();
  }
  if (m.type == static_cast<uint32_t>(MsgType::kMap) && c.token) {
    r.type = static_cast<uint32_t>(MsgType::kMapped);
    r.gen = m.gen;
    std::lock_guard lk(mu_);
    auto it = shared_.find(m.gen);
    if (it == shared_.end()) {
      r.status = 1;
      r.setWhy(fmt::format("registration {} is not shareable (private memory, or withdrawn)", m.gen));
      return sendMsg(fd, r).ok();
    }
    r.addr = it->second.addr;
    r.length = it->second.length;
    r.offset = it->second.b.offset;
    passed_.fetch_add(1, std::memory_order_relaxed);
    return sendMsg(fd, r, {it->second.b.fd}).ok();
  }
  return false;  // anything else ends the connection
}

}  // namespace hawser::shm
