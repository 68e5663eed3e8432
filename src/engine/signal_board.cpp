// SignalBoard (signal_board.h): the receiver's side of signals.
#include "engine/signal_board.h"

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"
#include "rpc/connection.h"

namespace hawser {

namespace {
constexpr size_t kEndedKept = 4096;      // failed submits remembered per sender, for late DONE records
constexpr size_t kOverflowKept = 1024;  // refused signal names remembered per sender
}  // namespace

Status SignalBoard::Settings::fromConfig(const Config& config, Settings& out) {
  Status s;
  if (!(s = config.getDuration("signal.probe_interval_ms", out.probe_interval)).ok() ||
      !(s = config.getDuration("signal.peer_timeout_ms", out.peer_timeout)).ok() ||
      !(s = config.getDuration("signal.expire_ms", out.expire)).ok() ||
      !(s = config.getDuration("signal.submit_deadline_ms", out.submit_deadline)).ok() ||
      !(s = config.getSize("signal.max_signals", out.max_signals)).ok())
    return s;
  return Status::OK();
}

SignalBoard::~SignalBoard() { stop(); }

Status SignalBoard::start(rpc::Server& rpc, const Settings& settings, std::string self, NotifyInbox* inbox,
                          Resolver resolve, AliveFn alive) {
  {
    std::lock_guard lk(mu_);
    settings_ = settings;
    self_ = std::move(self);
    inbox_ = inbox;
    resolve_ = std::move(resolve);
    stopping_ = false;
    started_ = true;
  }
  Status s = rpc.onCall(kSignalCall, [this](const std::string& req, std::string& reply) { return accept(req, reply); });
  if (s.ok())
    s = rpc.onCall(kAliveCall, [alive = std::move(alive)](const std::string& req, std::string& reply) {
      reply = encodeAlive(alive(req));
      return Status::OK();
    });
  if (!s.ok()) return s;
  sweeper_ = std::thread([this] { sweepLoop(); });
  return Status::OK();
}

void SignalBoard::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    if (!started_) return;
    started_ = false;
    stopping_ = true;
    for (auto& [name, s] : senders_)
      if (s->prober.joinable()) threads.push_back(std::move(s->prober));
    if (sweeper_.joinable()) threads.push_back(std::move(sweeper_));
    cv_.notify_all();
    probe_cv_.notify_all();
  }
  for (auto& t : threads) t.join();
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return waiting_ == 0; });  // waits end at once (stopping_): they hold their Sender
  senders_.clear();
  signal_count_ = 0;
}

SignalBoard::Counters SignalBoard::counters() const {
  std::lock_guard lk(mu_);
  Counters c = counters_;
  for (auto& [name, s] : senders_) c.submits_open += s->open.size();
  return c;
}

SignalBoard::Sender& SignalBoard::senderLocked(const std::string& name) {
  auto& s = senders_[name];
  if (!s) {
    s = std::make_unique<Sender>();
    s->name = name;
    s->touched = Clock::now();
  }
  return *s;
}

SignalBoard::Sig* SignalBoard::sigLocked(Sender& s, const std::string& name, Clock::time_point now) {
  auto it = s.signals.find(name);
  if (it != s.signals.end()) return &it->second;
  if (signal_count_ >= settings_.max_signals) {
    // Room from the oldest signal nobody waits for and nothing is in flight for.
    Sender* victim_sender = nullptr;
    std::map<std::string, Sig>::iterator victim;
    for (auto& [n, o] : senders_)
      for (auto i = o->signals.begin(); i != o->signals.end(); ++i)
        if (i->second.waiters == 0 && i->second.open == 0 &&
            (!victim_sender || i->second.touched < victim->second.touched)) {
          victim_sender = o.get();
          victim = i;
        }
    if (!victim_sender) {
      s.overflowed.push_back(name);
      if (s.overflowed.size() > kOverflowKept) s.overflowed.pop_front();
      return nullptr;
    }
    victim_sender->signals.erase(victim);
    --signal_count_;
    ++counters_.expired;
  }
  ++signal_count_;
  Sig& g = s.signals[name];
  g.touched = now;
  return &g;
}

void SignalBoard::failSubmitLocked(Sender& s, uint64_t id, const OpenSubmit& o, SignalReason reason,
                                   const Status& why) {
  ++counters_.submits_failed;
  if (!o.signal.empty()) {
    auto it = s.signals.find(o.signal);
    if (it != s.signals.end()) {
      Sig& g = it->second;
      if (g.open) --g.open;
      if (!g.failed) {
        g.failed = true;
        g.reason = reason;
        g.error = why;
      }
      g.touched = Clock::now();
    }
  }
  if (o.notify) {
    Status q = inbox_->push(ReceivedNotification{s.name, o.notify_name, "", NotifyKind::kFailed, why});
    if (!q.ok()) HLOG_WARN("failure of notification '{}' from '{}' not queued: {}", o.notify_name, s.name, q.message());
  }
  s.ended.insert(id);
  s.ended_order.push_back(id);
  if (s.ended_order.size() > kEndedKept) {
    s.ended.erase(s.ended_order.front());
    s.ended_order.pop_front();
  }
}

