// The readers' area of nvlink's region table (src/transport/nvlink/
// nvlink_readers.h) on its own, without a GPU: a withdrawal waits exactly
// for the readers that announced its table slot, not for those of other
// slots, not for a process that is gone (exited, reaped or not), and warns
// naming a reader that keeps it waiting; a slot of a process gone is taken
// over with its announcements cleared. The area is shared memory, as the
// owner's memfd is, so a forked child announces in it as a peer process.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fmt/format.h>
#include <future>

#include "common/log_capture.h"
#include "common/util.h"
#include "transport/nvlink/nvlink_readers.h"

namespace hawser::nvlink {
namespace {

// A readers' area in shared memory (what a peer maps of the owner's memfd).
struct Area {
  Area() : p(::mmap(nullptr, kReadersBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {}
  ~Area() {
    if (p != MAP_FAILED) ::munmap(p, kReadersBytes);
  }
  void* p;
};

// The owner withdraws table slot `slot` on another thread.
std::future<void> withdraw(void* area, uint32_t slot, std::atomic<uint64_t>& waits) {
  return std::async(std::launch::async, [=, &waits] { waitForReaders(area, slot, 7, waits); });
}

// Whether withdrawing `slot` returns without waiting for anyone. Were it to
// wait, every announcement is wiped, so that it ends (and the test with it).
bool withdrawsAlone(void* area, uint32_t slot) {
  std::atomic<uint64_t> waits{0};
  auto w = withdraw(area, slot, waits);
  const bool alone = w.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!alone) std::memset(static_cast<char*>(area) + (kBitmapsOffset - kReadersOffset), 0, kTableFileBytes - kBitmapsOffset);
  w.get();
  return alone && waits.load() == 0;
}

// A child process that claims a reader slot, announces table slot `slot`
// and exits without clearing it; reaped unless `zombie`.
pid_t announceAndExit(void* area, uint32_t slot, bool zombie) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    Reader r;
    if (!r.claim(area)) _exit(2);
    r.enter(slot);
    _exit(0);
  }
  if (!zombie) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  } else {
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);  // exited, left unreaped
  }
  return pid;
}

TEST(NvlinkReaders, a_withdrawal_waits_for_the_reader_that_announced_its_slot_and_no_other) {
  Area a;
  ASSERT_NE(a.p, MAP_FAILED);
  Reader r;
  ASSERT_TRUE(r.claim(a.p));
  std::atomic<uint64_t> waits{0};
  r.enter(5);
  r.enter(5);  // two groups in flight with it
  withdraw(a.p, 6, waits).get();  // another slot: not waited for
  EXPECT_EQ(waits.load(), 0u);
  auto w = withdraw(a.p, 5, waits);
  ASSERT_TRUE(test::eventually([&] { return waits.load() == 1; })) << "the withdrawal did not wait";
  r.leave(5);
  EXPECT_EQ(w.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout) << "one group still announces it";
  r.leave(5);
  w.get();
  EXPECT_EQ(waits.load(), 1u);
  r.release();
}

TEST(NvlinkReaders, a_reader_of_a_process_gone_is_not_waited_for_and_its_slot_is_taken_over) {
  for (bool zombie : {false, true}) {
    SCOPED_TRACE(zombie ? "exited, not reaped" : "exited and reaped");
    Area a;
    ASSERT_NE(a.p, MAP_FAILED);
    const pid_t child = announceAndExit(a.p, 9, zombie);
    EXPECT_TRUE(withdrawsAlone(a.p, 9)) << "waited for a process that is gone";
    // Its reader slot (the first) is taken over, its announcement cleared.
    Reader r;
    ASSERT_TRUE(r.claim(a.p));
    EXPECT_EQ(r.slot(), 0);
    EXPECT_TRUE(withdrawsAlone(a.p, 9)) << "the announcement of the slot's last holder was kept";
    r.release();
    if (zombie) ::waitpid(child, nullptr, 0);
  }
}

TEST(NvlinkReaders, a_withdrawal_kept_waiting_warns_naming_the_process) {
  test::LogCapture log;
  Area a;
  ASSERT_NE(a.p, MAP_FAILED);
  Reader r;
  ASSERT_TRUE(r.claim(a.p));
  r.enter(3);
  std::atomic<uint64_t> waits{0};
  auto w = withdraw(a.p, 3, waits);
  const std::string want = fmt::format("for the copies of process {} (stopped?)", ::getpid());
  EXPECT_TRUE(test::eventually([&] { return log.text().find(want) != std::string::npos; })) << log.text();
  r.leave(3);
  w.get();
  r.release();
}

}  // namespace
}  // namespace hawser::nvlink
