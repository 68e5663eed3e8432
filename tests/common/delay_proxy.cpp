#include "common/delay_proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>

namespace hawser::test {

using Clock = std::chrono::steady_clock;

// One direction of one connection: `from` -> `to`, each chunk held `delay`.
struct DelayProxy::Pipe {
  struct Chunk {
    Clock::time_point due;
    std::string bytes;
  };
  int from = -1, to = -1;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Chunk> q;
  size_t held = 0;
  bool eof = false;     // `from` ended (or failed): send what is held, then pass it on
  bool broken = false;  // `to` failed, or the proxy stops: drop everything
};

// Both directions of one relayed connection, and their four threads.
struct DelayProxy::Link {
  int client = -1, upstream = -1;
  Pipe up, down;  // client -> upstream, upstream -> client
  std::vector<std::thread> threads;
  std::atomic<int> done{0};

  void breakAll() {
    for (Pipe* p : {&up, &down}) {
      std::lock_guard lk(p->mu);
      p->broken = true;
      p->cv.notify_all();
    }
    ::shutdown(client, SHUT_RDWR);
    ::shutdown(upstream, SHUT_RDWR);
  }
};

namespace {

void reader(DelayProxy::Link* link, auto* pipe, std::chrono::milliseconds delay, std::atomic<uint64_t>* bytes) {
  char buf[65536];
  while (true) {
    {
      std::unique_lock lk(pipe->mu);
      pipe->cv.wait(lk, [&] { return pipe->broken || pipe->held < DelayProxy::kWindow; });
      if (pipe->broken) return;
    }
    ssize_t n = ::recv(pipe->from, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // a reset: both directions end now
      link->breakAll();
      return;
    }
    std::lock_guard lk(pipe->mu);
    if (n == 0) {  // end of stream: passed on after the bytes already held
      pipe->eof = true;
      pipe->cv.notify_all();
      return;
    }
    pipe->q.push_back({Clock::now() + delay, std::string(buf, static_cast<size_t>(n))});
    pipe->held += static_cast<size_t>(n);
    bytes->fetch_add(static_cast<uint64_t>(n));
    pipe->cv.notify_all();
  }
}

void writer(DelayProxy::Link* link, auto* pipe) {
  while (true) {
    std::string chunk;
    {
      std::unique_lock lk(pipe->mu);
      pipe->cv.wait(lk, [&] { return pipe->broken || !pipe->q.empty() || pipe->eof; });
      if (pipe->broken) return;
      if (pipe->q.empty()) {  // eof, all sent
        ::shutdown(pipe->to, SHUT_WR);
        return;
      }
      auto due = pipe->q.front().due;
      if (Clock::now() < due) {
        pipe->cv.wait_until(lk, due, [&] { return pipe->broken; });
        continue;
      }
      chunk = std::move(pipe->q.front().bytes);
      pipe->q.pop_front();
      pipe->held -= chunk.size();
      pipe->cv.notify_all();
    }
    size_t off = 0;
    while (off < chunk.size()) {
      ssize_t n = ::send(pipe->to, chunk.data() + off, chunk.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        link->breakAll();
        return;
      }
      off += static_cast<size_t>(n);
    }
  }
}

}  // namespace

DelayProxy::DelayProxy(std::chrono::milliseconds delay, uint32_t mark) : delay_(delay), mark_(mark) {}

DelayProxy::~DelayProxy() { stop(); }

bool DelayProxy::start(const std::string& listen_host, const std::string& upstream_host, uint16_t upstream_port) {
  upstream_host_ = upstream_host;
  upstream_port_ = upstream_port;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, listen_host.c_str(), &a.sin_addr) != 1) {
    error_ = "not an IPv4 address: " + listen_host;
    return false;
  }
  socklen_t len = sizeof(a);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    error_ = std::string("listen: ") + std::strerror(errno);
    return false;
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { acceptLoop(); });
  return true;
}

void DelayProxy::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard lk(mu_);
    links.swap(links_);
  }
  for (auto& l : links) {
    l->breakAll();
    for (auto& t : l->threads) t.join();
    ::close(l->client);
    ::close(l->upstream);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void DelayProxy::acceptLoop() {
  while (!stopping_.load()) {
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    relay(c);
  }
}

void DelayProxy::relay(int client) {
  int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::setsockopt(up, SOL_SOCKET, SO_MARK, &mark_, sizeof(mark_));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(upstream_port_);
  ::inet_pton(AF_INET, upstream_host_.c_str(), &a.sin_addr);
  if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    // The target cannot be reached: the client sees its connection reset.
    linger lg{1, 0};
    ::setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(client);
    ::close(up);
    return;
  }
  int one = 1;
  ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  connections_.fetch_add(1);
  auto link = std::make_shared<Link>();
  link->client = client;
  link->upstream = up;
  link->up.from = client;
  link->up.to = up;
  link->down.from = up;
  link->down.to = client;
  Link* l = link.get();
  l->threads.emplace_back([this, l] { reader(l, &l->up, delay_, &bytes_); });
  l->threads.emplace_back([l] { writer(l, &l->up); });
  l->threads.emplace_back([this, l] { reader(l, &l->down, delay_, &bytes_); });
  l->threads.emplace_back([l] { writer(l, &l->down); });
  std::lock_guard lk(mu_);
  links_.push_back(std::move(link));
}

}  // namespace hawser::test