void SignalBoard::failOpenLocked(Sender& s, SignalReason reason, const Status& why) {
  for (auto& [id, o] : s.open) failSubmitLocked(s, id, o, reason, why);
  s.open.clear();
  cv_.notify_all();
}

void SignalBoard::loseLocked(Sender& s, const Status& why, Clock::time_point now) {
  if (!s.lost) {
    ++counters_.peers_lost;
    HLOG_WARN("signals: sender '{}' lost: {}", s.name, why.message());
  }
  failOpenLocked(s, SignalReason::kPeerLost, why);
  s.lost = true;
  s.lost_at = now;
  s.lost_why = why;
  cv_.notify_all();
}

void SignalBoard::gapLocked(Sender& s, uint64_t last_lost, const Status& why, Clock::time_point now) {
  ++counters_.gaps;
  s.gap_seq = std::max(s.gap_seq, last_lost);
  s.gap_at = now;
  s.gap_why = why;
  failOpenLocked(s, SignalReason::kPeerLost, why);
}

Status SignalBoard::applyDone(Sender& s, const SignalRecord& r, Clock::time_point now) {
  if (s.ended.count(r.id))
    return {Code::kUnavailable, fmt::format("segment '{}' had already ended this submit as failed (its sender was "
                                            "lost, its frames were lost, or signal.submit_deadline_ms passed)",
                                            self_)};
  auto open = s.open.find(r.id);
  const bool was_open = open != s.open.end();
  if (was_open) s.open.erase(open);
  const Status failure = r.code == 0 ? Status::OK() : Status(static_cast<Code>(r.code), r.error);
  Status outcome;
  if (!r.signal.empty()) {
    Sig* g = sigLocked(s, r.signal, now);
    if (!g) {
      outcome = {Code::kCapacityExceeded,
                 fmt::format("segment '{}' holds signal.max_signals signals; signal '{}' was refused", self_,
                             r.signal)};
    } else {
      if (was_open && g->open) --g->open;
      if (failure.ok()) {
        g->landed += r.requests;
      } else if (!g->failed) {
        g->failed = true;
        g->reason = r.reason;
        g->error = failure;
      }
      g->touched = now;
    }
  }
  if (r.has_notify) {
    Status q = failure.ok()
                   ? inbox_->push(ReceivedNotification{s.name, r.notify_name, r.notify_message})
                   : inbox_->push(ReceivedNotification{s.name, r.notify_name, "", NotifyKind::kFailed, failure});
    if (!q.ok()) outcome = q;
  }
  if (!failure.ok()) ++counters_.submits_failed;
  cv_.notify_all();
  return outcome;
}

Status SignalBoard::accept(const std::string& body, std::string& reply) {
  SignalFrame f;
  Status st = decodeSignalFrame(body, f);
  if (!st.ok()) return st;
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  if (stopping_) return {Code::kUnavailable, fmt::format("segment '{}' is shutting down", self_)};
  Sender& s = senderLocked(f.from);
  s.host = f.host;
  s.port = f.port;
  s.seen_alive = true;
  s.last_answer = s.touched = now;
  s.lost = false;
  if (f.incarnation != s.incarnation) {
    if (s.incarnation != 0)
      failOpenLocked(s, SignalReason::kPeerLost,
                     Status(Code::kUnavailable, fmt::format("engine '{}' restarted (a new incarnation) before its "
                                                            "transfers to '{}' ended",
                                                            s.name, self_)));
    s.incarnation = f.incarnation;
    s.applied = s.gap_seq = 0;
    s.contact = false;
    s.ended.clear();
    s.ended_order.clear();
  }
  if (f.seq <= s.applied) {  // sent again after its reply was lost: applied already
    ++counters_.duplicates;
    reply = f.seq == s.applied ? s.last_reply : encodeOutcomes({});
    return Status::OK();
  }
  if (s.contact && f.seq > s.applied + 1)
    gapLocked(s, f.seq - 1,
              Status(Code::kUnavailable, fmt::format("{} frame(s) from engine '{}' were lost (the sender gave up on "
                                                     "them)",
                                                     f.seq - 1 - s.applied, s.name)),
              now);
  std::vector<Status> outcomes;
  for (auto& r : f.records) {
    if (r.kind == SignalRecord::kOpen) {
      if (s.ended.count(r.id)) continue;
      s.open[r.id] = OpenSubmit{r.signal, r.has_notify, r.notify_name, now};
      if (!r.signal.empty())
        if (Sig* g = sigLocked(s, r.signal, now)) {
          ++g->open;
          g->touched = now;
        }
    } else {
      outcomes.push_back(applyDone(s, r, now));
    }
  }
  ++counters_.frames;
  s.contact = true;
  s.applied = f.seq;
  s.last_reply = encodeOutcomes(outcomes);
  reply = s.last_reply;
  if (!s.open.empty()) watchLocked(s);
  return Status::OK();
}

