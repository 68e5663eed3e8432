// PeerDeathWatcher (peer_death_watcher.h): one epoll thread over peers' pidfds.
#include "local/peer_death_watcher.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace hawser::local {

Status PeerDeathWatcher::start() {
  std::lock_guard lk(mu_);
  if (running_) return Status::OK();
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  evfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // the wake-up eventfd; peers' ids are never 0
  if (epfd_ < 0 || evfd_ < 0 || ::epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev) != 0) {
    const int err = errno;
    if (epfd_ >= 0) ::close(epfd_);
    if (evfd_ >= 0) ::close(evfd_);
    epfd_ = evfd_ = -1;
    return {Code::kInternal, fmt::format("peer death watcher: epoll/eventfd: {}", std::strerror(err))};
  }
  running_ = true;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
  thread_id_ = thread_.get_id();
  return Status::OK();
}

void PeerDeathWatcher::wake() {
  uint64_t one = 1;
  (void)!::write(evfd_, &one, sizeof one);
}

void PeerDeathWatcher::stop() {
  {
    std::lock_guard lk(mu_);
    if (!running_) return;
    stop_ = true;
    wake();
  }
  if (thread_.joinable()) thread_.join();
  std::vector<std::function<void()>> left;
  std::map<Id, Entry> dropped;  // destroyed outside the lock
  {
    std::lock_guard lk(mu_);
    running_ = false;
    left.swap(tasks_);
    dropped.swap(entries_);
    ::close(epfd_);
    ::close(evfd_);
    epfd_ = evfd_ = -1;
  }
  for (auto& t : left) t();
}

Status PeerDeathWatcher::add(int pidfd, std::function<void()> on_exit, Id& id, std::function<bool()> exited) {
  std::lock_guard lk(mu_);
  if (!running_ || stop_) return {Code::kInternal, "peer death watcher: not running"};
  const Id mine = next_id_++;
  if (pidfd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = mine;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, pidfd, &ev) != 0)
      return {Code::kInternal, fmt::format("peer death watcher: epoll_ctl on a pidfd: {}", std::strerror(errno))};
  } else if (!exited) {
    return {Code::kInvalidArgument, "peer death watcher: a peer without a pidfd needs a check to poll"};
  }
  entries_[mine] = Entry{pidfd, std::move(on_exit), pidfd < 0 ? std::move(exited) : std::function<bool()>()};
  if (pidfd < 0) wake();  // the loop's timeout changes
  id = mine;
  return Status::OK();
}

PeerDeathWatcher::Entry PeerDeathWatcher::takeLocked(Id id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return {};
  Entry e = std::move(it->second);
  entries_.erase(it);
  if (e.pidfd >= 0 && epfd_ >= 0) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, e.pidfd, nullptr);
  return e;
}

void PeerDeathWatcher::remove(Id id) {
  Entry dropped;  // its callbacks are destroyed outside the lock
  std::unique_lock lk(mu_);
  dropped = takeLocked(id);
  if (std::this_thread::get_id() != thread_id_) idle_cv_.wait(lk, [&] { return busy_ != id; });
}

void PeerDeathWatcher::post(std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    if (running_ && !stop_) {
      tasks_.push_back(std::move(task));
      wake();
      return;
    }
  }
  task();
}

size_t PeerDeathWatcher::watched() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

void PeerDeathWatcher::run() {
  epoll_event evs[16];
  for (;;) {
    bool polled = false;
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      for (auto& [id, e] : entries_) polled |= e.pidfd < 0;
    }
    const int n = ::epoll_wait(epfd_, evs, 16, polled ? kPollMs : -1);
    // Ids to look at: those whose pidfd is readable, and every polled one.
    std::vector<Id> candidates;
    {
      std::lock_guard lk(mu_);
      if (stop_) return;
      for (int i = 0; i < n; ++i) {
        // By value: epoll_event is packed, its u64 is not 8-byte aligned
        // (a reference to it, as push_back takes, is undefined behaviour).
        const Id ev_id = evs[i].data.u64;
        if (ev_id == 0) {
          uint64_t v;
          while (::read(evfd_, &v, sizeof v) > 0) {
          }
          continue;
        }
        candidates.push_back(ev_id);
      }
      if (polled)
        for (auto& [id, e] : entries_)
          if (e.pidfd < 0) candidates.push_back(id);
    }
    for (Id id : candidates) {
      std::function<bool()> exited;
      int pidfd = -1;
      {
        std::lock_guard lk(mu_);
        auto it = entries_.find(id);
        if (it == entries_.end()) continue;  // removed since (or an event of one already handled)
        pidfd = it->second.pidfd;
        exited = it->second.exited;
        busy_ = id;
      }
      // A pidfd is readable once its process exited; a polled peer's check says.
      bool gone = false;
      if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        gone = ::poll(&p, 1, 0) > 0;
      } else {
        gone = exited();
      }
      Entry fired;
      {
        std::lock_guard lk(mu_);
        if (gone) fired = takeLocked(id);  // empty when remove()d meanwhile (from the check)
      }
      if (fired.on_exit) fired.on_exit();
      {
        std::lock_guard lk(mu_);
        busy_ = 0;
      }
      idle_cv_.notify_all();
    }
    // Tasks, and those the callbacks queued, right away.
    for (;;) {
      std::vector<std::function<void()>> tasks;
      {
        std::lock_guard lk(mu_);
        tasks.swap(tasks_);
      }
      if (tasks.empty()) break;
      for (auto& t : tasks) t();
    }
  }
}

}  // namespace hawser::local
