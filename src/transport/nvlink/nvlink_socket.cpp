// nvlink's local socket (nvlink_socket.h): the owner's server and the
// peer's requests.
#include "transport/nvlink/nvlink_socket.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <utility>

#include "base/log.h"
#include "local/local_socket.h"

namespace hawser::nvlink {

namespace {
constexpr int kAnswerTimeoutMs = 5000;  // an owner's socket answers within this
}

void Msg::setWhy(const std::string& s) { local::putText(why, sizeof why, s); }

std::string Msg::whyText() const { return local::getText(why, sizeof why); }

Status sendMsg(int sock, const Msg& m, const std::vector<int>& fds) {
  return local::sendMessage(sock, &m, sizeof m, fds);
}

Status recvMsg(int sock, Msg& m, std::vector<int>& fds, int timeout_ms) {
  Status s = local::recvChecked(sock, m, fds, timeout_ms, kSockMagic, kSockVersion, "nvlink socket");
  if (s.ok() && m.count > kMaxPieces) {
    local::closeAll(fds);
    return {Code::kRemoteError, fmt::format("nvlink socket: a message of {} pieces (at most {})", m.count, kMaxPieces)};
  }
  return s;
}

// ---- owner ------------------------------------------------------------------

Server::~Server() { stop(); }

Status Server::start(const std::string& dir) {
  pidfd_ = local::selfPidfd();
  if (pidfd_ < 0) return {Code::kNotSupported, fmt::format("nvlink socket: pidfd_open: {}", std::strerror(errno))};
  return listener_.start(local::Place{dir, "hawser-nvlink", "nvlink.socket_dir"}, [this](int fd) { return handle(fd); },
                         [this](int fd) { closed(fd); });
}

void Server::stop() {
  listener_.stop();
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
}

void Server::closed(int fd) {
  auto it = tokens_.find(fd);
  if (it == tokens_.end()) return;
  if (it->second) {
    left_(it->second);  // its reader slots are free again
    peers_.fetch_sub(1, std::memory_order_relaxed);
  }
  tokens_.erase(it);
}

bool Server::handle(int fd) {
  uint64_t& token = tokens_[fd];
  Msg m;
  std::vector<int> fds;
  if (!recvMsg(fd, m, fds, 0).ok()) return false;  // closed, or not ours
  for (int f : fds) ::close(f);                    // peers send none
  fds.clear();
  Msg r;
  if (m.type == static_cast<uint32_t>(MsgType::kHello)) {
    r.type = static_cast<uint32_t>(MsgType::kWelcome);
    local::Cred cred;
    Status s = local::peerCred(fd, cred);
    if (token) r.setWhy("a second hello on one connection");
    else if (m.nonce != nonce_) r.setWhy("the nonce does not match this engine's (a stale descriptor: the owner restarted?)");
    else if (!s.ok()) r.setWhy(s.message());
    else if (!local::trusted(cred.uid))
      r.setWhy(fmt::format("uid {} may not map the GPU memory of uid {} (same user or root only)", cred.uid, ::geteuid()));
    if (r.why[0]) {
      r.status = 1;
      refused_.fetch_add(1, std::memory_order_relaxed);
      HLOG_INFO("nvlink: refused a peer: {}", r.whyText());
      (void)sendMsg(fd, r);
      return false;
    }
    token = next_token_++;
    peers_.fetch_add(1, std::memory_order_relaxed);
    r.token = token;
    r.nonce = nonce_;
    return sendMsg(fd, r, {table_fd_, pidfd_}).ok();
  }
  if (m.type == static_cast<uint32_t>(MsgType::kImport) && token) {
    r.type = static_cast<uint32_t>(MsgType::kPieces);
    r.id = m.id;
    std::vector<gpu::vmm::Piece> pieces;
    local::FdsCloser closer{fds};
    Status s = pieces_(m.id, r.size, pieces);
    for (auto& p : pieces) fds.push_back(p.fd);
    if (!s.ok()) {
      r.status = 1;
      r.setWhy(s.message());
      return sendMsg(fd, r).ok();
    }
    r.total = static_cast<uint32_t>(pieces.size());
    for (size_t first = 0; first < pieces.size(); first += kMaxPieces) {
      r.first = static_cast<uint32_t>(first);
      r.count = static_cast<uint32_t>(std::min(kMaxPieces, pieces.size() - first));
      std::vector<int> batch;
      for (uint32_t i = 0; i < r.count; ++i) {
        r.at[i] = pieces[first + i].at;
        r.len[i] = pieces[first + i].size;
        batch.push_back(pieces[first + i].fd);
      }
      if (!sendMsg(fd, r, batch).ok()) return false;
      passed_.fetch_add(r.count, std::memory_order_relaxed);
    }
    return true;
  }
  return false;  // anything else ends the connection
}

// ---- peer -------------------------------------------------------------------

Status connectOwner(const std::string& name, uint64_t nonce, const std::string& segment, Welcome& w,
                    RouteReason& reason) {
  int sock = -1;
  Status s = local::connectTo(name, "nvlink.socket_dir", sock, reason);
  if (!s.ok()) return s;
  w.sock = sock;
  local::Cred cred;
  if (!(s = local::peerCred(sock, cred)).ok()) {
    reason = RouteReason::kRefused;
    return s;
  }
  if (!local::trusted(cred.uid)) {
    reason = RouteReason::kPermissionDenied;
    return {Code::kNotSupported, fmt::format("the socket {} of segment '{}' belongs to uid {}: nvlink serves peers of "
                                             "the same user (or root) only",
                                             name, segment, cred.uid)};
  }
  w.pid = cred.pid;
  Msg hello;
  hello.type = static_cast<uint32_t>(MsgType::kHello);
  hello.nonce = nonce;
  Msg r;
  std::vector<int> fds;
  s = sendMsg(sock, hello);
  if (s.ok()) s = recvMsg(sock, r, fds, kAnswerTimeoutMs);
  local::FdsCloser closer{fds};
  if (!s.ok()) {
    reason = RouteReason::kPeerGone;
    return {Code::kNotSupported,
            fmt::format("segment '{}': the nvlink socket {} did not answer: {}", segment, name, s.message())};
  }
  if (r.type != static_cast<uint32_t>(MsgType::kWelcome) || r.status != 0) {
    reason = r.whyText().find("nonce") != std::string::npos ? RouteReason::kPeerGone : RouteReason::kPermissionDenied;
    return {Code::kNotSupported,
            fmt::format("segment '{}': its nvlink socket refused this process: {}", segment, r.whyText())};
  }
  if (r.nonce != nonce || fds.size() != 2 || r.token == 0) {
    reason = RouteReason::kPeerIncompatible;
    return {Code::kNotSupported,
            fmt::format("segment '{}': its nvlink socket answered with another engine's credentials", segment)};
  }
  w.table_fd = std::exchange(fds[0], -1);
  w.pidfd = std::exchange(fds[1], -1);
  w.token = r.token;
  return Status::OK();
}

Status importPieces(int sock, uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out) {
  out.clear();
  Msg req;
  req.type = static_cast<uint32_t>(MsgType::kImport);
  req.id = id;
  Status s = sendMsg(sock, req);
  auto fail = [&](Status st) {
    for (auto& p : out) ::close(p.fd);
    out.clear();
    return st;
  };
  for (uint32_t total = 1; s.ok() && out.size() < total;) {
    Msg r;
    std::vector<int> fds;
    if (!(s = recvMsg(sock, r, fds, kAnswerTimeoutMs)).ok()) break;
    local::FdsCloser closer{fds};
    if (r.type != static_cast<uint32_t>(MsgType::kPieces) || r.id != id)
      return fail({Code::kRemoteError, "the owner's nvlink socket answered another request"});
    if (r.status != 0) return fail({Code::kUnavailable, r.whyText()});
    if (r.first != out.size() || fds.size() != r.count || r.total == 0 || r.first + r.count > r.total)
      return fail({Code::kRemoteError, fmt::format("the owner's nvlink socket sent pieces {}+{} of {} with {} fds",
                                                   r.first, r.count, r.total, fds.size())});
    total = r.total;
    size = r.size;
    for (uint32_t i = 0; i < r.count; ++i) out.push_back({r.at[i], r.len[i], std::exchange(fds[i], -1)});
  }
  if (!s.ok()) return fail(Status(s.code() == Code::kTimeout ? Code::kTimeout : Code::kUnavailable,
                                  "the owner's nvlink socket: " + s.message()));
  return Status::OK();
}

}  // namespace hawser::nvlink