void SignalBoard::watchLocked(Sender& s) {
  if (s.probing || stopping_) return;
  if (s.prober.joinable()) s.prober.join();  // it left its loop; it needs the lock no more
  s.probing = true;
  s.last_answer = std::max(s.last_answer, Clock::now() - settings_.peer_timeout / 2);
  Sender* raw = &s;
  s.prober = std::thread([this, raw] { probeLoop(raw); });
}

void SignalBoard::probeLoop(Sender* s) {
  std::unique_lock lk(mu_);
  std::unique_ptr<rpc::Connection> conn;
  // Counted from the first probe: a sender never heard from is lost once it
  // did not answer for signal.peer_timeout_ms.
  if (!s->seen_alive) s->last_answer = Clock::now();
  while (!stopping_ && (s->waiters > 0 || !s->open.empty())) {
    std::string host = s->host;
    uint16_t port = s->port;
    const std::string name = s->name;
    lk.unlock();
    Status st;
    if (port == 0) st = resolve_(name, host, port);
    AliveReply alive;
    if (st.ok()) {
      if (!conn || conn->host() != host || conn->port() != port) conn = std::make_unique<rpc::Connection>(host, port);
      std::string reply;
      st = conn->call(kAliveCall.id, self_, reply, settings_.peer_timeout);
      if (st.ok()) st = decodeAlive(reply, alive);
    }
    lk.lock();
    if (stopping_) break;
    const auto now = Clock::now();
    if (st.ok()) {
      if (s->port == 0) {
        s->host = host;
        s->port = port;
      }
      s->seen_alive = true;
      s->last_answer = now;
      s->lost = false;
      if (s->incarnation != 0 && alive.incarnation != s->incarnation) {
        failOpenLocked(*s, SignalReason::kPeerLost,
                       Status(Code::kUnavailable, fmt::format("engine '{}' restarted (a new incarnation) before its "
                                                              "transfers to '{}' ended",
                                                              name, self_)));
        s->applied = s->gap_seq = 0;
        s->contact = false;
        s->ended.clear();
        s->ended_order.clear();
      }
      s->incarnation = alive.incarnation;
      if (!s->contact) {  // the first word from it: what it gave up on before is history
        s->contact = true;
        s->gap_seq = std::max(s->gap_seq, alive.abandoned);
      } else if (alive.abandoned > s->applied && alive.abandoned > s->gap_seq)
        gapLocked(*s, alive.abandoned,
                  Status(Code::kUnavailable, fmt::format("engine '{}' gave up sending frame {} to '{}' (it could "
                                                         "not deliver it within its signal.peer_timeout_ms)",
                                                         name, alive.abandoned, self_)),
                  now);
    } else if (s->lost) {
      s->lost_at = now;  // still lost: waits begun since end now
      s->lost_why = Status(st.code(), fmt::format("engine '{}' is still unreachable: {}", name, st.message()));
      cv_.notify_all();
    } else if (s->seen_alive && st.code() == Code::kUnavailable && port != 0) {
      loseLocked(*s,
                 Status(Code::kUnavailable, fmt::format("engine '{}' died: its listener {}:{} is gone "
                                                        "({})",
                                                        name, host, port, st.message())),
                 now);
    } else if (now - s->last_answer >= settings_.peer_timeout) {
      loseLocked(*s,
                 Status(st.code() == Code::kSegmentNotFound ? Code::kSegmentNotFound : Code::kUnavailable,
                        fmt::format("engine '{}' did not answer for {} ms (signal.peer_timeout_ms): {}", name,
                                    std::chrono::duration_cast<std::chrono::milliseconds>(now - s->last_answer)
                                        .count(),
                                    st.message())),
                 now);
    }
    probe_cv_.wait_for(lk, settings_.probe_interval, [&] { return stopping_; });
  }
  s->probing = false;
}

