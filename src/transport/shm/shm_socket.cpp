// The shm transport's messages over the local socket (shm_socket.h).
#include "transport/shm/shm_socket.h"

#include "local/local_socket.h"

namespace hawser::shm {

void Msg::setWhy(const std::string& s) { local::putText(why, sizeof why, s); }

std::string Msg::whyText() const { return local::getText(why, sizeof why); }

Status sendMsg(int sock, const Msg& m, const std::vector<int>& fds) {
  return local::sendMessage(sock, &m, sizeof m, fds);
}

Status recvMsg(int sock, Msg& m, std::vector<int>& fds, int timeout_ms) {
  return local::recvChecked(sock, m, fds, timeout_ms, kSockMagic, kSockVersion, "shm socket");
}

}  // namespace hawser::shm
