// Notifications between engines: the receiving queue (NotifyInbox) and the
// per-peer senders (NotifyOutbox). Files: notify_inbox.cpp, notify_outbox.cpp.
//
// Delivery rides the engine's rpc listener (method "engine.notify", one
// persistent control connection per peer, calls in order). A notification
// that follows a transfer is handed to the outbox when the transfer's last
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
  void drain(std::vector<ReceivedNotification>& out);
  // Counters for stats().
  uint64_t received() const;
  uint64_t refusedFull() const;

 private:
  Status accept(const std::string& body);

  mutable std::mutex mu_;
  std::deque<ReceivedNotification> queue_;
  size_t depth_ = 0, max_bytes_ = 0;
  std::string segment_;
  uint64_t received_ = 0, refused_full_ = 0;
};

struct NotifyPeer;

// One notification on its way out. Settled exactly once.
class OutgoingNotify {
 public:
  OutgoingNotify(std::string target, Notification n) : target_(std::move(target)), n_(std::move(n)) {}
  const std::string& target() const { return target_; }
  const Notification& notification() const { return n_; }
  NotifyStatus status() const;
  // Waits until the state is final (delivered, not sent, failed); false at the deadline.
  bool waitSettled(std::chrono::steady_clock::time_point deadline) const;

 private:
  friend class NotifyOutbox;
  const std::string target_;  // the receiver's segment name, for messages
  const Notification n_;
  NotifyPeer* peer_ = nullptr;  // set by queue(); lives as long as the outbox
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  NotifyState state_ = NotifyState::kWaiting;
  Status error_;
};

// Sends notifications, per peer in the order they were queued: a peer's
// next notification waits until the one before it is settled (its transfer
// ended and, if it completed, the peer answered). One thread per peer
// notified, started on first use and stopped with the outbox.
class NotifyOutbox {
 public:
  NotifyOutbox();
  ~NotifyOutbox();
  void configure(std::string from, std::chrono::milliseconds timeout) {
    from_ = std::move(from);
    timeout_ = timeout;
    stopping_ = false;
  }
  // Queues `n` for the engine listening on host:port (segment `target`).
  // ready=false: it waits for ready() or notSent(); ready=true: it goes as
  // soon as those before it to that peer are settled.
  std::shared_ptr<OutgoingNotify> queue(const std::string& host, uint16_t port, const std::string& target,
                                        const Notification& n, bool ready);
  // Its transfer completed: send it.
  void ready(const std::shared_ptr<OutgoingNotify>& o);
  // Its transfer failed: never sent; `why` is its status.
  void notSent(const std::shared_ptr<OutgoingNotify>& o, Status why);
  // Sends what is ready, then fails what is still waiting (kUnavailable:
  // engine stopped); joins the threads.
  void stop();
  uint64_t delivered() const { return delivered_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  void run(NotifyPeer* p);
  void wake(NotifyPeer* p);
  static void settle(OutgoingNotify& o, NotifyState s, Status error);

  std::string from_;
  std::chrono::milliseconds timeout_{5000};
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<NotifyPeer>> peers_;  // by "host:port"
  bool stopping_ = false;
  std::atomic<uint64_t> delivered_{0}, failed_{0};
};

}  // namespace hawser
