// Initiator side of the tcp transport: epoll threads that own the data
// connections (edge-triggered, non-blocking sockets): the loop, the inbox of
// posted slices, connecting, purges, stall timeouts and failing a connection.
// A submitter that finds the loop asleep sends its requests itself
// (submit()). What goes over one connection's socket: tcp_stream.cpp.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <system_error>

#include "base/cpu_relax.h"
#include "base/log.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_internal.h"
#include "transport/tcp/tcp_testing.h"

namespace hawser::tcp {

namespace testing {
std::atomic<LoopHook> after_drain{nullptr};
}  // namespace testing

namespace {
constexpr int kMaxEvents = 64;
}  // namespace

IoThread::IoThread(const TcpSettings& settings, const gpu::CopySettings& copy, InitiatorCounters* counters,
                   size_t staging_slots)
    : staging_slots_(staging_slots), copy_settings_(copy), settings_(settings), counters_(counters) {}

IoThread::~IoThread() {
  stop();
  if (evfd_ >= 0) ::close(evfd_);
  if (epfd_ >= 0) ::close(epfd_);
}

Status IoThread::start() {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return {Code::kUnavailable, fmt::format("tcp: epoll_create1: {}", std::strerror(errno))};
  evfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (evfd_ < 0) return {Code::kUnavailable, fmt::format("tcp: eventfd: {}", std::strerror(errno))};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev) != 0)
    return {Code::kUnavailable, fmt::format("tcp: epoll_ctl(eventfd): {}", std::strerror(errno))};
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    return {Code::kUnavailable, fmt::format("tcp: cannot start an io thread: {}", e.what())};
  }
  return Status::OK();
}

void IoThread::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  if (evfd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(evfd_, &one, sizeof(one));
  }
  thread_.join();
  std::lock_guard lk(purge_mu_);
  purge_cv_.notify_all();
}

void IoThread::wake() {
  if (sleeping_.exchange(false)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(evfd_, &one, sizeof(one));
  }
}

void IoThread::post(Slice* first, Slice* last) {
  Slice* old = inbox_.load(std::memory_order_relaxed);
  do {
    last->next = old;
  } while (!inbox_.compare_exchange_weak(old, first, std::memory_order_seq_cst, std::memory_order_relaxed));
  wake();
}

void IoThread::submit(Slice* first, Slice* last) {
  std::unique_lock lk(loop_mu_, std::try_to_lock);
  if (!lk.owns_lock() || exited_) {
    if (lk.owns_lock()) lk.unlock();
    post(first, last);
    return;
  }
  // The loop waits in epoll_wait (or is between rounds): do its work here.
  // Through the inbox, so slices posted before ours go first.
  counters_->inline_submits.fetch_add(1, std::memory_order_relaxed);
  Slice* old = inbox_.load(std::memory_order_relaxed);
  do {
    last->next = old;
  } while (!inbox_.compare_exchange_weak(old, first, std::memory_order_seq_cst, std::memory_order_relaxed));
  drainInbox();
  // GPU slices wait for a staging slot, which only the loop hands out.
  if (!slot_wait_.empty()) wake();
}

uint64_t IoThread::requestPurge() {
  uint64_t ticket = purge_epoch_.fetch_add(1) + 1;
  events_.store(true);
  wake();
  return ticket;
}

void IoThread::waitPurged(uint64_t ticket, std::chrono::milliseconds limit) {
  std::unique_lock lk(purge_mu_);
  purge_cv_.wait_for(lk, limit, [&] { return purge_done_ >= ticket || stop_.load(); });
}

void IoThread::requestCloseIdle() {
  events_.store(true);
  wake();
}

// ---- the loop ------------------------------------------------------------------

// A submitter holds the loop for one sendmsg: wait for it briefly before
// sleeping on the mutex (that sleep would cost a wake-up on each side).
void IoThread::relock(std::unique_lock<std::mutex>& lk) {
  if (lk.try_lock()) return;
  const auto end = Clock::now() + std::chrono::microseconds(20);
  for (unsigned i = 1;; ++i) {
    cpuRelax();
    if (lk.try_lock()) return;
    if (i % 64 == 0 && Clock::now() >= end) break;
  }
  lk.lock();
}

