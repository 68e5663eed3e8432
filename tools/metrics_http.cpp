#include "tools/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <vector>

#include "hawser/stats.h"

namespace hawser::tools {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxRequest = 8192;       // request line and headers
constexpr size_t kMaxClients = 64;         // connections served at once; more are closed at accept
constexpr auto kClientDeadline = std::chrono::seconds(5);  // to send a request and read the answer

struct Client {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool answered = false;
  Clock::time_point deadline;
  ~Client() {
    if (fd < 0) return;
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
};

std::string response(int code, const char* reason, const std::string& type, const std::string& body,
                     bool head) {
  std::string r = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", code, reason, type,
      body.size());
  if (!head) r += body;
  return r;
}

// The answer to one request (its request line and headers in `req`).
std::string answer(const std::string& req, const MetricsServer::Render& render) {
  const size_t eol = req.find("\r\n");
  const std::string line = req.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0)
    return response(400, "Bad Request", "text/plain; charset=utf-8", "malformed request line\n", false);
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (size_t q = target.find('?'); q != std::string::npos) target.resize(q);
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    std::string r = response(405, "Method Not Allowed", "text/plain; charset=utf-8", "only GET and HEAD\n", false);
    r.insert(r.find("\r\n") + 2, "Allow: GET, HEAD\r\n");
    return r;
  }
  if (target != "/metrics")
    return response(404, "Not Found", "text/plain; charset=utf-8", "not found: the metrics are at /metrics\n", head);
  return response(200, "OK", kPrometheusContentType, render(), head);
}

}  // namespace

bool splitHostPort(const std::string& text, std::string& host, uint16_t& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return false;
  host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return false;
    host = host.substr(1, host.size() - 2);
  }
  const std::string p = text.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  const int v = std::stoi(p);
  if (v > 65535) return false;
  port = static_cast<uint16_t>(v);
  return true;
}

MetricsServer::~MetricsServer() { stop(); }

Status MetricsServer::start(const std::string& host, uint16_t port, Render render) {
  if (listen_fd_ >= 0) return {Code::kInvalidArgument, "metrics server already started"};
  render_ = std::move(render);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || !res)
    return {Code::kInvalidArgument,
            fmt::format("metrics address '{}:{}': '{}' is not an IP address ({})", host, port, host, gai_strerror(rc))};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return {Code::kUnavailable, fmt::format("metrics: socket: {}", std::strerror(errno))};
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return {Code::kUnavailable, fmt::format("metrics: cannot listen on {}:{}: {}", host, port, std::strerror(e))};
  }
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    ::close(fd);
    return {Code::kUnavailable, fmt::format("metrics: eventfd: {}", std::strerror(errno))};
  }
  listen_fd_ = fd;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
  return Status::OK();
}

void MetricsServer::stop() {
  if (listen_fd_ < 0) return;
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void MetricsServer::run() {
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<pollfd> pfds;
  while (!stop_.load()) {
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : clients) pfds.push_back({c->fd, static_cast<short>(c->answered ? POLLOUT : POLLIN), 0});
    if (::poll(pfds.data(), pfds.size(), 200) < 0 && errno != EINTR) break;
    if (stop_.load()) break;
    const auto now = Clock::now();
    // Serve what is ready (the clients of this poll round are pfds[2..]).
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = *clients[i];
      const short ev = pfds[i + 2].revents;
      if (!c.answered && (ev & (POLLIN | POLLHUP | POLLERR))) {
        char buf[2048];
        ssize_t n;
        while ((n = ::recv(c.fd, buf, sizeof(buf), 0)) > 0) c.in.append(buf, static_cast<size_t>(n));
        const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        if (c.in.find("\r\n\r\n") != std::string::npos) {
          c.out = answer(c.in, render_);
          c.answered = true;
        } else if (c.in.size() > kMaxRequest) {
          c.out = response(431, "Request Header Fields Too Large", "text/plain; charset=utf-8",
                           "request headers too large\n", false);
          c.answered = true;
        } else if (closed) {
          c.deadline = now;  // gone before asking
        }
      }
      if (c.answered) {
        while (c.sent < c.out.size()) {
          ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          c.sent += static_cast<size_t>(n);
        }
      }
    }
    // Drop the finished, and those past their deadline.
    std::erase_if(clients, [&](const std::unique_ptr<Client>& c) {
      return (c->answered && c->sent == c->out.size()) || now >= c->deadline;
    });
    if (pfds[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (clients.size() >= kMaxClients) {
          ::close(fd);
          continue;
        }
        auto c = std::make_unique<Client>();
        c->fd = fd;
        c->deadline = now + kClientDeadline;
        clients.push_back(std::move(c));
      }
    }
  }
}

}  // namespace hawser::tools