void SignalBoard::sweepLoop() {
  std::unique_lock lk(mu_);
  const auto period = std::min<std::chrono::milliseconds>(
      {std::chrono::milliseconds(1000), settings_.expire / 4 + std::chrono::milliseconds(1),
       settings_.submit_deadline / 4 + std::chrono::milliseconds(1)});
  while (!stopping_) {
    probe_cv_.wait_for(lk, period, [&] { return stopping_; });
    if (stopping_) break;
    const auto now = Clock::now();
    for (auto it = senders_.begin(); it != senders_.end();) {
      Sender& s = *it->second;
      for (auto o = s.open.begin(); o != s.open.end();) {
        if (now - o->second.opened >= settings_.submit_deadline) {
          failSubmitLocked(s, o->first, o->second, SignalReason::kTransferFailed,
                           Status(Code::kTimeout, fmt::format("the submit from '{}' did not end within {} ms of its "
                                                              "announcement (signal.submit_deadline_ms)",
                                                              s.name, settings_.submit_deadline.count())));
          o = s.open.erase(o);
          cv_.notify_all();
        } else {
          ++o;
        }
      }
      for (auto g = s.signals.begin(); g != s.signals.end();) {
        if (g->second.waiters == 0 && g->second.open == 0 && now - g->second.touched >= settings_.expire) {
          g = s.signals.erase(g);
          --signal_count_;
          ++counters_.expired;
        } else {
          ++g;
        }
      }
      // A sender with nothing here any more is forgotten after signal.expire_ms.
      if (s.signals.empty() && s.open.empty() && s.waiters == 0 && !s.probing &&
          now - std::max(s.touched, s.last_answer) >= settings_.expire) {
        if (s.prober.joinable()) s.prober.join();
        it = senders_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

SignalResult SignalBoard::wait(const std::string& peer, const std::string& name, uint64_t expected,
                               Clock::time_point deadline) {
  const auto start = Clock::now();
  std::unique_lock lk(mu_);
  SignalResult out;
  out.peer = peer;
  if (stopping_ || !started_) {
    out.s = SignalState::kFailed;
    out.error = {Code::kUnavailable, fmt::format("segment '{}' is shutting down", self_)};
    return out;
  }
  Sender& s = senderLocked(peer);
  ++s.waiters;
  ++waiting_;
  s.touched = start;
  // The signal's record, once there, counts this waiter (so that nothing
  // drops it meanwhile).
  bool counted = false;
  watchLocked(s);
  for (;;) {
    auto it = s.signals.find(name);
    if (it != s.signals.end() && !counted) {
      ++it->second.waiters;
      counted = true;
    }
    Sig* g = it == s.signals.end() ? nullptr : &it->second;
    out.landed = g ? g->landed : 0;
    if (g && g->failed) {
      out.s = SignalState::kFailed;
      out.reason = g->reason;
      out.error = g->error;
      break;
    }
    if (g && g->landed >= expected) {
      out.s = SignalState::kCompleted;
      break;
    }
    if (std::find(s.overflowed.begin(), s.overflowed.end(), name) != s.overflowed.end()) {
      out.s = SignalState::kFailed;
      out.reason = SignalReason::kOverflow;
      out.error = {Code::kCapacityExceeded,
                   fmt::format("segment '{}' refused signal '{}': it held signal.max_signals signals", self_, name)};
      break;
    }
    if (s.lost && s.lost_at >= start) {
      out.s = SignalState::kFailed;
      out.reason = SignalReason::kPeerLost;
      out.error = s.lost_why;
      break;
    }
    if (s.gap_at >= start) {
      out.s = SignalState::kFailed;
      out.reason = SignalReason::kPeerLost;
      out.error = s.gap_why;
      break;
    }
    if (stopping_) {
      out.s = SignalState::kFailed;
      out.error = {Code::kUnavailable, fmt::format("segment '{}' is shutting down", self_)};
      break;
    }
    if (Clock::now() >= deadline) {
      out.s = SignalState::kTimeout;
      out.error = {Code::kTimeout,
                   fmt::format("signal '{}' from '{}': {} of {} request(s) landed by the deadline", name, peer,
                               out.landed, expected)};
      break;
    }
    if (deadline == Clock::time_point::max()) cv_.wait(lk);
    else cv_.wait_until(lk, deadline);
  }
  --s.waiters;
  auto it = s.signals.find(name);
  if (it != s.signals.end() && counted) --it->second.waiters;
  // A definite answer consumes the signal; a timeout leaves it for a later wait.
  if (out.s != SignalState::kTimeout && it != s.signals.end() && it->second.waiters == 0 && it->second.open == 0) {
    s.signals.erase(it);
    --signal_count_;
  }
  switch (out.s) {
    case SignalState::kCompleted: ++counters_.completed; break;
    case SignalState::kFailed: ++counters_.failed; break;
    case SignalState::kTimeout: ++counters_.timeouts; break;
  }
  if (--waiting_ == 0) cv_.notify_all();  // stop() waits for the last one to leave
  return out;
}

}  // namespace hawser
