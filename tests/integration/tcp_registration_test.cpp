// tcp and the target's registrations (issue 30): a task is bound to the
// registration it started on. Each request of it (a slice, or a frame of
// many runs) carries the number of the registration the initiator's
// descriptor named (a request of wire version 2, docs/tcp.md "Wire format"),
// and the target serves it only from that one. The target unregistering and
// registering again at the same address between two requests of a task (or
// two frames of a block request) fails the task (kOutOfRange naming the
// withdrawn registration) instead of mixing the bytes of both
// registrations. The interleavings are forced with the target's test seam
// (src/transport/tcp/tcp_testing.h): its serving thread parks when the
// chosen request arrives while the test acts as the target's application.
// The initiator sends one request at a time (tcp.inflight=1), so nothing of
// an earlier request is pinned while one is parked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <future>

#include "common/parking.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "integration/tcp_parts.h"
#include "transport/tcp/tcp_testing.h"

namespace hawser::test {
namespace {

constexpr size_t kRegion = 2u << 20;  // the target's registration
constexpr size_t kSlice = 512u << 10;
constexpr size_t kTask = 2 * kSlice;  // two requests of tcp.slice_size

Parking g_park;
void parkHook(uint64_t remote, uint64_t) { g_park.reached(remote); }

class TcpRegistration : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions to, io;
    to.config = {{"transport", "tcp"}};
    io.config = {{"transport", "tcp"},
                 {"tcp.slice_size", std::to_string(kSlice)},
                 {"tcp.connections", "1"},
                 {"tcp.inflight", "1"},
                 {"tcp.group_bytes", "8K"},
                 {"tcp.timeout_ms", "60000"}};
    ASSERT_TRUE(target_.init("p2p", "target", "127.0.0.1", 0, to).ok());
    ASSERT_TRUE(init_.init("p2p", "initiator", "127.0.0.1", 0, io).ok());
    ASSERT_TRUE(target_.registerLocalMemory(mem_.p, kRegion, "cpu:0", true).ok());
    ASSERT_TRUE(init_.registerLocalMemory(local_.p, kRegion, "cpu:0", false).ok());
    ASSERT_TRUE(init_.openSegment(target_.segmentName(), seg_).ok());
    tcp::testing::on_request.store(parkHook);
  }
  void TearDown() override {
    g_park.release();
    tcp::testing::on_request.store(nullptr);
  }
  // One task of kTask bytes at `remote` (two requests), run to its end.
  TransferStatus runTask(OpCode op, uint64_t remote) {
    auto st = runBatch(init_, seg_, {{op, local_.p, seg_, remote, kTask}});
    return st.empty() ? TransferStatus{} : st[0];
  }
  // The number of the target's registration of its range (what its
  // descriptor publishes).
  uint64_t registration() {
    auto r = detail::EngineAccess::of(target_).registry().find(base());
    return r ? r->seq : 0;
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem_.p); }
  // Runs `transfer` with the target's serving thread parked when the request
  // whose first run is at `at` arrives, registers the target's range again
  // (new contents `seed`) meanwhile, and checks the transfer failed for it:
  // kOutOfRange naming the withdrawn registration.
  template <class Transfer>
  TransferStatus reregisterWhileParked(uint64_t at, uint64_t seed, Transfer transfer) {
    const uint64_t first = registration();
    EXPECT_NE(first, 0u) << "the target publishes no registration number";
    g_park.arm(at);
    std::future<TransferStatus> task = std::async(std::launch::async, transfer);
    EXPECT_TRUE(g_park.waitParked());
    EXPECT_TRUE(target_.unregisterLocalMemory(mem_.p).ok());
    fillPattern(mem_.p, kRegion, seed);
    EXPECT_TRUE(target_.registerLocalMemory(mem_.p, kRegion, "cpu:0", true).ok());
    g_park.release();
    TransferStatus st = task.get();
    EXPECT_EQ(st.s, TransferState::kFailed) << "the transfer used two registrations of one range";
    EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
    const std::string& m = st.error.message();
    EXPECT_NE(m.find(fmt::format("of registration {} [{:#x}, +{})", first, base(), kRegion)), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("registration {} (the one the request is bound to) was withdrawn", first)),
              std::string::npos)
        << m;
    return st;
  }

  void blockRequestCase(OpCode op);

  // Declared before the engines: registered memory outlives them.
  Buffer mem_{kRegion}, local_{kRegion};
  TransferEngine target_, init_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(TcpRegistration, a_read_fails_when_the_target_registers_the_range_again_between_two_requests) {
  fillPattern(mem_.p, kRegion, 1);
  std::memset(local_.p, 0, kRegion);
  // The task's second request finds the range registered again.
  TransferStatus st = reregisterWhileParked(base() + kSlice, 2, [&] { return runTask(OpCode::kRead, base()); });
  EXPECT_EQ(st.transferred_bytes, kSlice);  // the first request, from the first registration
  EXPECT_EQ(checkPattern(local_.p, kSlice, 1), -1);
  EXPECT_EQ(std::count(local_.p + kSlice, local_.p + kTask, 0), static_cast<long>(kSlice))
      << "bytes of the new registration were read into the task";
  // A task made for the new registration (once the initiator's descriptor
  // caught up with it: the target's change notice) completes from it alone.
  EXPECT_TRUE(eventually([&] { return runTask(OpCode::kRead, base()).s == TransferState::kCompleted; }));
  EXPECT_EQ(checkPattern(local_.p, kTask, 2), -1);
}

