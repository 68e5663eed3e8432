// The engine's API contract: one exact error code per bad input, checked
// before any byte moves; all-or-nothing registration and submission; and
// recycled batches that never use a closed view.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/engine_pair.h"

using namespace hawser;
using namespace hawser::test;

class EngineApi : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString(); }
  EnginePair p;
};

TEST(EngineInit, calls_before_init_are_refused) {
  TransferEngine e;
  char buf[64];
  EXPECT_EQ(e.registerLocalMemory(buf, sizeof(buf)).code(), Code::kInvalidArgument);
  BatchID b;
  EXPECT_EQ(e.allocateBatchID(4, b).code(), Code::kInvalidArgument);
}

TEST(EngineInit, bad_metadata_uri_is_invalid_argument) {
  TransferEngine e;
  Status s = e.init("zookeeper://x:1", "n", "127.0.0.1", 0);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("zookeeper://x:1"), std::string::npos);
}

TEST(EngineInit, rpc_port_zero_picks_a_free_port_readable_afterwards) {
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "n", "127.0.0.1", 0).ok());
  EXPECT_NE(e.rpcPort(), 0);
  EXPECT_EQ(e.segmentName(), "127.0.0.1:" + std::to_string(e.rpcPort()));
  EXPECT_EQ(e.init("p2p", "n", "127.0.0.1", 0).code(), Code::kInvalidArgument);  // twice
}

TEST(EngineInit, port_in_use_is_unavailable) {
  TransferEngine a, b;
  ASSERT_TRUE(a.init("p2p", "a", "127.0.0.1", 0).ok());
  EXPECT_EQ(b.init("p2p", "b", "127.0.0.1", a.rpcPort()).code(), Code::kUnavailable);
}

