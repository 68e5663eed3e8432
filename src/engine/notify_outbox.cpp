// NotifyOutbox (notify.h): per-peer ordered senders of notifications and of
// the OPEN/DONE records of tracked submits (signal_wire.h).
#include <algorithm>

#include <fmt/format.h>

#include "base/log.h"
#include "engine/notify.h"
#include "engine/notify_testing.h"
#include "rpc/connection.h"

namespace hawser {

namespace notify_testing {
std::atomic<FrameHook> on_signal_frame{nullptr};
}

// One receiving engine: its queue of notifications in issue order, the
// OPEN records not yet sent, the thread that sends them and the connection
// it sends them on. Guarded by the outbox's mutex, except the connection
// and the frame counters (the sender thread's own).
struct NotifyPeer {
  NotifyPeer(std::string host, uint16_t port, std::string target)
      : conn(std::move(host), port), target(std::move(target)) {}
  rpc::Connection conn;
  const std::string target;  // the receiver's segment name
  std::deque<std::shared_ptr<OutgoingNotify>> queue;
  std::vector<std::shared_ptr<OutgoingNotify>> opens;  // tracked, OPEN record not sent yet
  std::condition_variable cv;
  std::thread thread;
  uint64_t seq = 0;                    // last frame sequence number used
  bool down = false;                   // the last frame was given up on: try each next one once
  std::atomic<uint64_t> abandoned{0};  // last frame given up on
};

NotifyOutbox::NotifyOutbox() = default;
NotifyOutbox::~NotifyOutbox() { stop(); }

NotifyStatus OutgoingNotify::status() const {
  std::lock_guard lk(mu_);
  return NotifyStatus{state_, error_};
}

std::string OutgoingNotify::what() const {
  if (has_notify_) return fmt::format("notification '{}'", n_.name);
  return fmt::format("signal '{}'", signal_);
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

NotifyPeer* NotifyOutbox::peerFor(const std::string& host, uint16_t port, const std::string& target) {
  const std::string key = fmt::format("{}:{}", host, port);
  auto& p = peers_[key];
  if (!p) {
    p = std::make_unique<NotifyPeer>(host, port, target);
    NotifyPeer* raw = p.get();
    p->thread = std::thread([this, raw] { run(raw); });
  }
  return p.get();
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
  NotifyPeer* p = peerFor(host, port, target);
  o->peer_ = p;
  p->queue.push_back(o);
  p->cv.notify_one();
  return o;
}

std::shared_ptr<OutgoingNotify> NotifyOutbox::track(const std::string& host, uint16_t port, const std::string& target,
                                                    const Notification* n, const std::string& signal,
                                                    uint32_t requests) {
  auto o = std::make_shared<OutgoingNotify>(target, n, signal, requests);
  o->id_ = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  if (stopping_) {
    settle(*o, NotifyState::kFailed,
           Status(Code::kUnavailable, fmt::format("{} to '{}' not sent: the engine is shutting down", o->what(),
                                                  target)));
    failed_.fetch_add(1, std::memory_order_relaxed);
    return o;
  }
  NotifyPeer* p = peerFor(host, port, target);
  o->peer_ = p;
  p->queue.push_back(o);
  p->opens.push_back(o);
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

void NotifyOutbox::notSent(const std::shared_ptr<OutgoingNotify>& o, Status why, SignalReason reason) {
  {
    std::lock_guard lk(o->mu_);
    if (o->state_ != NotifyState::kWaiting) return;
    o->reason_ = reason;
  }
  settle(*o, NotifyState::kNotSent, std::move(why));
  wake(o->peer_);
}

AliveReply NotifyOutbox::aliveFor(const std::string& asker) {
  AliveReply r;
  r.incarnation = settings_.incarnation;
  std::lock_guard lk(mu_);
  for (auto& [key, p] : peers_)
    if (p->target == asker) r.abandoned = std::max(r.abandoned, p->abandoned.load());
  return r;
}

Status NotifyOutbox::sendFrame(NotifyPeer* p, std::vector<SignalRecord> records, std::vector<Status>* outcomes) {
  SignalFrame f;
  f.from = settings_.from;
  f.host = settings_.host;
  f.port = settings_.port;
  f.incarnation = settings_.incarnation;
  f.seq = ++p->seq;
  f.records = std::move(records);
  const std::string body = encodeSignalFrame(f);
  const auto start = std::chrono::steady_clock::now();
  // A receiver that is down (the frame before was given up on) gets one try.
  const auto give_up = p->down ? start : start + settings_.peer_timeout;
  auto pause = std::chrono::milliseconds(20);
  for (int attempt = 0;; ++attempt) {
    const auto fate = notify_testing::fate(p->target, f.seq, attempt);
    const auto now = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - now);
    std::string reply;
    Status s;
    if (fate == notify_testing::FrameFate::kDrop) {
      s = {Code::kUnavailable, "frame dropped (test seam)"};
    } else {
      s = p->conn.call(kSignalCall.id, body, reply,
                       std::clamp(left, std::chrono::milliseconds(100), settings_.timeout));
      if (s.ok() && fate == notify_testing::FrameFate::kLoseReply) {
        s = {Code::kUnavailable, "reply dropped (test seam)"};
        p->conn.close();
      }
    }
    if (s.ok()) {
      p->down = false;
      std::vector<Status> got;
      s = decodeOutcomes(reply, got);
      if (s.ok() && outcomes) *outcomes = std::move(got);
      return s;  // applied there; a reply we cannot read fails the frame's items here
    }
    if (std::chrono::steady_clock::now() + pause >= give_up) {
      p->down = true;
      p->abandoned.store(f.seq);
      abandoned_.fetch_add(1, std::memory_order_relaxed);
      HLOG_DEBUG("signal frame {} to '{}' given up after {} attempt(s): {}", f.seq, p->target, attempt + 1,
                 s.toString());
      return s;
    }
    resent_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

namespace {
SignalRecord recordOf(const OutgoingNotify& o, uint8_t kind, uint64_t id, uint32_t requests) {
  SignalRecord r;
  r.kind = kind;
  r.id = id;
  r.signal = o.signal();
  r.requests = requests;
  r.has_notify = o.hasNotification();
  r.notify_name = o.notification().name;
  return r;
}
}  // namespace

SignalRecord NotifyOutbox::doneRecord(const OutgoingNotify& o, NotifyState head) {
  SignalRecord r = recordOf(o, SignalRecord::kDone, o.id_, o.requests_);
  if (head == NotifyState::kSending) {
    r.notify_message = o.notification().message;
    return r;
  }
  NotifyStatus st = o.status();
  r.code = static_cast<int32_t>(st.error.ok() ? Code::kInternal : st.error.code());
  {
    std::lock_guard lk(o.mu_);
    r.reason = o.reason_;
  }
  r.error = st.error.message();
  return r;
}

// A tracked item whose DONE record went (or did not: `sent` is the frame's
// fate) settles by the receiver's `outcome`, when its transfer completed.
void NotifyOutbox::settleDone(OutgoingNotify& o, const Status& sent, const Status& outcome) {
  if (sent.ok() && outcome.ok()) {
    if (o.hasNotification()) delivered_.fetch_add(1, std::memory_order_relaxed);
    settle(o, NotifyState::kDelivered, Status::OK());
    return;
  }
  const Status& why = sent.ok() ? outcome : sent;
  if (o.hasNotification()) failed_.fetch_add(1, std::memory_order_relaxed);
  HLOG_DEBUG("{} to '{}' failed: {}", o.what(), o.target(), why.toString());
  settle(o, NotifyState::kFailed,
         Status(why.code(), fmt::format("{} to segment '{}': {}", o.what(), o.target(), why.message())));
}

void NotifyOutbox::run(NotifyPeer* p) {
  constexpr size_t kMaxDone = 256;  // DONE records per frame
  std::unique_lock lk(mu_);
  for (;;) {
    // Pending OPEN records, and the DONE records of the settled items at
    // the head of the queue (in issue order), go in one frame.
    p->cv.wait(lk, [&] {
      if (!p->opens.empty() || stopping_) return true;
      return !p->queue.empty() && p->queue.front()->status().s != NotifyState::kWaiting;
    });
    if (stopping_) {
      // Transfers still unfinished at shutdown fail; a tracked one's
      // receiver is told (its DONE record says failed).
      for (auto& o : p->queue) {
        if (o->status().s != NotifyState::kWaiting) continue;
        {
          std::lock_guard ol(o->mu_);
          o->reason_ = SignalReason::kTransferFailed;
        }
        settle(*o, NotifyState::kFailed,
               Status(Code::kUnavailable,
                      fmt::format("{} to '{}' not sent: the engine stopped while its transfer was unfinished",
                                  o->what(), o->target())));
        if (o->hasNotification()) failed_.fetch_add(1, std::memory_order_relaxed);
      }
      if (p->queue.empty() && p->opens.empty()) return;
    }
    std::vector<SignalRecord> recs;
    for (auto& o : p->opens) recs.push_back(recordOf(*o, SignalRecord::kOpen, o->id_, o->requests_));
    p->opens.clear();
    std::vector<std::pair<std::shared_ptr<OutgoingNotify>, NotifyState>> done;
    while (!p->queue.empty() && done.size() < kMaxDone) {
      const std::shared_ptr<OutgoingNotify>& o = p->queue.front();
      const NotifyState st = o->status().s;
      if (st == NotifyState::kWaiting || !o->tracked_) break;
      done.emplace_back(o, st);
      p->queue.pop_front();
    }
    if (!recs.empty() || !done.empty()) {
      lk.unlock();
      for (auto& [o, st] : done) recs.push_back(doneRecord(*o, st));
      std::vector<Status> outcomes;
      const Status sent = sendFrame(p, std::move(recs), &outcomes);  // lost: the receiver sees the gap
      for (size_t i = 0; i < done.size(); ++i)
        if (done[i].second == NotifyState::kSending)
          settleDone(*done[i].first, sent, i < outcomes.size() ? outcomes[i] : Status::OK());
      lk.lock();
      continue;
    }
    // The head is sendNotify's (untracked, ready): an engine.notify call.
    if (p->queue.empty()) continue;
    std::shared_ptr<OutgoingNotify> o = p->queue.front();
    const NotifyState head = o->status().s;
    p->queue.pop_front();
    if (head != NotifyState::kSending) continue;
    lk.unlock();
    std::string reply;
    Status s = p->conn.call(kNotifyCall.id, encodeNotification(settings_.from, o->notification()), reply,
                            settings_.timeout);
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