TEST_F(TcpRegistration, a_write_lands_nothing_in_a_registration_it_did_not_start_on) {
  std::memset(mem_.p, 0, kRegion);
  fillPattern(local_.p, kTask, 3);
  TransferStatus st = reregisterWhileParked(base() + kSlice, 4, [&] { return runTask(OpCode::kWrite, base()); });
  EXPECT_EQ(st.transferred_bytes, kSlice);
  // The new registration holds only what its owner put there.
  EXPECT_EQ(checkPattern(mem_.p, kRegion, 4), -1);
}

// Four runs of 4 KiB as one block request: two frames of two (tcp.group_bytes
// 8K), each bound to the registration; the second frame finds the range
// registered again.
void TcpRegistration::blockRequestCase(OpCode op) {
  constexpr size_t kRun = 4096;
  fillPattern(mem_.p, kRegion, 5);
  fillPattern(local_.p, kRegion, 6);
  std::vector<Block> blocks;
  for (size_t i = 0; i < 4; ++i) blocks.push_back({local_.p + 3 * i * kRun, base() + (10 + 2 * i) * kRun, kRun});
  TransferStatus st = reregisterWhileParked(blocks[2].remote, 7, [&] {
    BatchID b = 0;
    TransferStatus out;
    if (!init_.allocateBatchID(1, b).ok() || !init_.submitBlocks(b, op, seg_, blocks).ok()) return out;
    (void)init_.waitTransfer(b, std::chrono::seconds(60));
    (void)init_.getTransferStatus(b, 0, out);
    (void)init_.freeBatchID(b);
    return out;
  });
  EXPECT_EQ(counter(init_, "tcp", "run_frames"), 2u) << "the runs did not go as two frames";
  EXPECT_NE(st.error.message().find(fmt::format("refused a {} frame of 2 runs", op == OpCode::kRead ? "read" : "write")),
            std::string::npos)
      << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, 2 * kRun) << "the first frame, from the first registration";
  if (op == OpCode::kRead) {
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(checkPattern(blocks[i].local, kRun, 5, blocks[i].remote - base()), -1) << "run " << i;
    for (size_t i = 2; i < 4; ++i)
      EXPECT_EQ(checkPattern(blocks[i].local, kRun, 6, 3 * i * kRun), -1) << "run " << i << " was read";
  } else {
    EXPECT_EQ(checkPattern(mem_.p, kRegion, 7), -1) << "a run landed in the new registration";
  }
}

TEST_F(TcpRegistration, a_block_request_read_fails_when_the_target_registers_the_range_again_between_two_frames) {
  blockRequestCase(OpCode::kRead);
}

TEST_F(TcpRegistration, a_block_request_write_fails_when_the_target_registers_the_range_again_between_two_frames) {
  blockRequestCase(OpCode::kWrite);
}

// A target that publishes wire version 1 (an earlier release, which would
// close the connection on a version-2 request) gets requests bound to no
// registration: served by address, as before. The same target publishing
// version 2 gets them bound.
TEST(TcpRegistrationVersions, a_peer_of_version_1_gets_unbound_requests_and_one_of_version_2_bound_ones) {
  tcp_parts::PartsTarget t(kRegion);
  ASSERT_TRUE(t.status.ok()) << t.status.toString();
  t.publish_seq = true;
  tcp_parts::Initiator in(kRegion, {{"tcp.slice_size", std::to_string(kSlice)},
                                    {"tcp.connections", "1"},
                                    {"tcp.inflight", "1"},
                                    {"tcp.timeout_ms", "60000"}});
  ASSERT_TRUE(in.status.ok()) << in.status.toString();
  tcp::testing::on_request.store(parkHook);
  for (int version : {1, 2}) {
    SCOPED_TRACE(fmt::format("the target publishes version {}", version));
    t.publish_version = version;
    if (in.seg != kInvalidSegment) {
      ASSERT_TRUE(in.engine.closeSegment(in.seg).ok());
    }
    ASSERT_TRUE(in.open(t.name()).ok());
    fillPattern(t.mem.p, kRegion, 11);
    g_park.arm(t.remote(kSlice));
    auto task = std::async(std::launch::async,
                           [&] { return in.run({{OpCode::kRead, in.mem.p, in.seg, t.remote(), kTask}}); });
    ASSERT_TRUE(g_park.waitParked());
    // The range registered again, with new contents.
    Region r;
    ASSERT_TRUE(t.reg.erase(t.remote(), &r).ok());
    fillPattern(t.mem.p, kRegion, 12);
    ASSERT_TRUE(t.reg.insert(r).ok());
    g_park.release();
    const std::vector<TransferStatus> st = task.get();
    ASSERT_EQ(st.size(), 1u);
    if (version == 1) {
      EXPECT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();  // by address: both registrations
      EXPECT_EQ(checkPattern(in.mem.p + kSlice, kSlice, 12, kSlice), -1);
    } else {
      EXPECT_EQ(st[0].s, TransferState::kFailed);
      EXPECT_EQ(st[0].error.code(), Code::kOutOfRange) << st[0].error.toString();
    }
    EXPECT_EQ(checkPattern(in.mem.p, kSlice, 11), -1);
  }
  tcp::testing::on_request.store(nullptr);
}

}  // namespace
}  // namespace hawser::test
