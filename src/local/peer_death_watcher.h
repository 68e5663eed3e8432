// Notices same-host peer processes exiting, for the transports that hold
// something of theirs (shm's peers, nvlink's owners of GPU memory): one
// thread waits on the peers' pidfds (readable once the process exited) and
// runs each peer's callback once. Where a peer has no pidfd, a check the
// caller gives (e.g. "its pid no longer has the recorded start time") is
// polled instead. The thread also runs tasks handed to it (post()), so a
// transport can do slow clean-up off its data path.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "hawser/status.h"

namespace hawser::local {

class PeerDeathWatcher {
 public:
  using Id = uint64_t;  // never 0, never reused
  // How often checks of peers without a pidfd are polled.
  static constexpr int kPollMs = 100;

  PeerDeathWatcher() = default;
  ~PeerDeathWatcher() { stop(); }
  PeerDeathWatcher(const PeerDeathWatcher&) = delete;
  PeerDeathWatcher& operator=(const PeerDeathWatcher&) = delete;

  // Creates the epoll set and starts the thread (kInternal: no epoll or eventfd).
  Status start();
  // Joins the thread; callbacks that have not run never will. Tasks still
  // queued run here, inline; later post()s run inline too.
  void stop();

  // Watches the process of `pidfd` (not owned: keep it open until remove()):
  // `on_exit` runs once, on the watcher thread, after the process exited.
  // `pidfd` < 0: `exited` is polled every kPollMs instead (on_exit runs the
  // first time it returns true). `id` is for remove(). kInternal when the
  // kernel refuses to watch the fd (or the watcher is not running).
  Status add(int pidfd, std::function<void()> on_exit, Id& id, std::function<bool()> exited = {});
  // Stops watching `id` (an id that fired or was removed: nothing). Once it
  // returns, neither its callback nor its check is running (unless remove()
  // was called from them) and neither will run again.
  void remove(Id id);
  // Runs `task` on the watcher thread, soon (inline when not running).
  void post(std::function<void()> task);

  // Peers watched now (tests).
  size_t watched() const;

 private:
  struct Entry {
    int pidfd = -1;
    std::function<void()> on_exit;
    std::function<bool()> exited;  // pidfd < 0 only
  };
  void run();
  void wake();
  // Removes `id` from the set and the epoll set; its entry (callbacks) or an empty one.
  Entry takeLocked(Id id);

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;  // busy_ went back to 0
  std::map<Id, Entry> entries_;
  std::vector<std::function<void()>> tasks_;
  Id next_id_ = 1;
  Id busy_ = 0;  // the id whose check or callback the thread runs now
  int epfd_ = -1, evfd_ = -1;
  bool running_ = false, stop_ = false;
  std::thread thread_;
  std::thread::id thread_id_;  // the watcher's thread (remove() from it does not wait)
};

}  // namespace hawser::local