void IoThread::run() {
  pthread_setname_np(pthread_self(), "tcp-io");  // as top -H and perf show it
  epoll_event evs[kMaxEvents];
  std::unique_lock lk(loop_mu_);
  while (!stop_.load(std::memory_order_relaxed)) {
    drainInbox();
    testing::afterDrain(purge_epoch_);
    if (events_.exchange(false)) {
      drainConnectResults();
      if (purge_epoch_.load() != purge_seen_) purge();
      closeIdle();
    }
    pumpStaging();
    int wait_ms = checkTimeouts();
    // GPU copies complete without an fd to wake us: look at them again
    // right after the sockets (tcp.gpu_poll_copies: and again, the sockets
    // too, while they run; else wait for the oldest if the sockets are
    // quiet, which leaves a payload arriving meanwhile unread).
    const bool copying = copiesPending();
    if (copying) wait_ms = 0;

    // Sleep protocol (pairs with wake()): announce, then re-check the inputs.
    sleeping_.store(true);
    if (inbox_.load() != nullptr || events_.load() || stop_.load()) {
      sleeping_.store(false);
      wait_ms = 0;
    }
    lk.unlock();  // a submitter may send meanwhile (submit())
    int n = ::epoll_wait(epfd_, evs, kMaxEvents, wait_ms);
    const int err = errno;
    sleeping_.store(false, std::memory_order_relaxed);
    relock(lk);
    if (n < 0) {
      if (err == EINTR) continue;
      HLOG_ERROR("tcp: epoll_wait: {}", std::strerror(err));
      break;
    }
    handleEvents(evs, n, true);
    if (copying && n == 0 && !settings_.gpu_poll_copies) waitOneCopy();
  }

  // Shutting down: no new connects; wait for the attempts in progress (each
  // bounded by tcp.connect_timeout_ms), then fail everything still held.
  for (Conn* c : conns_)
    if (c->connector.joinable()) c->connector.join();
  drainInbox();
  {
    std::lock_guard lk(results_mu_);
    results_.clear();  // closes the sockets of late connects
  }
  Status why(Code::kUnavailable, "tcp transport shut down");
  for (Conn* c : conns_) {
    if (c->state == ConnState::kConnected) failConn(c, why);
    failList(c->unsent, false, why);
    c->state = ConnState::kDisconnected;
  }
  failStaging(why);
  exited_ = true;
}

void IoThread::handleEvents(const epoll_event* evs, int n, bool loop) {
  for (int i = 0; i < n; ++i) {
    auto* c = static_cast<Conn*>(evs[i].data.ptr);
    if (!c) {
      // The eventfd (level-triggered): only the loop consumes its wake-ups.
      if (loop) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(evfd_, &v, sizeof(v));
      }
      continue;
    }
    if (c->state != ConnState::kConnected) continue;
    uint32_t e = evs[i].events;
    if (e & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) doRecv(c);
    if (c->state != ConnState::kConnected) continue;
    if (e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) c->writable = true;
    doSend(c);
  }
}

void IoThread::poll() {
  std::unique_lock lk(loop_mu_, std::try_to_lock);
  if (!lk.owns_lock() || exited_) return;
  // The loop sleeps: take what has arrived (edge-triggered: whoever takes an
  // event handles it, the loop then finds nothing) and send what is queued.
  epoll_event evs[kMaxEvents];
  const int n = ::epoll_wait(epfd_, evs, kMaxEvents, 0);
  if (n > 0) {
    counters_->polled_events.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    handleEvents(evs, n, false);
  }
  if (inbox_.load(std::memory_order_relaxed) != nullptr) drainInbox();
  // GPU slices wait for a staging slot and copies complete without an fd:
  // only the loop pumps those (it may sleep until its tick otherwise).
  if (!slot_wait_.empty() || copiesPending()) wake();
}

void IoThread::drainInbox() {
  Slice* s = inbox_.exchange(nullptr, std::memory_order_acquire);
  if (!s) return;
  // The stack is newest-first; reverse into submission order.
  Slice* prev = nullptr;
  while (s) {
    Slice* next = s->next;
    s->next = prev;
    prev = s;
    s = next;
  }
  touched_.clear();
  for (s = prev; s;) {
    Slice* next = s->next;
    Conn* c = s->conn;
    if (!c->known) {
      c->known = true;
      conns_.push_back(c);
    }
    if (s->gpu >= 0) {  // GPU memory: a staging slot first (pumpStaging)
      c->close_idle.store(false, std::memory_order_relaxed);
      slot_wait_.push(s);
      s = next;
      continue;
    }
    c->unsent.push(s);
    c->close_idle.store(false, std::memory_order_relaxed);
    if (!c->touched) {
      c->touched = true;
      touched_.push_back(c);
    }
    s = next;
  }
  for (Conn* c : touched_) {
    c->touched = false;
    if (stop_.load(std::memory_order_relaxed)) continue;
    if (c->state == ConnState::kDisconnected) startConnect(c);
    else if (c->state == ConnState::kConnected) doSend(c);
  }
}

