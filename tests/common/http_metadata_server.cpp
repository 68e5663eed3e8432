#include "common/http_metadata_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace hawser::test {

namespace {

bool sendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string urlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexValue(s[i + 1]) >= 0 && hexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexValue(s[i + 1]) * 16 + hexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

std::string reply(int status, const std::string& body) {
  const char* reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed"
                                                                                          : "Bad Request";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

}  // namespace

HttpMetadataServer::~HttpMetadataServer() { stop(); }

bool HttpMetadataServer::start(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 64) != 0) {
    error_ = std::string("listen on 127.0.0.1:") + std::to_string(port) + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  listen_fd_ = fd;
  stopping_ = false;
  accept_thread_ = std::thread([this] { acceptLoop(); });
  return true;
}

void HttpMetadataServer::stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  ::close(listen_fd_);
  listen_fd_ = -1;
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void HttpMetadataServer::acceptLoop() {
  while (!stopping_) {
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      break;
    }
    std::lock_guard lk(mu_);
    conns_.push_back(c);
    threads_.emplace_back([this, c] { serve(c); });
  }
}

void HttpMetadataServer::serve(int fd) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    // Headers.
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) goto done;
      buf.append(chunk, static_cast<size_t>(n));
    }
    {
      const std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
      const std::string method = head.substr(0, sp1), target = head.substr(sp1 + 1, sp2 - sp1 - 1);
      size_t length = 0;
      for (size_t p = head.find("\r\n"); p != std::string::npos; p = head.find("\r\n", p + 2)) {
        std::string line = head.substr(p + 2, head.find("\r\n", p + 2) - p - 2);
        for (size_t i = 0; i < line.size() && line[i] != ':'; ++i) line[i] = static_cast<char>(std::tolower(line[i]));
        if (line.rfind("content-length:", 0) == 0) length = std::stoul(line.substr(15));
      }
      while (buf.size() < length) {
        ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) goto done;
        buf.append(chunk, static_cast<size_t>(n));
      }
      const std::string body = buf.substr(0, length);
      buf.erase(0, length);
      const size_t q = target.find('?');
      const std::string path = target.substr(0, q);
      std::string key;
      if (q != std::string::npos) {
        const std::string query = target.substr(q + 1);
        for (size_t p = 0; p <= query.size();) {
          size_t amp = query.find('&', p);
          if (amp == std::string::npos) amp = query.size();
          const std::string kv = query.substr(p, amp - p);
          if (kv.rfind("key=", 0) == 0) key = urlDecode(kv.substr(4));
          p = amp + 1;
        }
      }
      std::string out;
      {
        std::lock_guard lk(mu_);
        ++counts_[method];
        if (path != "/metadata") {
          out = reply(404, "404 page not found");
        } else if (method == "GET") {
          auto it = store_.find(key);
          out = it == store_.end() ? reply(404, "metadata not found") : reply(200, it->second);
        } else if (method == "PUT") {
          store_[key] = body;
          out = reply(200, "metadata updated");
        } else if (method == "DELETE") {
          bool had = store_.erase(key) > 0;
          out = had || !delete_absent_404_ ? reply(200, "metadata deleted") : reply(404, "metadata not found");
        } else {
          out = reply(405, "Method not allowed");
        }
      }
      if (!sendAll(fd, out)) goto done;
    }
  }
done:
  {
    std::lock_guard lk(mu_);
    for (auto it = conns_.begin(); it != conns_.end(); ++it)
      if (*it == fd) {
        conns_.erase(it);
        break;
      }
  }
  ::close(fd);
}

std::map<std::string, std::string> HttpMetadataServer::values() {
  std::lock_guard lk(mu_);
  return store_;
}

void HttpMetadataServer::set(const std::string& key, const std::string& value) {
  std::lock_guard lk(mu_);
  store_[key] = value;
}

bool HttpMetadataServer::has(const std::string& key) {
  std::lock_guard lk(mu_);
  return store_.count(key) > 0;
}

uint64_t HttpMetadataServer::count(const std::string& method) {
  std::lock_guard lk(mu_);
  return counts_[method];
}

}  // namespace hawser::test
