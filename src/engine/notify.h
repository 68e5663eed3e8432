// Notifications between engines: the receiving queue (NotifyInbox) and the
// per-peer senders (NotifyOutbox). Files: notify_inbox.cpp, notify_outbox.cpp.
//
// Delivery rides the engine's rpc listener (method "engine.notify" for
// sendNotify, "engine.signal" for a submit's notification or signal:
// signal_wire.h; one persistent control connection per peer, calls in
// order). A notification that follows a transfer is handed to the outbox when the transfer's last
// task ends and only if every task COMPLETED; every transport reports a write
// complete only once the bytes are in the target's memory (tcp: the target
// acked after applying them; rdma: RC completion; shm: process_vm_writev
// returned; nvlink: the copy's event completed), so the receiver sees the
// data before the notification.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hawser/types.h"
#include "engine/signal_wire.h"
#include "rpc/rpc.h"

namespace hawser {

inline const rpc::Channel kNotifyCall = rpc::channel("engine.notify");

// The wire form: three length-prefixed byte strings (sender segment, name,
// message), each a little-endian u32 length then the bytes.
std::string encodeNotification(const std::string& from, const Notification& n);
Status decodeNotification(const std::string& body, ReceivedNotification& out);

// The bounded receiving queue of one engine.
class NotifyInbox {
 public:
  // Registers the rpc method. depth: notify.queue_depth; max_bytes:
  // notify.max_message_bytes; segment: this engine's name, for messages.
  Status start(rpc::Server& rpc, size_t depth, size_t max_bytes, const std::string& segment);
  // with_failures: also the records of notifying submits that failed
  // (NotifyKind::kFailed); without, those are dropped from the queue.
  void drain(std::vector<ReceivedNotification>& out, bool with_failures = false);
  // Queues one that arrived otherwise (a tracked submit's, signal_board.cpp):
  // Ok, or why it was refused (too large, queue full).
  Status push(ReceivedNotification n);
  // Counters for stats().
  uint64_t received() const;
  uint64_t refusedFull() const;
  uint64_t failuresReceived() const;

 private:
  Status accept(const std::string& body);

  mutable std::mutex mu_;
  std::deque<ReceivedNotification> queue_;
  size_t depth_ = 0, max_bytes_ = 0;
  std::string segment_;
  uint64_t received_ = 0, refused_full_ = 0, failures_ = 0;
};

struct NotifyPeer;

// One notification (or signal outcome) on its way out. Settled exactly once.
class OutgoingNotify {
 public:
  // sendNotify's: a notification alone.
  OutgoingNotify(std::string target, Notification n) : target_(std::move(target)), n_(std::move(n)) {}
  // A submit's: the receiver tracks it (an OPEN record now, a DONE record
  // when its requests ended), so it ends there as delivered or failed.
  // notify: the notification, or null for a signal alone; signal: "" for none.
  OutgoingNotify(std::string target, const Notification* notify, std::string signal, uint32_t requests)
      : target_(std::move(target)),
        n_(notify ? *notify : Notification{}),
        tracked_(true),
        has_notify_(notify != nullptr),
        signal_(std::move(signal)),
        requests_(requests) {}
  const std::string& target() const { return target_; }
  const Notification& notification() const { return n_; }
  bool hasNotification() const { return has_notify_; }
  const std::string& signal() const { return signal_; }
  // What getNotifyStatus, waitTransfer and transferSync show (a signal alone
  // is delivered once the receiver took its outcome).
  NotifyStatus status() const;
  // Waits until the state is final (delivered, not sent, failed); false at the deadline.
  bool waitSettled(std::chrono::steady_clock::time_point deadline) const;
  // What it is called in messages: "notification 'x'" or "signal 'y'".
  std::string what() const;

 private:
  friend class NotifyOutbox;
  const std::string target_;  // the receiver's segment name, for messages
  const Notification n_;
  const bool tracked_ = false, has_notify_ = true;
  const std::string signal_;
  const uint32_t requests_ = 0;
  uint64_t id_ = 0;           // tracked: the submit's id at the receiver
  NotifyPeer* peer_ = nullptr;  // set by queue(); lives as long as the outbox
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  NotifyState state_ = NotifyState::kWaiting;
  Status error_;
  SignalReason reason_ = SignalReason::kNone;  // not sent: why, for the receiver
};

// Sends notifications, per peer in the order they were queued: a peer's
// next notification waits until the one before it is settled (its transfer
// ended and, if it completed, the peer answered). A tracked one's OPEN
// record goes at once, ahead of that order. One thread per peer notified,
// started on first use and stopped with the outbox.
class NotifyOutbox {
 public:
  struct Settings {
    std::string from;  // this engine's segment name
    std::string host;  // its rpc listener
    uint16_t port = 0;
    uint64_t incarnation = 0;
    std::chrono::milliseconds timeout{5000};       // rpc.timeout_ms: one call
    std::chrono::milliseconds peer_timeout{3000};  // signal.peer_timeout_ms: resending a signal frame
  };
  NotifyOutbox();
  ~NotifyOutbox();
  void configure(Settings s) {
    std::lock_guard lk(mu_);
    settings_ = std::move(s);
    stopping_ = false;
  }
  // Queues `n` for the engine listening on host:port (segment `target`).
  // ready=false: it waits for ready() or notSent(); ready=true: it goes as
  // soon as those before it to that peer are settled.
  std::shared_ptr<OutgoingNotify> queue(const std::string& host, uint16_t port, const std::string& target,
                                        const Notification& n, bool ready);
  // A submit's notification and/or signal (tracked at the receiver); waits
  // for ready() or notSent().
  std::shared_ptr<OutgoingNotify> track(const std::string& host, uint16_t port, const std::string& target,
                                        const Notification* n, const std::string& signal, uint32_t requests);
  // Its transfer completed: send it.
  void ready(const std::shared_ptr<OutgoingNotify>& o);
  // Its transfer failed: never sent; `why` is its status, `reason` the
  // receiver's view of it.
  void notSent(const std::shared_ptr<OutgoingNotify>& o, Status why, SignalReason reason);
  // Sends what is ready, then fails what is still waiting (kUnavailable:
  // engine stopped; a tracked one's receiver is told); joins the threads.
  void stop();
  // engine.alive's answer to the engine whose segment is `asker`.
  AliveReply aliveFor(const std::string& asker);
  uint64_t delivered() const { return delivered_.load(); }
  uint64_t failed() const { return failed_.load(); }
  uint64_t framesResent() const { return resent_.load(); }
  uint64_t framesAbandoned() const { return abandoned_.load(); }

 private:
  NotifyPeer* peerFor(const std::string& host, uint16_t port, const std::string& target);  // under mu_
  void run(NotifyPeer* p);
  void wake(NotifyPeer* p);
  // One engine.signal frame to `p` (its thread, without mu_): sent again
  // after a failed call until signal.peer_timeout_ms passed (once only while
  // the peer is down); the receiver's outcome of each DONE record in *outcomes.
  Status sendFrame(NotifyPeer* p, std::vector<SignalRecord> records, std::vector<Status>* outcomes);
  // The DONE record of tracked item `o`, whose state was `head`.
  static SignalRecord doneRecord(const OutgoingNotify& o, NotifyState head);
  void settleDone(OutgoingNotify& o, const Status& sent, const Status& outcome);
  static void settle(OutgoingNotify& o, NotifyState s, Status error);

  Settings settings_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<NotifyPeer>> peers_;  // by "host:port"
  bool stopping_ = false;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> delivered_{0}, failed_{0}, resent_{0}, abandoned_{0};
};

}  // namespace hawser
