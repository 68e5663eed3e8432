#include "common/tls_reset_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hawser::test {

namespace {

using Clock = std::chrono::steady_clock;

bool sendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Follows the TLS records of one direction by their 5-byte headers.
struct RecordScanner {
  unsigned char header[5] = {};
  size_t have = 0;       // header bytes read so far
  size_t body_left = 0;  // bytes of the current record's body still to come
  bool application_data = false;

  void feed(const char* p, size_t n) {
    while (n > 0) {
      if (body_left > 0) {
        const size_t skip = std::min(body_left, n);
        body_left -= skip;
        p += skip;
        n -= skip;
        continue;
      }
      header[have++] = static_cast<unsigned char>(*p++);
      --n;
      if (have == 5) {
        if (header[0] == 23) application_data = true;
        body_left = (static_cast<size_t>(header[3]) << 8) | header[4];
        have = 0;
      }
    }
  }
};

}  // namespace

TlsResetRelay::TlsResetRelay(std::chrono::milliseconds hold) : hold_(hold) {}

TlsResetRelay::~TlsResetRelay() { stop(); }

bool TlsResetRelay::start(uint16_t upstream_port) {
  upstream_port_ = upstream_port;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof(a);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(listen_fd_, 16) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    error_ = std::string("relay listen: ") + std::strerror(errno);
    return false;
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
  return true;
}

void TlsResetRelay::stop() {
  stopping_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> links;
  {
    std::lock_guard lk(mu_);
    links.swap(links_);
  }
  for (auto& t : links) t.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void TlsResetRelay::acceptLoop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::lock_guard lk(mu_);
    links_.emplace_back([this, c] { relay(c); });
  }
}

void TlsResetRelay::relay(int client) {
  int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(upstream_port_);
  if (up < 0 || ::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (up >= 0) ::close(up);
    ::close(client);
    return;
  }
  RecordScanner from_client;
  std::string held;  // the server's bytes not yet passed on
  Clock::time_point held_since;
  bool client_open = true;
  bool reset = false;
  while (!stopping_.load()) {
    int wait_ms = 100;
    if (!held.empty()) {
      const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - held_since);
      wait_ms = static_cast<int>(std::clamp<int64_t>((hold_ - age).count(), 0, 100));
    }
    pollfd p[2] = {{client_open ? client : -1, POLLIN, 0}, {up, POLLIN, 0}};
    if (::poll(p, 2, wait_ms) < 0 && errno != EINTR) break;
    if (!held.empty() && Clock::now() - held_since >= hold_) {
      if (!sendAll(client, held.data(), held.size())) break;
      held.clear();
    }
    char buf[65536];
    if (client_open && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (n == 0) {
        client_open = false;
        ::shutdown(up, SHUT_WR);
      } else {
        from_client.feed(buf, static_cast<size_t>(n));
        if (!sendAll(up, buf, static_cast<size_t>(n))) {
          // The server is gone (it reset the connection) before its last
          // bytes reached us: after application data, the client gets a reset.
          reset = from_client.application_data;
          break;
        }
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(up, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // The server closed (or reset). After application data, with its
        // last bytes still held: they are lost, and the client gets a reset.
        reset = from_client.application_data && (!held.empty() || n < 0);
        if (!reset) {
          if (!held.empty()) sendAll(client, held.data(), held.size());
          ::shutdown(client, SHUT_WR);
        }
        break;
      }
      if (!from_client.application_data) {
        if (!sendAll(client, buf, static_cast<size_t>(n))) break;
      } else {
        if (held.empty()) held_since = Clock::now();
        held.append(buf, static_cast<size_t>(n));
      }
    }
  }
  if (reset) {
    linger l{1, 0};
    ::setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    resets_.fetch_add(1);
  }
  ::close(up);
  ::close(client);
}

}  // namespace hawser::test
