// shm and the target's registrations (issue 30): a task is bound to the
// registration it started on. The target unregistering and registering
// again at the same address between two slices of a task fails the task
// (kOutOfRange naming the withdrawn range) instead of mixing the bytes of
// both registrations, and unregisterLocalMemory does not return while a copy
// into the range is running. The interleavings are forced with the copy
// threads' test seam (src/transport/shm/shm_testing.h): a copy thread parks
// at a chosen point while the test acts as the target.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <fmt/format.h>
#include <future>
#include <mutex>

#include "common/util.h"
#include "hawser/engine.h"
#include "transport/shm/shm_testing.h"

namespace hawser::test {
namespace {

namespace seam = shm::testing;

constexpr size_t kRegion = 2u << 20;   // the target's registration
constexpr size_t kTask = 1u << 20;     // two slices of shm.split_bytes
constexpr size_t kSplit = 512u << 10;

// Parks the copy whose first run starts at `at` when it reaches `point`,
// until released.
struct Park {
  std::mutex mu;
  std::condition_variable cv;
  seam::Point point = seam::Point::kTurn;
  uint64_t at = 0;
  bool armed = false, parked = false, released = false;
};
Park g_park;

void parkHook(seam::Point point, uint64_t remote, uint64_t) {
  std::unique_lock lk(g_park.mu);
  if (!g_park.armed || point != g_park.point || remote != g_park.at) return;
  g_park.armed = false;
  g_park.parked = true;
  g_park.cv.notify_all();
  g_park.cv.wait_for(lk, std::chrono::seconds(60), [] { return g_park.released; });
}

uint64_t counter(TransferEngine& e, const std::string& key) {
  for (auto& t : e.stats().transports)
    if (t.transport == "shm")
      for (auto& [k, v] : t.counters)
        if (k == key) return v;
  return 0;
}

class ShmRegistration : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions io;
    io.config = {{"transport", "shm"}, {"shm.threads", "1"}, {"shm.split_bytes", std::to_string(kSplit)}};
    ASSERT_TRUE(target_.init("p2p", "target", "127.0.0.1", 0).ok());
    if (!hasTransport(target_, "shm")) GTEST_SKIP() << "shm is not installed here (no cross-memory attach)";
    ASSERT_TRUE(init_.init("p2p", "initiator", "127.0.0.1", 0, io).ok());
    ASSERT_TRUE(target_.registerLocalMemory(mem_.p, kRegion, "cpu:0", true).ok());
    ASSERT_TRUE(init_.registerLocalMemory(local_.p, kRegion, "cpu:0", false).ok());
    ASSERT_TRUE(init_.openSegment(target_.segmentName(), seg_).ok());
    seam::on_copy.store(parkHook);
  }
  void TearDown() override {
    release();
    seam::on_copy.store(nullptr);
  }
  void arm(seam::Point point, uint64_t at) {
    std::lock_guard lk(g_park.mu);
    g_park.point = point;
    g_park.at = at;
    g_park.armed = true;
    g_park.parked = g_park.released = false;
  }
  bool waitParked() {
    std::unique_lock lk(g_park.mu);
    return g_park.cv.wait_for(lk, std::chrono::seconds(30), [] { return g_park.parked; });
  }
  void release() {
    std::lock_guard lk(g_park.mu);
    g_park.armed = false;
    g_park.released = true;
    g_park.cv.notify_all();
  }
  std::future<TransferStatus> start(OpCode op, uint64_t remote) {
    return std::async(std::launch::async, [this, op, remote] {
      auto st = runBatch(init_, seg_, {{op, local_.p, seg_, remote, kTask}});
      return st.empty() ? TransferStatus{} : st[0];
    });
  }
  // The target withdraws its registration and registers the same range
  // again (the application reused the buffer), with new contents.
  void reregister(uint64_t seed) {
    ASSERT_TRUE(target_.unregisterLocalMemory(mem_.p).ok());
    fillPattern(mem_.p, kRegion, seed);
    ASSERT_TRUE(target_.registerLocalMemory(mem_.p, kRegion, "cpu:0", true).ok());
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem_.p); }

  Buffer mem_{kRegion}, local_{kRegion};
  TransferEngine target_, init_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(ShmRegistration, a_read_fails_when_the_target_registers_the_range_again_between_two_slices) {
  fillPattern(mem_.p, kRegion, 1);
  arm(seam::Point::kTurn, base() + kSplit);  // the task's second slice
  auto task = start(OpCode::kRead, base());
  ASSERT_TRUE(waitParked());
  ASSERT_NO_FATAL_FAILURE(reregister(2));
  release();
  TransferStatus st = task.get();
  ASSERT_EQ(st.s, TransferState::kFailed) << "the task completed with bytes of two registrations";
  EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
  EXPECT_NE(st.error.message().find(fmt::format("withdrew [{:#x}, +{})", base(), kRegion)), std::string::npos)
      << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, kSplit);  // the first slice, from the first registration
  EXPECT_EQ(checkPattern(local_.p, kSplit, 1), -1);
  // A task that starts on the new registration completes from it alone.
  auto again = runBatch(init_, seg_, {{OpCode::kRead, local_.p, seg_, base(), kTask}});
  ASSERT_EQ(again[0].s, TransferState::kCompleted) << again[0].error.toString();
  EXPECT_EQ(checkPattern(local_.p, kTask, 2), -1);
}

