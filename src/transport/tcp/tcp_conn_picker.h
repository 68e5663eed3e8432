// Which data connection to a peer each slice of a post goes to (internal to
// the tcp transport; docs/tcp.md "Connections").
//
// While several threads submit to one peer (a thread other than the last one
// posted to it within tcp.home_window_ms), a thread's slices go to its home
// connection (threads take homes in turn), unless that one already carries
// more than tcp.home_slack bytes beyond the least loaded one: then to that
// one. A thread's batches then stay with one io thread and one target thread,
// which the scheduler keeps on one core with the thread, instead of every
// batch waiting on every connection and every thread being woken by every io
// thread (docs/tcp.md "Connections" has the A/B). A lone thread, or
// tcp.home_connections false, spreads its slices round-robin over all
// connections, so one batch keeps them all busy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hawser::tcp {

struct Peer;
struct Conn;

// This thread's place in the turn for home connections: its home on a peer
// is this modulo the peer's connection count.
uint32_t threadSeat();

// Steady clock, nanoseconds.
int64_t steadyNowNs();

// One post's choices. The loads it adds reach Conn::load at flush() (and
// before it picks for another peer); each slice takes its bytes off again
// when it finishes (IoThread::finishSlice, dropCanceled).
class ConnPicker {
 public:
  // `home`: tcp.home_connections; `slack`: tcp.home_slack; `window_ms`:
  // tcp.home_window_ms; `seat`: the posting thread's threadSeat();
  // `now_ns`: steadyNowNs() at the post.
  ConnPicker(bool home, uint64_t slack, uint32_t window_ms, uint32_t seat, int64_t now_ns)
      : home_on_(home),
        slack_(static_cast<int64_t>(slack)),
        window_ns_(static_cast<int64_t>(window_ms) * 1'000'000),
        seat_(seat),
        now_(now_ns) {}
  ~ConnPicker() { flush(); }
  ConnPicker(const ConnPicker&) = delete;
  ConnPicker& operator=(const ConnPicker&) = delete;

  // The connection for a slice of `len` bytes to `peer`; `task_slices`: how
  // many slices its task has, when this is the task's first one (else 0).
  Conn* pick(Peer* peer, uint32_t len, uint32_t task_slices);
  // Whether the picks for the current peer follow home connections.
  bool homeMode() const { return home_; }
  void flush();

  static constexpr size_t kMaxConns = 64;  // tcp.connections upper bound

 private:
  void start(Peer* peer);

  const bool home_on_;
  const int64_t slack_;
  const int64_t window_ns_;
  const uint32_t seat_;
  const int64_t now_;
  Peer* peer_ = nullptr;
  size_t n_ = 0;
  bool home_ = false;
  size_t home_index_ = 0;
  uint32_t rr_ = 0;
  int64_t load_[kMaxConns];
  int64_t added_[kMaxConns];
};

}  // namespace hawser::tcp
