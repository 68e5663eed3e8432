// Connection choice for posted slices: home connections while several
// threads submit, round-robin for a lone one (tcp_conn_picker.h).
#include "transport/tcp/tcp_conn_picker.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

uint32_t threadSeat() {
  static std::atomic<uint32_t> next{0};
  thread_local const uint32_t seat = next.fetch_add(1, std::memory_order_relaxed);
  return seat;
}

int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void ConnPicker::start(Peer* peer) {
  flush();
  peer_ = peer;
  n_ = std::min(peer->conns.size(), kMaxConns);
  std::fill_n(added_, n_, 0);
  home_ = false;
  if (!home_on_ || n_ < 2) return;
  // Another thread than the last one posting here: several threads submit.
  if (peer->last_poster.load(std::memory_order_relaxed) != seat_) {
    const uint32_t prev = peer->last_poster.exchange(seat_, std::memory_order_relaxed);
    if (prev != kNoPoster && prev != seat_)
      peer->shared_until_ns.store(now_ + window_ns_, std::memory_order_relaxed);
  }
  if (now_ >= peer->shared_until_ns.load(std::memory_order_relaxed)) return;
  home_ = true;
  home_index_ = seat_ % n_;
  for (size_t i = 0; i < n_; ++i) load_[i] = peer->conns[i]->load.load(std::memory_order_relaxed);
}

Conn* ConnPicker::pick(Peer* peer, uint32_t len, uint32_t task_slices) {
  if (peer != peer_) start(peer);
  size_t k;
  if (!home_) {
    if (task_slices) rr_ = peer->rr.fetch_add(task_slices, std::memory_order_relaxed);
    k = rr_++ % n_;
  } else {
    size_t least = 0;
    for (size_t i = 1; i < n_; ++i)
      if (load_[i] < load_[least]) least = i;
    k = load_[home_index_] - load_[least] > slack_ ? least : home_index_;
    load_[k] += len;
  }
  added_[k] += len;
  return peer->conns[k].get();
}

void ConnPicker::flush() {
  if (!peer_) return;
  for (size_t i = 0; i < n_; ++i)
    if (added_[i]) peer_->conns[i]->load.fetch_add(added_[i], std::memory_order_relaxed);
  peer_ = nullptr;
}

}  // namespace hawser::tcp