TEST_F(ShmRegistration, a_write_lands_nothing_in_a_registration_it_did_not_start_on) {
  std::memset(mem_.p, 0, kRegion);
  fillPattern(local_.p, kTask, 3);
  arm(seam::Point::kTurn, base() + kSplit);
  auto task = start(OpCode::kWrite, base());
  ASSERT_TRUE(waitParked());
  ASSERT_NO_FATAL_FAILURE(reregister(4));
  release();
  TransferStatus st = task.get();
  ASSERT_EQ(st.s, TransferState::kFailed) << "the task wrote into a registration it did not start on";
  EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
  EXPECT_NE(st.error.message().find(fmt::format("withdrew [{:#x}, +{})", base(), kRegion)), std::string::npos)
      << st.error.toString();
  // The new registration holds only what its owner put there.
  EXPECT_EQ(checkPattern(mem_.p, kRegion, 4), -1);
}

TEST_F(ShmRegistration, unregister_returns_only_after_a_write_in_flight_into_the_range_ended) {
  std::memset(mem_.p, 0, kRegion);
  fillPattern(local_.p, kTask, 5);
  // The first slice's copy is announced and checked; park before its write.
  arm(seam::Point::kAnnounced, base());
  auto task = start(OpCode::kWrite, base());
  ASSERT_TRUE(waitParked());
  std::vector<char> at_return;  // the range as unregister returned it to the application
  std::atomic<bool> returned{false};
  std::thread unreg([&] {
    EXPECT_TRUE(target_.unregisterLocalMemory(mem_.p).ok());
    at_return.assign(mem_.p, mem_.p + kRegion);
    returned = true;
  });
  // unregister waits for the copy (counted), or — were it not to — returns.
  EXPECT_TRUE(eventually([&] { return returned.load() || counter(target_, "withdrawals_waited") == 1; }));
  EXPECT_FALSE(returned.load()) << "unregisterLocalMemory returned while a write into the range was in flight";
  release();
  unreg.join();
  TransferStatus st = task.get();
  // The write in flight finished before unregister returned; nothing landed after.
  EXPECT_EQ(std::memcmp(at_return.data(), mem_.p, kRegion), 0) << "bytes landed after unregister returned";
  EXPECT_EQ(checkPattern(mem_.p, kSplit, 5), -1) << "the slice in flight was written whole";
  ASSERT_EQ(st.s, TransferState::kFailed) << st.error.toString();  // its second slice found no registration
  EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
  EXPECT_EQ(counter(target_, "withdrawals_waited"), 1u);
}

}  // namespace
}  // namespace hawser::test