void IoThread::startConnect(Conn* c) {
  c->state = ConnState::kConnecting;
  if (c->connector.joinable()) c->connector.join();  // finished: its result was consumed
  try {
    c->connector = std::thread([this, c] {
      net::Fd fd;
      Status s = rpc::openStream(c->peer->host, c->peer->port, kTcpDataChannel.id,
                                 std::chrono::milliseconds(settings_.connect_timeout_ms), fd);
      {
        std::lock_guard lk(results_mu_);
        results_.push_back(ConnectResult{c, std::move(fd), std::move(s)});
      }
      events_.store(true);
      wake();
    });
  } catch (const std::system_error& e) {
    c->state = ConnState::kDisconnected;
    counters_->connect_failures.fetch_add(1, std::memory_order_relaxed);
    c->peer->metrics.connect_failures->add();
    failList(c->unsent, false,
             Status(Code::kUnavailable, fmt::format("tcp {}: cannot start a connect thread: {}", c->peer->name,
                                                    e.what())));
  }
}

void IoThread::drainConnectResults() {
  std::vector<ConnectResult> done;
  {
    std::lock_guard lk(results_mu_);
    done.swap(results_);
  }
  for (auto& r : done) {
    Conn* c = r.conn;
    Status s = r.status;
    if (s.ok()) {
      int fd = r.fd.get();
      int fl = ::fcntl(fd, F_GETFL);
      sizeBuffers(fd, settings_.sock_buf, settings_.loopback_send_buf);
      net::setKeepAlive(fd, std::chrono::milliseconds(settings_.timeout_ms));
      // Closing a data connection resets it: requests still on it were
      // abandoned (they FAIL), and the kernel must drop what it has not sent
      // yet rather than deliver it once a partition heals, after the write
      // was reported FAILED and perhaps another one completed over it. This
      // holds when the process dies too. (The target, for its part, applies
      // no write whose connection it sees closed: tcp_target_channel.cpp.)
      net::setResetOnClose(fd);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.ptr = c;
      if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
        s = Status(Code::kUnavailable, fmt::format("cannot set up the socket: {}", std::strerror(errno)));
    }
    if (!s.ok()) {
      counters_->connect_failures.fetch_add(1, std::memory_order_relaxed);
      c->peer->metrics.connect_failures->add();
      c->state = ConnState::kDisconnected;
      HLOG_WARN("tcp: data connection {} to {}: {}", c->index, c->peer->name, s.toString());
      Status why(s.code(), fmt::format("tcp: cannot connect to {}: {}", c->peer->name, s.message()));
      failList(c->unsent, false, why);
      failWaiting(c, why);
      continue;
    }
    counters_->connects.fetch_add(1, std::memory_order_relaxed);
    c->peer->metrics.connects->add();
    c->peer->metrics.open->add(1);
    c->fd = r.fd.release();
    c->state = ConnState::kConnected;
    c->writable = true;
    c->tx = nullptr;
    c->tx_off = 0;
    c->rx_mode = RxMode::kHeader;
    c->rx_begin = c->rx_end = 0;
    c->last_progress = Clock::now();
    c->progress_seen = c->progress;
    HLOG_DEBUG("tcp: data connection {} to {} open (fd {})", c->index, c->peer->name, c->fd);
    doSend(c);
  }
}

void IoThread::purge() {
  const uint64_t epoch = purge_epoch_.load();
  purge_seen_ = epoch;
  // A slice posted after this turn's drain (its submitter found the loop
  // held) is still in the inbox: the purge covers what was submitted before
  // it was requested, so take it in first (it did not: a canceled frame
  // stayed queued and its batch could not be freed until the connection
  // failed).
  drainInbox();
  auto sweep = [this](SliceList& l) {
    SliceList keep;
    while (Slice* s = l.pop()) {
      if (allCanceled(s)) dropFrame(s);
      else keep.push(s);
    }
    l = keep;
  };
  for (Conn* c : conns_) sweep(c->unsent);
  sweep(slot_wait_);
  std::lock_guard lk(purge_mu_);
  purge_done_ = epoch;
  purge_cv_.notify_all();
}

