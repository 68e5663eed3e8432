// shm and the target's registrations (issue 30): a task is bound to the
// registration it started on. The target unregistering and registering
// again at the same address between two slices of a task (or two runs of a
// block request) fails the task (kOutOfRange naming the withdrawn range)
// instead of mixing the bytes of both registrations, and
// unregisterLocalMemory does not return while a copy into the range is
// running. The interleavings are forced with the copy
// threads' test seam (src/transport/shm/shm_testing.h): a copy thread parks
// at a chosen point while the test acts as the target.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <future>

#include "common/parking.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "hawser/host_memory.h"
#include "transport/shm/shm_testing.h"

namespace hawser::test {
namespace {

namespace seam = shm::testing;

constexpr size_t kRegion = 2u << 20;   // the target's registration
constexpr size_t kTask = 1u << 20;     // two slices of shm.split_bytes
constexpr size_t kSplit = 512u << 10;

// The copy whose first run starts at the armed address parks at the armed point.
Parking g_park;
void parkHook(seam::Point point, uint64_t remote, uint64_t) { g_park.reached(remote, static_cast<int>(point)); }

class ShmRegistration : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions io;
    // The copy threads, slices of kSplit (a submit copied by its own thread,
    // shm.inline_bytes, is not cut: no "between two slices").
    io.config = {{"transport", "shm"},
                 {"shm.threads", "1"},
                 {"shm.split_bytes", std::to_string(kSplit)},
                 {"shm.inline_bytes", "0"}};
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
  void arm(seam::Point point, uint64_t at) { g_park.arm(at, static_cast<int>(point)); }
  bool waitParked() { return g_park.waitParked(); }
  void release() { g_park.release(); }
  // One task of kTask bytes at `remote` (two slices), run to its end. Its
  // end is polled for, not waited for: a waiting thread copies queued
  // slices of its batch itself (SubBatch::assist), and these cases need
  // both slices copied by the one copy thread, in order.
  TransferStatus runTask(OpCode op, uint64_t remote) {
    TransferStatus st;
    BatchID b = 0;
    if (!init_.allocateBatchID(1, b).ok()) return st;
    if (init_.submitTransfer(b, {{op, local_.p, seg_, remote, kTask}}).ok())
      (void)eventually([&] { return init_.getTransferStatus(b, 0, st).ok() && isTerminal(st.s); },
                       std::chrono::seconds(60));
    (void)init_.freeBatchID(b);
    return st;
  }
  std::future<TransferStatus> start(OpCode op, uint64_t remote) {
    return std::async(std::launch::async, [this, op, remote] { return runTask(op, remote); });
  }
  // The target withdraws its registration and registers the same range
  // again (the application reused the buffer), with new contents.
  void reregister(uint64_t seed) {
    EXPECT_TRUE(target_.unregisterLocalMemory(mem_.p).ok());
    fillPattern(mem_.p, kRegion, seed);
    EXPECT_TRUE(target_.registerLocalMemory(mem_.p, kRegion, "cpu:0", true).ok());
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem_.p); }
  // Runs `transfer` with the copy of the target's `at` parked at its turn,
  // re-registers the target's range (new contents `seed`) meanwhile, and
  // checks the transfer failed for it: kOutOfRange naming the withdrawn range.
  template <class Transfer>
  TransferStatus reregisterWhileParked(uint64_t at, uint64_t seed, Transfer transfer) {
    arm(seam::Point::kTurn, at);
    std::future<TransferStatus> task = std::async(std::launch::async, transfer);
    EXPECT_TRUE(waitParked());
    reregister(seed);
    release();
    TransferStatus st = task.get();
    EXPECT_EQ(st.s, TransferState::kFailed) << "the transfer used two registrations of one range";
    EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
    EXPECT_NE(st.error.message().find(fmt::format("withdrew [{:#x}, +{})", base(), kRegion)), std::string::npos)
        << st.error.toString();
    return st;
  }

