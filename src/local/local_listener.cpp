// A transport's end of the local socket (local_listener.h).
#include "local/local_listener.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

namespace hawser::local {

Listener::~Listener() { stop(); }

Status Listener::start(const Place& place, OnMessage on_message, OnClose on_close) {
  on_message_ = std::move(on_message);
  on_close_ = std::move(on_close);
  Status s = listenAt(place, name_, listen_);
  if (!s.ok()) return s;
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  evfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd_ < 0 || evfd_ < 0)
    return {Code::kNotSupported, fmt::format("{}: epoll/eventfd: {}", place.prefix, std::strerror(errno))};
  for (int fd : {listen_, evfd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  thread_ = std::thread([this] { run(); });
  return Status::OK();
}

void Listener::stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(evfd_, &one, sizeof one);
    thread_.join();
  }
  while (!conns_.empty()) drop(*conns_.begin());
  if (listen_ >= 0 && !name_.empty() && name_[0] != '@') ::unlink(name_.c_str());
  for (int* fd : {&listen_, &epfd_, &evfd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void Listener::run() {
  epoll_event evs[16];
  for (;;) {
    const int n = ::epoll_wait(epfd_, evs, 16, -1);
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == evfd_) return;
      if (fd == listen_) {
        const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = c;
        ::epoll_ctl(epfd_, EPOLL_CTL_ADD, c, &ev);
        conns_.insert(c);
        continue;
      }
      if (!conns_.count(fd)) continue;
      if (!on_message_(fd)) drop(fd);
    }
  }
}

void Listener::drop(int fd) {
  if (!conns_.erase(fd)) return;
  if (on_close_) on_close_(fd);
  if (epfd_ >= 0) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
}

}  // namespace hawser::local