void IoThread::closeIdle() {
  for (Conn* c : conns_) {
    if (!c->close_idle.load(std::memory_order_relaxed)) continue;
    if (!c->inflight.empty() || !c->unsent.empty() || c->state == ConnState::kConnecting) continue;
    c->close_idle.store(false, std::memory_order_relaxed);
    if (c->state == ConnState::kConnected)
      failConn(c, Status(Code::kUnavailable, "segment closed; idle connection released"), /*failure=*/false);
  }
}

// Whether `c` moved bytes since the last look (the data path bumps
// Conn::progress); if so, its stall is timed from `now` on.
static bool progressed(Conn* c, Clock::time_point now) {
  if (c->progress == c->progress_seen) return false;
  c->progress_seen = c->progress;
  c->last_progress = now;
  return true;
}

int IoThread::checkTimeouts() {
  bool busy = false, open = false;
  Clock::time_point now{};
  for (Conn* c : conns_) {
    open |= c->state == ConnState::kConnected;
    if (c->state != ConnState::kConnected || (c->inflight.empty() && c->unsent.empty())) continue;
    if (!busy) now = Clock::now();
    busy = true;
    // Progress is counted on the data path and timed here, once per round:
    // the stall is measured from the round that first saw no more of it
    // (late by at most one round, never early).
    if (progressed(c, now)) continue;
    if (now - c->last_progress < std::chrono::milliseconds(settings_.timeout_ms)) continue;
    // Before calling the peer silent, look: bytes may be waiting that this
    // thread has not read (it was not scheduled for that long, or the
    // process was stopped and its kernel kept the connection going).
    doRecv(c);
    if (c->state == ConnState::kConnected) {
      c->writable = true;  // a missed EPOLLOUT edge: sendmsg says EAGAIN if not
      doSend(c);
    }
    if (c->state == ConnState::kConnected && !progressed(c, Clock::now()))
      failConn(c, Status(Code::kTimeout, fmt::format("tcp: no progress on the connection to {} for {} ms",
                                                     c->peer->name, settings_.timeout_ms)));
  }
  if (!busy && !open) return -1;
  return static_cast<int>(std::clamp<uint32_t>(settings_.timeout_ms / 8, 5, 250));
}

// ---- failure ------------------------------------------------------------------------

void IoThread::dropCanceled(Slice* s) {
  s->conn->load.fetch_sub(s->len, std::memory_order_relaxed);
  SubBatchImpl* sb = s->sb;
  s->state.store(kSliceDropped, std::memory_order_release);
  // Last touch of the slice: after this, freeSubBatch may run.
  sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
}

bool IoThread::allCanceled(Slice* s) {
  for (uint32_t j = 0; j < s->runs; ++j) {
    const uint8_t st = s[j].state.load(std::memory_order_acquire);
    if (st != kSliceCanceled && st != kSliceDropped) return false;
  }
  return true;
}

void IoThread::dropFrame(Slice* s) {
  releaseStaging(s);
  forEachRun(s, [this](Slice* r) { dropCanceled(r); });
}

void IoThread::failList(SliceList& l, bool committed, const Status& why) {
  while (Slice* s = l.pop()) {
    // Not yet committed: the runs cancel() has not taken fail; the others go.
    if (!committed && !s->staged && !commitFrame(s)) continue;
    endFrame(s, false, why);
  }
}

void IoThread::failConn(Conn* c, const Status& why, bool failure) {
  if (c->fd >= 0) {
    ::close(c->fd);  // a reset (see drainConnectResults); also leaves the epoll set
    c->fd = -1;
    c->peer->metrics.open->add(-1);
  }
  if (failure && c->state == ConnState::kConnected) {
    counters_->connection_failures.fetch_add(1, std::memory_order_relaxed);
    c->peer->metrics.failures->add();
  }
  c->state = ConnState::kDisconnected;
  size_t n = c->inflight.n + c->unsent.n;
  if (n > 0) HLOG_WARN("tcp: data connection {} to {} lost ({}); failing {} request(s)", c->index, c->peer->name,
                       why.message(), n);
  else HLOG_DEBUG("tcp: data connection {} to {} closed: {}", c->index, c->peer->name, why.message());
  c->tx = nullptr;
  c->tx_off = 0;
  c->rx_mode = RxMode::kHeader;
  c->rx_run = nullptr;
  c->rx_begin = c->rx_end = 0;
  c->writable = false;
  failList(c->inflight, true, why);
  failList(c->unsent, false, why);
  if (failure) failWaiting(c, why);
}

}  // namespace hawser::tcp
