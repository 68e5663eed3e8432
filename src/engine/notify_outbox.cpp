// NotifyOutbox (notify.h): per-peer ordered senders of notifications.
#include <fmt/format.h>

#include "base/log.h"
#include "engine/notify.h"
#include "rpc/connection.h"

namespace hawser {

// One receiving engine: its queue of notifications in issue order, the
// thread that sends them and the connection it sends them on. Guarded by
// the outbox's mutex, except the connection (the sender thread's own).
struct NotifyPeer {
  NotifyPeer(std::string host, uint16_t port) : conn(std::move(host), port) {}
  rpc::Connection conn;
  std::deque<std::shared_ptr<OutgoingNotify>> queue;
  std::condition_variable cv;
  std::thread thread;
};

NotifyOutbox::NotifyOutbox() = default;
NotifyOutbox::~NotifyOutbox() { stop(); }

NotifyStatus OutgoingNotify::status() const {
  std::lock_guard lk(mu_);
  return NotifyStatus{state_, error_};
}

bool OutgoingNotify::waitSettled(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  auto settled = [&] {
    return state_ == NotifyState::kDelivered || state_ == NotifyState::kNotSent || state_ == NotifyState::kFailed;
  };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    cv_.wait(lk, settled);
    return true;
  }
  return cv_.wait_until(lk, deadline, settled);
}

void NotifyOutbox::settle(OutgoingNotify& o, NotifyState s, Status error) {
  std::lock_guard lk(o.mu_);
  o.state_ = s;
  o.error_ = std::move(error);
  o.cv_.notify_all();
}

std::shared_ptr<OutgoingNotify> NotifyOutbox::queue(const std::string& host, uint16_t port, const std::string& target,
                                                    const Notification& n, bool ready) {
  auto o = std::make_shared<OutgoingNotify>(target, n);
  if (ready) o->state_ = NotifyState::kSending;
  std::lock_guard lk(mu_);
  if (stopping_) {
    settle(*o, NotifyState::kFailed,
           Status(Code::kUnavailable, fmt::format("notification '{}' to '{}' not sent: the engine is shutting down",
                                                  n.name, target)));
    failed_.fetch_add(1, std::memory_order_relaxed);
    return o;
  }
  const std::string key = fmt::format("{}:{}", host, port);
  auto& p = peers_[key];
  if (!p) {
    p = std::make_unique<NotifyPeer>(host, port);
    NotifyPeer* raw = p.get();
    p->thread = std::thread([this, raw] { run(raw); });
  }
  o->peer_ = p.get();
  p->queue.push_back(o);
  p->cv.notify_one();
  return o;
}

void NotifyOutbox::wake(NotifyPeer* p) {
  std::lock_guard lk(mu_);
  // After stop() the peers are gone; what they held was settled then.
  if (p && !stopping_) p->cv.notify_one();
}

void NotifyOutbox::ready(const std::shared_ptr<OutgoingNotify>& o) {
  {
    std::lock_guard lk(o->mu_);
    if (o->state_ != NotifyState::kWaiting) return;
    o->state_ = NotifyState::kSending;
  }
  wake(o->peer_);
}

void NotifyOutbox::notSent(const std::shared_ptr<OutgoingNotify>& o, Status why) {
  {
    std::lock_guard lk(o->mu_);
    if (o->state_ != NotifyState::kWaiting) return;
  }
  settle(*o, NotifyState::kNotSent, std::move(why));
  wake(o->peer_);
}

void NotifyOutbox::run(NotifyPeer* p) {
  std::unique_lock lk(mu_);
  for (;;) {
    // The head of the queue goes first: wait until it is ready or settled.
    NotifyState head = NotifyState::kWaiting;
    p->cv.wait(lk, [&] {
      if (p->queue.empty()) return stopping_;
      head = p->queue.front()->status().s;
      return head != NotifyState::kWaiting || stopping_;
    });
    if (p->queue.empty()) return;  // stopping, nothing left
    std::shared_ptr<OutgoingNotify> o = p->queue.front();
    if (head == NotifyState::kWaiting) {
      // Stopping with a transfer still unfinished: it and everything after it fail.
      for (auto& q : p->queue)
        if (q->status().s != NotifyState::kNotSent) {
          settle(*q, NotifyState::kFailed,
                 Status(Code::kUnavailable,
                        fmt::format("notification '{}' to '{}' not sent: the engine stopped while a transfer "
                                    "before it (or its own) was unfinished",
                                    q->notification().name, q->target())));
          failed_.fetch_add(1, std::memory_order_relaxed);
        }
      p->queue.clear();
      return;
    }
    p->queue.pop_front();
    if (head != NotifyState::kSending) continue;  // not sent: its transfer failed
    lk.unlock();
    std::string reply;
    Status s = p->conn.call(kNotifyCall.id, encodeNotification(from_, o->notification()), reply, timeout_);
    if (s.ok()) {
      delivered_.fetch_add(1, std::memory_order_relaxed);
      settle(*o, NotifyState::kDelivered, Status::OK());
    } else {
      failed_.fetch_add(1, std::memory_order_relaxed);
      HLOG_DEBUG("notification '{}' to '{}' failed: {}", o->notification().name, o->target(), s.toString());
      settle(*o, NotifyState::kFailed,
             Status(s.code(), fmt::format("notification '{}' to segment '{}': {}", o->notification().name,
                                          o->target(), s.message())));
    }
    lk.lock();
  }
}

void NotifyOutbox::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    if (stopping_ && peers_.empty()) return;
    stopping_ = true;
    for (auto& [k, p] : peers_) p->cv.notify_all();
  }
  // The threads send what is ready, then leave; peers stay until they did.
  for (auto& [k, p] : peers_)
    if (p->thread.joinable()) p->thread.join();
  std::lock_guard lk(mu_);
  peers_.clear();
}

}  // namespace hawser
