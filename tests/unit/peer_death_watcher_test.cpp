// local::PeerDeathWatcher: a peer process's exit runs its callback once, on
// the watcher's thread; a removed peer's never runs; peers without a pidfd
// are polled; tasks posted run on the thread (inline once stopped).
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "common/util.h"
#include "local/peer_death_watcher.h"

namespace hawser::test {
namespace {

using local::PeerDeathWatcher;

// A child process that waits to be killed, and a pidfd of it.
struct PausedChild {
  pid_t pid = -1;
  int pidfd = -1;
  PausedChild() {
    pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();
    }
    if (pid > 0) pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }
  // Kills it and reaps it: it has exited when this returns.
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }
  ~PausedChild() {
    kill();
    if (pidfd >= 0) ::close(pidfd);
  }
};

// Waits until a task posted now has run on the watcher's thread: every
// event the thread had seen before has been handled.
void drain(PeerDeathWatcher& w) {
  std::atomic<bool> ran{false};
  w.post([&ran] { ran = true; });
  ASSERT_TRUE(eventually([&] { return ran.load(); }, std::chrono::seconds(5)));
}

TEST(PeerDeathWatcher, a_killed_child_runs_its_callback_once_on_the_watcher_thread) {
  PeerDeathWatcher w;
  ASSERT_TRUE(w.start().ok());
  PausedChild child;
  ASSERT_GT(child.pid, 0);
  if (child.pidfd < 0) GTEST_SKIP() << "pidfd_open is not available (Linux 5.3+): " << std::strerror(errno);
  std::atomic<int> calls{0};
  std::thread::id on;
  std::mutex mu;
  PeerDeathWatcher::Id id = 0;
  ASSERT_TRUE(w.add(
                   child.pidfd,
                   [&] {
                     std::lock_guard lk(mu);
                     on = std::this_thread::get_id();
                     ++calls;
                   },
                   id)
                  .ok());
  EXPECT_NE(id, 0u);
  EXPECT_EQ(w.watched(), 1u);
  drain(w);
  EXPECT_EQ(calls.load(), 0) << "the callback ran while the child lives";
  child.kill();
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }, std::chrono::seconds(5)))
      << "the child's exit was not noticed within 5 s";
  drain(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(w.watched(), 0u);
  {
    std::lock_guard lk(mu);
    EXPECT_NE(on, std::this_thread::get_id());
  }
  w.remove(id);  // fired already: nothing
  w.stop();
}

TEST(PeerDeathWatcher, a_removed_peer_never_runs_its_callback) {
  PeerDeathWatcher w;
  ASSERT_TRUE(w.start().ok());
  PausedChild removed, kept;
  ASSERT_GT(removed.pid, 0);
  ASSERT_GT(kept.pid, 0);
  if (removed.pidfd < 0 || kept.pidfd < 0) GTEST_SKIP() << "pidfd_open is not available (Linux 5.3+)";
  std::atomic<int> removed_calls{0}, kept_calls{0};
  PeerDeathWatcher::Id a = 0, b = 0;
  ASSERT_TRUE(w.add(removed.pidfd, [&] { ++removed_calls; }, a).ok());
  ASSERT_TRUE(w.add(kept.pidfd, [&] { ++kept_calls; }, b).ok());
  EXPECT_NE(a, b);
  w.remove(a);
  EXPECT_EQ(w.watched(), 1u);
  removed.kill();
  kept.kill();
  ASSERT_TRUE(eventually([&] { return kept_calls.load() == 1; }, std::chrono::seconds(5)));
  drain(w);
  EXPECT_EQ(removed_calls.load(), 0);
  EXPECT_EQ(kept_calls.load(), 1);
}

TEST(PeerDeathWatcher, a_peer_without_a_pidfd_is_polled_and_may_remove_itself) {
  PeerDeathWatcher w;
  ASSERT_TRUE(w.start().ok());
  std::atomic<bool> gone{false};
  std::atomic<int> calls{0}, checks{0};
  PeerDeathWatcher::Id id = 0;
  ASSERT_TRUE(w.add(
                   -1,
                   [&] {
                     ++calls;
                     w.remove(id);  // from the callback itself: no wait on its own thread
                   },
                   id,
                   [&] {
                     ++checks;
                     return gone.load();
                   })
                  .ok());
  ASSERT_TRUE(eventually([&] { return checks.load() >= 2; }, std::chrono::seconds(5))) << "the check is not polled";
  EXPECT_EQ(calls.load(), 0);
  gone = true;
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }, std::chrono::seconds(5)));
  const int checked = checks.load();
  drain(w);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(checks.load(), checked) << "a peer that fired is still polled";
  // A peer without a pidfd and without a check is refused.
  PeerDeathWatcher::Id none = 0;
  EXPECT_EQ(w.add(-1, [] {}, none).code(), Code::kInvalidArgument);
}

TEST(PeerDeathWatcher, tasks_run_on_the_thread_and_inline_once_stopped) {
  PeerDeathWatcher w;
  PeerDeathWatcher::Id id = 0;
  EXPECT_EQ(w.add(-1, [] {}, id, [] { return false; }).code(), Code::kInternal) << "watching before start()";
  ASSERT_TRUE(w.start().ok());
  std::atomic<bool> ran{false};
  std::thread::id on;
  w.post([&] {
    on = std::this_thread::get_id();
    ran = true;
  });
  ASSERT_TRUE(eventually([&] { return ran.load(); }, std::chrono::seconds(5)));
  EXPECT_NE(on, std::this_thread::get_id());
  w.stop();
  bool inline_ran = false;
  w.post([&] { inline_ran = true; });
  EXPECT_TRUE(inline_ran) << "a task posted after stop() did not run inline";
}

}  // namespace
}  // namespace hawser::test
