// The receiver's side of signals and tracked notifications (docs/signals.md):
// what each sending engine's submits told this one (signal_wire.h), the
// waiters (TransferEngine::waitSignal), and the watch on senders that keeps
// every wait definite: a sender that died, restarted, cannot be reached or
// whose frames were lost fails what it had in flight here.
//
// One lock (mu_) guards every sender's state; a prober thread per sender
// that has a waiter or a submit in flight here calls its engine.alive, and
// one sweeper thread ends what outlived its bounds (signal.expire_ms,
// signal.submit_deadline_ms).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>

#include "engine/notify.h"
#include "engine/signal_wire.h"
#include "hawser/types.h"
#include "rpc/rpc.h"

namespace hawser {

class Config;

class SignalBoard {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    std::chrono::milliseconds probe_interval{200};    // signal.probe_interval_ms
    std::chrono::milliseconds peer_timeout{3000};     // signal.peer_timeout_ms
    std::chrono::milliseconds expire{120000};         // signal.expire_ms
    std::chrono::milliseconds submit_deadline{300000};  // signal.submit_deadline_ms
    size_t max_signals = 65536;                       // signal.max_signals
    static Status fromConfig(const Config& config, Settings& out);
  };
  // Where the engine named `name` listens (its descriptor).
  using Resolver = std::function<Status(const std::string& name, std::string& host, uint16_t& port)>;
  // This engine's answer to engine.alive from `asker`.
  using AliveFn = std::function<AliveReply(const std::string& asker)>;

  SignalBoard() = default;
  ~SignalBoard();
  // Registers engine.signal and engine.alive on `rpc`; `self` names this
  // engine in messages; tracked notifications go to `inbox`.
  Status start(rpc::Server& rpc, const Settings& settings, std::string self, NotifyInbox* inbox, Resolver resolve,
               AliveFn alive);
  // Ends every wait (FAILED, kUnavailable) and joins the threads.
  void stop();

  SignalResult wait(const std::string& peer, const std::string& name, uint64_t expected, Clock::time_point deadline);

  struct Counters {
    uint64_t completed = 0, failed = 0, timeouts = 0;  // waits, by outcome
    uint64_t expired = 0;                              // signals dropped unwaited (signal.expire_ms)
    uint64_t peers_lost = 0;                           // senders declared dead or unreachable
    uint64_t frames = 0, duplicates = 0, gaps = 0;     // frames applied, received again, found missing
    uint64_t submits_failed = 0;                       // tracked submits ended here as failed
    uint64_t submits_open = 0;                         // gauge: announced submits not yet ended here
  };
  Counters counters() const;

 private:
  struct Sig {
    uint64_t landed = 0;
    uint32_t open = 0;  // its submits in flight
    bool failed = false;
    SignalReason reason = SignalReason::kNone;
    Status error;
    Clock::time_point touched;
    int waiters = 0;
  };
  struct OpenSubmit {
    std::string signal;  // "" for none
    bool notify = false;
    std::string notify_name;
    Clock::time_point opened;
  };
  struct Sender {
    std::string name, host;
    uint16_t port = 0;
    uint64_t incarnation = 0;  // of the frames applied (0: none yet)
    uint64_t applied = 0;      // last frame applied
    uint64_t gap_seq = 0;      // last frame known lost
    // Whether this engine heard from that incarnation (a frame or a probe's
    // answer): frames it gave up on before (to this engine's previous
    // incarnation, or to nobody yet) are not gaps here.
    bool contact = false;
    std::string last_reply;    // the reply to frame `applied`, for a resend
    std::map<std::string, Sig> signals;
    std::map<uint64_t, OpenSubmit> open;
    std::unordered_set<uint64_t> ended;  // submits failed here; a late DONE of one is refused
    std::deque<uint64_t> ended_order;
    std::deque<std::string> overflowed;  // signals refused for a full table (bounded)
    int waiters = 0;
    bool seen_alive = false;
    Clock::time_point last_answer, touched;
    bool lost = false;
    Clock::time_point lost_at, gap_at;
    Status lost_why, gap_why;
    bool probing = false;
    std::thread prober;
  };

  Status accept(const std::string& body, std::string& reply);
  Sender& senderLocked(const std::string& name);
  // The record of signal `name`, created if there is room; null when the table is full.
  Sig* sigLocked(Sender& s, const std::string& name, Clock::time_point now);
  Status applyDone(Sender& s, const SignalRecord& r, Clock::time_point now);
  // Fails every submit of `s` in flight here.
  void failOpenLocked(Sender& s, SignalReason reason, const Status& why);
  void failSubmitLocked(Sender& s, uint64_t id, const OpenSubmit& o, SignalReason reason, const Status& why);
  void loseLocked(Sender& s, const Status& why, Clock::time_point now);
  void gapLocked(Sender& s, uint64_t last_lost, const Status& why, Clock::time_point now);
  void watchLocked(Sender& s);
  void probeLoop(Sender* s);
  void sweepLoop();

  Settings settings_;
  std::string self_;
  NotifyInbox* inbox_ = nullptr;
  Resolver resolve_;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // waiters: something changed
  std::condition_variable probe_cv_;  // probers and the sweeper: stop
  bool stopping_ = false, started_ = false;
  std::map<std::string, std::unique_ptr<Sender>> senders_;
  size_t signal_count_ = 0;
  int waiting_ = 0;  // wait() calls inside
  std::thread sweeper_;
  Counters counters_;
};

}  // namespace hawser
