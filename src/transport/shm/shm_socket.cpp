// The shm transport's messages over the local socket (shm_socket.h).
#include "transport/shm/shm_socket.h"

#include <unistd.h>

#include <fmt/format.h>

#include "local/local_socket.h"

namespace hawser::shm {

void Msg::setWhy(const std::string& s) { local::putText(why, sizeof why, s); }

std::string Msg::whyText() const { return local::getText(why, sizeof why); }

Status sendMsg(int sock, const Msg& m, const std::vector<int>& fds) {
  return local::sendMessage(sock, &m, sizeof m, fds);
}

Status recvMsg(int sock, Msg& m, std::vector<int>& fds, int timeout_ms) {
  Status s = local::recvMessage(sock, &m, sizeof m, fds, timeout_ms);
  if (!s.ok()) return s;
  if (m.magic != kSockMagic || m.version != kSockVersion) {
    for (int fd : fds) ::close(fd);
    fds.clear();
    return {Code::kRemoteError, fmt::format("shm socket: a malformed message (version {})", m.version)};
  }
  return Status::OK();
}

}  // namespace hawser::shm