TEST_F(EngineApi, zero_length_registration_is_invalid_argument) {
  Buffer b(4096);
  EXPECT_EQ(p.init.registerLocalMemory(b.p, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(p.init.registerLocalMemory(nullptr, 10).code(), Code::kInvalidArgument);
}

TEST_F(EngineApi, overlapping_registration_is_address_overlapped) {
  EXPECT_EQ(p.init.registerLocalMemory(p.local(100), 10).code(), Code::kAddressOverlapped);
  EXPECT_EQ(p.init.registerLocalMemory(p.local() - 10, 11).code(), Code::kAddressOverlapped);
  EXPECT_EQ(p.init.registerLocalMemory(p.local(), p.local_mem.n).code(), Code::kAddressOverlapped);
  // Adjacent is fine.
  Buffer b(8192);
  EXPECT_TRUE(p.init.registerLocalMemory(b.p, 4096).ok());
  EXPECT_TRUE(p.init.registerLocalMemory(b.p + 4096, 4096).ok());
}

TEST_F(EngineApi, batch_registration_is_all_or_nothing) {
  Buffer b(3 * 4096);
  // Third entry overlaps the first: nothing may stay registered.
  Status s = p.init.registerLocalMemoryBatch(
      {{b.p, 4096, "cpu:0", true}, {b.p + 4096, 4096, "cpu:0", true}, {b.p + 100, 10, "cpu:0", true}});
  EXPECT_EQ(s.code(), Code::kAddressOverlapped);
  EXPECT_NE(s.message().find("buffers[2]"), std::string::npos) << s.message();
  EXPECT_EQ(p.init.unregisterLocalMemory(b.p).code(), Code::kNotRegistered);
  s = p.init.registerLocalMemoryBatch({{b.p, 4096, "cpu:0", true}, {b.p + 4096, 0, "cpu:0", true}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(p.init.unregisterLocalMemory(b.p).code(), Code::kNotRegistered);
  ASSERT_TRUE(p.init.registerLocalMemoryBatch({{b.p, 4096, "cpu:0", true}, {b.p + 8192, 4096, "cpu:0", true}}).ok());
  EXPECT_TRUE(p.init.unregisterLocalMemoryBatch({b.p, b.p + 8192}).ok());
}

TEST_F(EngineApi, unregister_of_unknown_address_is_not_registered) {
  char x;
  EXPECT_EQ(p.init.unregisterLocalMemory(&x).code(), Code::kNotRegistered);
  EXPECT_EQ(p.init.unregisterLocalMemory(p.local(1)).code(), Code::kNotRegistered);  // not the start
}

TEST_F(EngineApi, unregistered_local_buffer_is_not_registered) {
  Buffer other(4096);
  Status s;
  runBatch(p.init, p.seg, {{OpCode::kRead, other.p, p.seg, p.remote(), 4096}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kNotRegistered);
  // Starts inside, ends outside the local region.
  runBatch(p.init, p.seg, {{OpCode::kRead, p.local(p.local_mem.n - 10), p.seg, p.remote(), 20}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kNotRegistered);
}

TEST_F(EngineApi, remote_range_outside_any_buffer_is_out_of_range) {
  Status s;
  runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, p.remote(p.target_mem.n - 10), 20}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  runBatch(p.init, p.seg, {{OpCode::kWrite, p.local(), p.seg, 0x10, 20}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  runBatch(p.init, p.seg, {{OpCode::kWrite, p.local(), p.seg, UINT64_MAX - 4, 20}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
}

TEST_F(EngineApi, memory_registered_by_the_target_later_becomes_reachable) {
  Buffer more(8192);
  uint64_t addr = reinterpret_cast<uint64_t>(more.p);
  Status s;
  runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, addr, 100}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  ASSERT_TRUE(p.target.registerLocalMemory(more.p, more.n).ok());
  fillPattern(more.p, 100, 7);
  auto st = runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, addr, 100}}, 5000, &s);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(st[0].s, TransferState::kCompleted);
  EXPECT_EQ(checkPattern(p.local(), 100, 7), -1);
  ASSERT_TRUE(p.target.unregisterLocalMemory(more.p).ok());
  // The owner tells the peer its descriptor changed; the next submit to the
  // unregistered range is refused before any byte moves.
  EXPECT_TRUE(eventually([&] {
    runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, addr, 100}}, 1000, &s);
    return !s.ok();
  })) << "the unregistered range is still accepted";
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
}

TEST_F(EngineApi, segment_buffers_come_in_the_owners_registration_order) {
  // Registered at decreasing addresses: the peer sees them first-registered first.
  Buffer pool(3 * 8192);
  char* third = pool.p;
  char* second = pool.p + 8192;
  char* first = pool.p + 2 * 8192;
  ASSERT_TRUE(p.target.registerLocalMemory(first, 4096).ok());
  ASSERT_TRUE(p.target.registerLocalMemory(second, 4096).ok());
  ASSERT_TRUE(p.target.registerLocalMemory(third, 4096).ok());
  auto addrs = [&] {
    std::vector<SegmentBuffer> bufs;
    Status s = p.init.segmentBuffers(p.seg, bufs);
    EXPECT_TRUE(s.ok()) << s.toString();
    std::vector<uint64_t> out;
    for (auto& b : bufs) out.push_back(b.addr);
    return out;
  };
  auto a = [](char* x) { return reinterpret_cast<uint64_t>(x); };
  // The fixture's own region was registered before these three.
  EXPECT_EQ(addrs(), (std::vector<uint64_t>{p.remote(), a(first), a(second), a(third)}));
  ASSERT_TRUE(p.target.unregisterLocalMemory(p.target_mem.p).ok());
  ASSERT_TRUE(p.target.unregisterLocalMemory(second).ok());
  ASSERT_TRUE(p.target.registerLocalMemory(second, 4096).ok());  // now the latest
  EXPECT_EQ(addrs(), (std::vector<uint64_t>{a(first), a(third), a(second)}));
  for (char* x : {first, second, third}) ASSERT_TRUE(p.target.unregisterLocalMemory(x).ok());
}

TEST_F(EngineApi, probe_segment_asks_the_peer_now) {
  EXPECT_TRUE(p.init.probeSegment(p.target.segmentName()).ok());
  EXPECT_EQ(p.init.probeSegment("127.0.0.1:1").code(), Code::kSegmentNotFound);  // nobody listens there
  EXPECT_EQ(p.init.probeSegment("").code(), Code::kInvalidArgument);
  TransferEngine idle;
  EXPECT_EQ(idle.probeSegment(p.target.segmentName()).code(), Code::kInvalidArgument);  // not initialized
  // A segment open (and cached) on the initiator: once its owner stopped,
  // the probe fails where openSegment still answers from the cache.
  auto owner = std::make_unique<TransferEngine>();
  ASSERT_TRUE(owner->init("p2p", "owner", "127.0.0.1", 0).ok());
  const std::string name = owner->segmentName();
  SegmentID id;
  ASSERT_TRUE(p.init.openSegment(name, id).ok());
  EXPECT_TRUE(p.init.probeSegment(name).ok());
  owner.reset();
  EXPECT_EQ(p.init.probeSegment(name).code(), Code::kSegmentNotFound);
  EXPECT_TRUE(p.init.openSegment(name, id).ok());
}

TEST_F(EngineApi, unknown_segment_is_segment_not_found) {
  Status s;
  runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), 4242, p.remote(), 20}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kSegmentNotFound);
  SegmentID id;
  // Nobody listens there (port 1 is never ours).
  EXPECT_EQ(p.init.openSegment("127.0.0.1:1", id).code(), Code::kSegmentNotFound);
  EXPECT_EQ(p.init.openSegment("no-such-segment", id).code(), Code::kSegmentNotFound);
  EXPECT_EQ(p.init.openSegment("", id).code(), Code::kInvalidArgument);
  EXPECT_EQ(p.init.closeSegment(4242).code(), Code::kSegmentNotFound);
}