  Buffer mem_{kRegion}, local_{kRegion};
  TransferEngine target_, init_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(ShmRegistration, a_read_fails_when_the_target_registers_the_range_again_between_two_slices) {
  fillPattern(mem_.p, kRegion, 1);
  // The task's second slice finds the range registered again.
  TransferStatus st = reregisterWhileParked(base() + kSplit, 2, [&] { return runTask(OpCode::kRead, base()); });
  EXPECT_EQ(st.transferred_bytes, kSplit);  // the first slice, from the first registration
  EXPECT_EQ(checkPattern(local_.p, kSplit, 1), -1);
  // A task made for the new registration (once the initiator's descriptor
  // caught up with it: the target's change notice) completes from it alone.
  EXPECT_TRUE(eventually([&] { return runTask(OpCode::kRead, base()).s == TransferState::kCompleted; }));
  EXPECT_EQ(checkPattern(local_.p, kTask, 2), -1);
}

TEST_F(ShmRegistration, a_block_request_fails_when_the_target_registers_the_range_again_between_two_runs) {
  // Two runs of one window (a block request: no task per run), a copy each;
  // the second one finds the range registered again.
  fillPattern(mem_.p, kRegion, 7);
  const std::vector<Block> blocks = {{local_.p, base() + kSplit, kSplit}, {local_.p + kSplit, base(), kSplit}};
  reregisterWhileParked(base(), 8, [&] {
    BatchID b = 0;
    TransferStatus st;
    if (!init_.allocateBatchID(1, b).ok() || !init_.submitBlocks(b, OpCode::kRead, seg_, blocks).ok()) return st;
    (void)eventually([&] { return init_.getTransferStatus(b, 0, st).ok() && isTerminal(st.s); },
                     std::chrono::seconds(30));  // polled: see runTask
    (void)init_.freeBatchID(b);
    return st;
  });
  EXPECT_EQ(checkPattern(local_.p, kSplit, 7, kSplit), -1) << "the first run, from the first registration";
}

TEST_F(ShmRegistration, a_write_lands_nothing_in_a_registration_it_did_not_start_on) {
  std::memset(mem_.p, 0, kRegion);
  fillPattern(local_.p, kTask, 3);
  reregisterWhileParked(base() + kSplit, 4, [&] { return runTask(OpCode::kWrite, base()); });
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
  auto waited = [&] { return counter(target_, "shm", "withdrawals_waited"); };
  EXPECT_TRUE(eventually([&] { return returned.load() || waited() == 1; }));
  EXPECT_FALSE(returned.load()) << "unregisterLocalMemory returned while a write into the range was in flight";
  release();
  unreg.join();
  TransferStatus st = task.get();
  // The write in flight finished before unregister returned; nothing landed after.
  EXPECT_EQ(std::memcmp(at_return.data(), mem_.p, kRegion), 0) << "bytes landed after unregister returned";
  EXPECT_EQ(checkPattern(mem_.p, kSplit, 5), -1) << "the slice in flight was written whole";
  ASSERT_EQ(st.s, TransferState::kFailed) << st.error.toString();  // its second slice found no registration
  EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
  EXPECT_EQ(waited(), 1u);
}

// transferSync moved at once (Transport::moveDirect, memory the target
// shares: allocateHostMemory) checks the registration before its first
// byte, as a batch's copy does. Registered again at the copy's turn, the
// read goes as a batch, whose copy fails it: nothing read, kOutOfRange
// naming the withdrawn range. A transfer made for the new registration is
// moved at once again.
TEST(ShmRegistrationDirect, a_read_moved_at_once_fails_when_the_target_registers_the_range_again_at_its_turn) {
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0).ok());
  if (!hasTransport(target, "shm")) GTEST_SKIP() << "shm is not installed here (no cross-memory attach)";
  EngineOptions io;
  io.config = {{"transport", "shm"}};
  ASSERT_TRUE(init.init("p2p", "initiator", "127.0.0.1", 0, io).ok());
  void* shared = nullptr;
  ASSERT_TRUE(allocateHostMemory(kRegion, &shared).ok());
  char* const mem = static_cast<char*>(shared);
  const uint64_t base = reinterpret_cast<uint64_t>(mem);
  fillPattern(mem, kRegion, 11);
  ASSERT_TRUE(target.registerLocalMemory(mem, kRegion, "cpu:0", true).ok());
  Buffer local(kRegion);
  std::memset(local.p, 0, kRegion);
  ASSERT_TRUE(init.registerLocalMemory(local.p, kRegion, "cpu:0", false).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  constexpr size_t kRead = 64u << 10;
  const std::vector<TransferRequest> reqs = {{OpCode::kRead, local.p, seg, base, kRead}};
  seam::on_copy.store(parkHook);
  g_park.arm(base, static_cast<int>(seam::Point::kTurn));
  auto read = std::async(std::launch::async, [&] { return init.transferSync(reqs, std::chrono::seconds(20)); });
  ASSERT_TRUE(g_park.waitParked());
  ASSERT_TRUE(target.unregisterLocalMemory(mem).ok());
  fillPattern(mem, kRegion, 12);
  ASSERT_TRUE(target.registerLocalMemory(mem, kRegion, "cpu:0", true).ok());
  g_park.release();
  const Status s = read.get();
  seam::on_copy.store(nullptr);
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find(fmt::format("withdrew [{:#x}, +{})", base, kRegion)), std::string::npos) << s.toString();
  EXPECT_TRUE(std::all_of(local.p, local.p + kRead, [](char c) { return c == 0; })) << "bytes of either registration read";
  EXPECT_EQ(counter(init, "shm", "direct_requests"), 0u);
  // Once the initiator's descriptor caught up (the target's change notice),
  // the read is moved at once, from the new registration.
  EXPECT_TRUE(eventually([&] { return init.transferSync(reqs, std::chrono::seconds(20)).ok(); }));
  EXPECT_EQ(checkPattern(local.p, kRead, 12), -1);
  EXPECT_EQ(counter(init, "shm", "direct_requests"), 1u);
  ASSERT_TRUE(init.closeSegment(seg).ok());
  ASSERT_TRUE(target.unregisterLocalMemory(mem).ok());
  ASSERT_TRUE(freeHostMemory(shared).ok());
}

}  // namespace
}  // namespace hawser::test