TEST_F(EngineApi, forged_batch_id_is_invalid_batch) {
  TransferStatus st;
  EXPECT_EQ(p.init.submitTransfer(0xdeadbeef, {{OpCode::kRead, p.local(), p.seg, p.remote(), 1}}).code(),
            Code::kInvalidBatch);
  EXPECT_EQ(p.init.getTransferStatus(0xdeadbeef, 0, st).code(), Code::kInvalidBatch);
  EXPECT_EQ(p.init.getBatchTransferStatus(0, st).code(), Code::kInvalidBatch);
  EXPECT_EQ(p.init.waitTransfer(77777, std::chrono::milliseconds(1)).code(), Code::kInvalidBatch);
  EXPECT_EQ(p.init.freeBatchID(reinterpret_cast<BatchID>(&st)).code(), Code::kInvalidBatch);
}

TEST_F(EngineApi, double_free_is_invalid_batch) {
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(2, b).ok());
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
  EXPECT_EQ(p.init.freeBatchID(b).code(), Code::kInvalidBatch);
  TransferStatus st;
  EXPECT_EQ(p.init.getTransferStatus(b, 0, st).code(), Code::kInvalidBatch);  // stale
}

TEST_F(EngineApi, task_capacity_exceeded_leaves_the_batch_as_it_was) {
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(2, b).ok());
  std::vector<TransferRequest> three(3, TransferRequest{OpCode::kRead, p.local(), p.seg, p.remote(), 16});
  EXPECT_EQ(p.init.submitTransfer(b, three).code(), Code::kCapacityExceeded);
  TransferStatus st;
  EXPECT_EQ(p.init.getTransferStatus(b, 0, st).code(), Code::kInvalidArgument);  // no task exists
  ASSERT_TRUE(p.init.submitTransfer(b, {three[0], three[1]}).ok());
  EXPECT_EQ(p.init.submitTransfer(b, {three[2]}).code(), Code::kCapacityExceeded);
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
  EXPECT_EQ(p.init.allocateBatchID(0, b).code(), Code::kInvalidArgument);
}

TEST(EngineCapacity, slice_capacity_exceeded_is_capacity_exceeded) {
  ::setenv("HAWSER_BATCH_SLICES_PER_TASK", "4", 1);
  EnginePair p(1 << 20, 1 << 20, true, 4096);
  ::unsetenv("HAWSER_BATCH_SLICES_PER_TASK");
  ASSERT_TRUE(p.setup_status.ok());
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());  // 1 task, 4 slices
  Status s = p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 5 * 4096}});
  EXPECT_EQ(s.code(), Code::kCapacityExceeded);
  EXPECT_NE(s.message().find("slices"), std::string::npos) << s.message();
  EXPECT_EQ(p.fake_init->slicesExecuted(), 0u);
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 4 * 4096}}).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(EngineApi, rejected_submission_moves_no_byte) {
  fillPattern(p.local(), 8192, 1);
  std::memset(p.target_mem.p, 0, 8192);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(2, b).ok());
  // First request valid, second bad: nothing may be written.
  Status s = p.init.submitTransfer(b, {{OpCode::kWrite, p.local(), p.seg, p.remote(), 4096},
                                       {OpCode::kWrite, p.local(4096), p.seg, p.remote(p.target_mem.n), 4096}});
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("requests[1]"), std::string::npos) << s.message();
  // A valid request after it: the fake transport runs slices in order, so
  // once this one is done, anything the rejected list had queued has run.
  fillPattern(p.local(8192), 4096, 2);
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kWrite, p.local(8192), p.seg, p.remote(8192), 4096}}).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  TransferStatus st;
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, st).ok());  // the valid request is task 0
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(p.init.getTransferStatus(b, 1, st).code(), Code::kInvalidArgument);  // and the only task
  EXPECT_EQ(p.fake_init->slicesExecuted(), 1u);
  EXPECT_EQ(checksum(p.target_mem.p, 8192), checksum(std::string(8192, '\0').data(), 8192));
  EXPECT_EQ(checkPattern(p.target_mem.p + 8192, 4096, 2), -1);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(EngineApi, zero_length_and_null_requests_are_invalid_argument) {
  Status s;
  runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, p.remote(), 0}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  runBatch(p.init, p.seg, {{OpCode::kRead, nullptr, p.seg, p.remote(), 10}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  runBatch(p.init, p.seg, {{static_cast<OpCode>(9), p.local(), p.seg, p.remote(), 10}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

TEST_F(EngineApi, free_with_unfinished_work_is_batch_busy) {
  p.fake_init->hold(true);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 4096}}).ok());
  EXPECT_EQ(p.init.freeBatchID(b).code(), Code::kBatchBusy);
  p.fake_init->hold(false);
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(EngineApi, second_submit_never_resends_earlier_slices) {
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(4, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 3 * 4096}}).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  EXPECT_EQ(p.fake_init->slicesExecuted(), 3u);
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 2 * 4096}}).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  EXPECT_EQ(p.fake_init->slicesExecuted(), 5u);
  TransferStatus st;
  ASSERT_TRUE(p.init.getTransferStatus(b, 1, st).ok());  // task ids continue
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(st.transferred_bytes, 2u * 4096);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(EngineApi, cancel_turns_queued_work_canceled) {
  p.fake_init->hold(true);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 4096}}).ok());
  ASSERT_TRUE(p.init.cancelTransfer(b).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(5)).ok());
  TransferStatus st;
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCanceled);
  EXPECT_EQ(st.transferred_bytes, 0u);
  p.fake_init->hold(false);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(EngineApi, read_and_write_move_verified_bytes_at_unaligned_addresses) {
  for (size_t len : {1ul, 7ul, 4095ul, 4097ul, 65536ul + 3}) {
    fillPattern(p.target_mem.p + 13, len, len);
    auto st = runBatch(p.init, p.seg, {{OpCode::kRead, p.local(5), p.seg, p.remote(13), len}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << len;
    EXPECT_EQ(st[0].transferred_bytes, len);
    EXPECT_EQ(checkPattern(p.local(5), len, len), -1) << len;
    fillPattern(p.local(3), len, len + 1);
    st = runBatch(p.init, p.seg, {{OpCode::kWrite, p.local(3), p.seg, p.remote(101), len}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << len;
    EXPECT_EQ(checkPattern(p.target_mem.p + 101, len, len + 1), -1) << len;
  }
}

// A thread keeps its submits' request layout from one to the next (at most
// 1024 entries of it): a submit of many requests, a refused one and a small
// one after them each move exactly their bytes, whatever the one before left.
TEST_F(EngineApi, submits_of_many_then_few_requests_on_one_thread_move_exactly_their_bytes) {
  constexpr size_t kMany = 2000, kLen = 256;
  fillPattern(p.target_mem.p, kMany * kLen, 41);
  std::vector<TransferRequest> many;
  for (size_t i = 0; i < kMany; ++i)
    many.push_back({OpCode::kRead, p.local(i * kLen), p.seg, p.remote(i * kLen), kLen});
  std::vector<TransferStatus> st;
  ASSERT_TRUE(p.init.transferSync(many, std::chrono::seconds(20), &st).ok());
  ASSERT_EQ(st.size(), kMany);
  for (size_t i = 0; i < kMany; ++i) ASSERT_EQ(st[i].transferred_bytes, kLen) << i;
  EXPECT_EQ(checkPattern(p.local(), kMany * kLen, 41), -1);

  // Refused at its third request: nothing moves.
  std::memset(p.local(), 0, 4 * kLen);
  Status refused = p.init.transferSync({{OpCode::kRead, p.local(), p.seg, p.remote(), kLen},
                                        {OpCode::kRead, p.local(kLen), p.seg, p.remote(kLen), kLen},
                                        {OpCode::kRead, p.local(2 * kLen), p.seg, p.remote(2 * kLen), 0}},
                                       std::chrono::seconds(20));
  EXPECT_EQ(refused.code(), Code::kInvalidArgument) << refused.toString();
  EXPECT_NE(refused.message().find("requests[2]"), std::string::npos) << refused.message();
  for (size_t i = 0; i < 4 * kLen; ++i) ASSERT_EQ(p.local()[i], 0) << "a refused submit moved byte " << i;

  // A few, written this time, after both.
  fillPattern(p.local(), 3 * kLen, 42);
  ASSERT_TRUE(p.init.transferSync({{OpCode::kWrite, p.local(), p.seg, p.remote(kLen), kLen},
                                   {OpCode::kWrite, p.local(kLen), p.seg, p.remote(2 * kLen), 2 * kLen}},
                                  std::chrono::seconds(20), &st).ok());
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[1].transferred_bytes, 2 * kLen);
  EXPECT_EQ(checkPattern(p.target_mem.p + kLen, 3 * kLen, 42), -1);
  EXPECT_EQ(checkPattern(p.target_mem.p, kLen, 41), -1) << "the first block was not to be written";
}

// Freed batches are recycled with the views and regions their submits
// resolved (batch.recycle). Threads transfer through them while the
// segment is closed and opened again under a new id and other memory is
// registered and unregistered: every transfer moves its bytes, or fails
// because its segment id was closed (kSegmentNotFound); none uses a closed
// view. Under TSan: the recycled batches' views and regions are read
// without a lock.
TEST_F(EngineApi, transfers_through_recycled_batches_while_the_segment_is_reopened_and_memory_changes) {
  fillPattern(p.target_mem.p, p.target_mem.n, 31);
  const std::string name = p.target.segmentName();
  std::atomic<SegmentID> seg{p.seg};
  std::atomic<SegmentID> closed_up_to{kInvalidSegment};  // ids grow: every id up to this one is closed
  std::atomic<bool> stop{false};
  std::atomic<int> moved{0}, closed{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      char* const mine = p.local(t * 65536);
      for (uint64_t k = 0; !stop.load(); ++k) {
        const SegmentID id = seg.load();
        const bool was_closed = closed_up_to.load() >= id;  // before the transfer began
        const uint64_t off = (k * 4096 + t * 512) % (p.target_mem.n - 8192);
        Status s = p.init.transferSync({{OpCode::kRead, mine, id, p.remote(off), 4096},
                                        {OpCode::kRead, mine + 4096, id, p.remote(off + 4096), 4096}},
                                       std::chrono::seconds(20));
        if (s.ok()) {
          ASSERT_FALSE(was_closed) << "segment " << id << " was closed before the transfer, which used its view";
          ASSERT_EQ(checkPattern(mine, 8192, 31, off), -1) << "segment " << id << " at " << off;
          ++moved;
        } else {
          ASSERT_EQ(s.code(), Code::kSegmentNotFound) << s.toString();
          ++closed;
        }
      }
    });
  Buffer other(8192);
  for (int i = 0; i < 50; ++i) {
    SegmentID next = kInvalidSegment;
    const SegmentID old = seg.load();
    ASSERT_TRUE(p.init.closeSegment(old).ok());
    closed_up_to.store(old);
    ASSERT_TRUE(p.init.openSegment(name, next).ok());
    ASSERT_GT(next, old);
    seg.store(next);
    ASSERT_TRUE(p.init.registerLocalMemory(other.p, other.n).ok());
    ASSERT_TRUE(p.init.unregisterLocalMemory(other.p).ok());
    const int before = moved.load();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (moved.load() < before + 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  stop = true;
  for (auto& t : threads) t.join();
  p.seg = seg.load();
  EXPECT_GE(moved.load(), 150);
}
