// shm copies a submit of up to shm.inline_bytes on the submitting thread
// (issue 29 item 2): no hand-off to the copy threads, one slice per request,
// the task complete when submit returns. Larger submits, and every submit
// with shm.inline_bytes 0, go to the copy threads, cut into slices of
// shm.split_bytes. Each case checks the bytes, the counters that say which
// path ran, and the thread that copied (the copy threads' test seam,
// shm_testing.h, reports it).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "common/parking.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "transport/shm/shm_testing.h"

namespace hawser::test {
namespace {

namespace seam = shm::testing;

constexpr uint64_t kSeed = 4242;
constexpr size_t kTarget = 32u << 20;

// The threads that made the copies since clear().
struct Copiers {
  std::mutex mu;
  std::set<std::thread::id> ids;
  void clear() {
    std::lock_guard lk(mu);
    ids.clear();
  }
  std::set<std::thread::id> get() {
    std::lock_guard lk(mu);
    return ids;
  }
} g_copiers;
void noteCopier(seam::Point point, uint64_t, uint64_t) {
  if (point != seam::Point::kTurn) return;
  std::lock_guard lk(g_copiers.mu);
  g_copiers.ids.insert(std::this_thread::get_id());
}
// Where a copy thread is held (a_thread_waiting_for_its_batch...).
Parking g_park;
void noteAndPark(seam::Point point, uint64_t remote, uint64_t len) {
  g_park.reached(remote, static_cast<int>(point));
  noteCopier(point, remote, len);
}

// A `hawser serve` (`host_memory`: shared or private), an engine with
// `config` that opened it, and 16 MiB of local memory.
class ShmInline : public ::testing::TestWithParam<const char*> {
 protected:
  void start(std::map<std::string, std::string> config = {}) {
    ASSERT_TRUE(serve_.start({"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(kTarget), "--fill-seed",
                              std::to_string(kSeed), "--host-memory", GetParam()}));
    std::string seg = serve_.waitFor("segment: ", 20000);
    ASSERT_FALSE(seg.empty()) << "hawser serve did not start";
    ASSERT_FALSE(serve_.waitFor("ready", 20000).empty());
    EngineOptions o;
    o.config = std::move(config);
    o.config["transport"] = "shm";
    o.config.emplace("shm.threads", "2");  // unless the case says
    ASSERT_TRUE(e_.init("p2p", "client", "127.0.0.1", 0, o).ok());
    if (!hasTransport(e_, "shm")) GTEST_SKIP() << "shm is not installed here";
    ASSERT_TRUE(e_.openSegment(seg.substr(9), seg_).ok());
    std::vector<SegmentBuffer> bufs;
    ASSERT_TRUE(e_.segmentBuffers(seg_, bufs).ok());
    ASSERT_EQ(bufs.size(), 1u);
    base_ = bufs[0].addr;
    ASSERT_TRUE(e_.registerLocalMemory(local_.p, local_.n, "cpu:0", false).ok());
    seam::on_copy.store(noteCopier);
  }
  void TearDown() override {
    g_park.release();
    seam::on_copy.store(nullptr);
  }
  bool mapped() const { return std::string(GetParam()) == "shared"; }
  uint64_t count(const char* name) { return counter(e_, "shm", name); }
  // `n` requests of `block` bytes: local block i <-> the target's block
  // n - 1 - i (from +1 MiB), one batch.
  // With poll_, the batch's end is polled for, not waited for: a waiting
  // thread copies queued slices of its batch itself (SubBatch::assist).
  std::vector<TransferStatus> batch(OpCode op, size_t n, size_t block) {
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < n; ++i)
      reqs.push_back({op, local_.p + i * block, seg_, base_ + (1u << 20) + (n - 1 - i) * block, block});
    if (!poll_) return runBatch(e_, seg_, reqs);
    std::vector<TransferStatus> out(n);
    BatchID b = 0;
    EXPECT_TRUE(e_.allocateBatchID(n, b).ok());
    EXPECT_TRUE(e_.submitTransfer(b, reqs).ok());
    TransferStatus agg;
    EXPECT_TRUE(eventually([&] { return e_.getBatchTransferStatus(b, agg).ok() && isTerminal(agg.s); }))
        << stateName(agg.s);
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(e_.getTransferStatus(b, i, out[i]).ok());
    EXPECT_TRUE(e_.freeBatchID(b).ok());
    return out;
  }
  // Reads `n` blocks and checks them; writes another pattern there and
  // reads it back: three batches, every byte checked.
  void readWriteCheck(size_t n, size_t block) {
    std::memset(local_.p, 0, n * block);
    for (const TransferStatus& st : batch(OpCode::kRead, n, block))
      ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(checkPattern(local_.p + i * block, block, kSeed, (1u << 20) + (n - 1 - i) * block), -1) << i;
    fillPattern(local_.p, n * block, kSeed + 1);
    for (const TransferStatus& st : batch(OpCode::kWrite, n, block))
      ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    std::memset(local_.p, 0, n * block);
    for (const TransferStatus& st : batch(OpCode::kRead, n, block))
      ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    EXPECT_EQ(checkPattern(local_.p, n * block, kSeed + 1), -1) << "the written blocks, read back";
  }

  // Parks the only copy thread (shm.threads 1) on another batch: 2 MiB read
  // into local +12 MiB from the target's +24 MiB. Returns that batch.
  BatchID holdTheCopyThread() {
    seam::on_copy.store(noteAndPark);
    g_park.arm(base_ + (24u << 20), static_cast<int>(seam::Point::kTurn));
    BatchID other = 0;
    EXPECT_TRUE(e_.allocateBatchID(1, other).ok());
    EXPECT_TRUE(
        e_.submitTransfer(other, {{OpCode::kRead, local_.p + (12u << 20), seg_, base_ + (24u << 20), 2u << 20}}).ok());
    EXPECT_TRUE(g_park.waitParked()) << "the copy thread did not take the other batch";
    return other;
  }
  // Waits for batch `b` while the copy thread is held; what the wait saw
  // (the copiers, waiter_slices) is taken before the held thread goes on.
  struct Waited {
    Status wait;
    TransferStatus status;
    std::set<std::thread::id> copiers;
    uint64_t waiter_slices = 0;
  };
  Waited waitWhileHeld(BatchID b) {
    Waited r;
    r.wait = e_.waitTransfer(b, std::chrono::seconds(20));
    r.copiers = g_copiers.get();
    r.waiter_slices = count("waiter_slices");
    g_park.release();
    EXPECT_TRUE(e_.getBatchTransferStatus(b, r.status).ok());
    EXPECT_TRUE(e_.freeBatchID(b).ok());
    return r;
  }
  // `n` blocks of `block` bytes: local block i <-> the target's block 2n - 2i
  // (scattered, in reverse); the local ones zeroed.
  // A batch of one block request reading `n` blocks of `block` bytes,
  // scattered in reverse at the target, into zeroed local memory; 0 (with
  // a failure recorded) when it was refused.
  BatchID submitScattered(size_t n, size_t block) {
    std::vector<Block> blocks;
    for (size_t i = 0; i < n; ++i) blocks.push_back({local_.p + i * block, base_ + (2 * n - 2 * i) * block, block});
    std::memset(local_.p, 0, n * block);
    BatchID b = 0;
    EXPECT_TRUE(e_.allocateBatchID(1, b).ok());
    Status s = e_.submitBlocks(b, OpCode::kRead, seg_, blocks);
    EXPECT_TRUE(s.ok()) << s.toString();
    return s.ok() ? b : 0;
  }
  void checkScattered(size_t n, size_t block) {
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(checkPattern(local_.p + i * block, block, kSeed, (2 * n - 2 * i) * block), -1) << i;
  }

  bool poll_ = false;
  Child serve_;
  Buffer local_{16u << 20};  // outlives the engine: a case that ends early may leave copies into it running
  TransferEngine e_;
  SegmentID seg_ = kInvalidSegment;
  uint64_t base_ = 0;
};

// A submit of up to shm.inline_bytes to a mapped registration is moved at
// once (Transport::moveDirect) and its tasks committed COMPLETED; one to
// private memory (cross-memory attach) is copied inline as slices.
TEST_P(ShmInline, a_small_batch_is_copied_by_the_submitting_thread_one_slice_per_request) {
  ASSERT_NO_FATAL_FAILURE(start());
  g_copiers.clear();
  // 16 x 64 KiB, three batches (read, write, read back): 1 MiB each.
  ASSERT_NO_FATAL_FAILURE(readWriteCheck(16, 64u << 10));
  // Complete when submit returned.
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i) reqs.push_back({OpCode::kRead, local_.p + i * (64u << 10), seg_, base_, 64u << 10});
  BatchID b = 0;
  ASSERT_TRUE(e_.allocateBatchID(reqs.size(), b).ok());
  ASSERT_TRUE(e_.submitTransfer(b, reqs).ok());
  TransferStatus st;
  ASSERT_TRUE(e_.getBatchTransferStatus(b, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  const Status freed = e_.freeBatchID(b);
  ASSERT_TRUE(freed.ok()) << freed.toString();
  EXPECT_EQ(checkPattern(local_.p, 64u << 10, kSeed), -1);
  EXPECT_EQ(g_copiers.get(), std::set<std::thread::id>{std::this_thread::get_id()}) << "copied on another thread";
  EXPECT_EQ(count("inline_slices"), mapped() ? 0u : 4u * 16);
  EXPECT_EQ(count("direct_requests"), mapped() ? 4u * 16 : 0u);
  EXPECT_EQ(count("slices_completed"), 4u * 16);
  EXPECT_EQ(count("mapped_slices"), mapped() ? 4u * 16 : 0u);
  // The copy ends its tasks together (Task::completeWhole): counted as if
  // each had ended alone. 3 read batches and 1 write batch of 16 x 64 KiB.
  const EngineStats stats = e_.stats();
  const std::map<std::string, std::string> rd{{"transport", "shm"}, {"direction", "read"}};
  const std::map<std::string, std::string> wr{{"transport", "shm"}, {"direction", "write"}};
  EXPECT_EQ(metricValue(stats, "hawser_tasks_total", rd), 48);
  EXPECT_EQ(metricValue(stats, "hawser_tasks_total", wr), 16);
  EXPECT_EQ(metricValue(stats, "hawser_slices_total", rd), 48);
  EXPECT_EQ(metricValue(stats, "hawser_transferred_bytes_total", rd), 48.0 * (64u << 10));
  EXPECT_EQ(metricValue(stats, "hawser_transferred_bytes_total", wr), 16.0 * (64u << 10));
  EXPECT_EQ(metricValue(stats, "hawser_task_duration_seconds", rd), 48);  // the histogram's count
  EXPECT_EQ(metricValue(stats, "hawser_slice_duration_seconds", wr), 16);
  EXPECT_EQ(metricValue(stats, "hawser_inflight_slices", {{"transport", "shm"}}), 0);
  if (mapped()) EXPECT_EQ(count("copy_calls"), 0u);
  else EXPECT_GE(count("copy_calls"), 4u) << "cross-memory attach keeps its path";
}

TEST_P(ShmInline, transferSync_moves_a_small_transfer_at_once_and_builds_no_task) {
  // transferSync of up to shm.inline_bytes to a registration mapped here is
  // moved by the transport at once (Transport::moveDirect): copied on the
  // calling thread before any task, slice or completion is built. Private
  // memory (cross-memory attach) goes as a batch, copied on the same thread.
  ASSERT_NO_FATAL_FAILURE(start());
  g_copiers.clear();
  constexpr size_t kBlock = 64u << 10;
  // One transfer of 8 reads (the target's +1 MiB.., in reverse) and 8
  // writes (to its +4 MiB..).
  std::memset(local_.p, 0, 8 * kBlock);
  fillPattern(local_.p + 8 * kBlock, 8 * kBlock, kSeed + 5);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 8; ++i)
    reqs.push_back({OpCode::kRead, local_.p + i * kBlock, seg_, base_ + (1u << 20) + (7 - i) * kBlock, kBlock});
  for (size_t i = 0; i < 8; ++i)
    reqs.push_back({OpCode::kWrite, local_.p + (8 + i) * kBlock, seg_, base_ + (4u << 20) + i * kBlock, kBlock});
  std::vector<TransferStatus> st;
  const Status s = e_.transferSync(reqs, std::chrono::seconds(20), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(st.size(), reqs.size());
  for (size_t i = 0; i < st.size(); ++i) {
    EXPECT_EQ(st[i].s, TransferState::kCompleted) << i << ": " << st[i].error.toString();
    EXPECT_EQ(st[i].transferred_bytes, kBlock) << i;
  }
  for (size_t i = 0; i < 8; ++i)
    ASSERT_EQ(checkPattern(local_.p + i * kBlock, kBlock, kSeed, (1u << 20) + (7 - i) * kBlock), -1) << i;
  EXPECT_EQ(g_copiers.get(), std::set<std::thread::id>{std::this_thread::get_id()}) << "copied on another thread";
  EXPECT_EQ(count("direct_requests"), mapped() ? 16u : 0u);
  EXPECT_EQ(count("inline_slices"), mapped() ? 0u : 16u);
  EXPECT_EQ(count("slices_completed"), 16u);
  EXPECT_EQ(count("mapped_slices"), mapped() ? 16u : 0u);
  EXPECT_EQ(count("bytes_read"), 8 * kBlock);
  EXPECT_EQ(count("bytes_written"), 8 * kBlock);
  if (mapped()) EXPECT_EQ(count("copy_calls"), 0u);
  // Counted as tasks of one slice each, whichever way they went.
  const EngineStats stats = e_.stats();
  for (const char* dir : {"read", "write"}) {
    const std::map<std::string, std::string> l{{"transport", "shm"}, {"direction", dir}};
    EXPECT_EQ(metricValue(stats, "hawser_tasks_total", l), 8) << dir;
    EXPECT_EQ(metricValue(stats, "hawser_slices_total", l), 8) << dir;
    EXPECT_EQ(metricValue(stats, "hawser_transferred_bytes_total", l), 8.0 * kBlock) << dir;
    EXPECT_EQ(metricValue(stats, "hawser_task_duration_seconds", l), 8) << dir;  // the histogram's count
    EXPECT_EQ(metricValue(stats, "hawser_slice_duration_seconds", l), 8) << dir;
  }
  EXPECT_EQ(metricValue(stats, "hawser_inflight_slices", {{"transport", "shm"}}), 0);
  EXPECT_EQ(metricValue(stats, "hawser_tasks_submitted_total", {}), 16);
  // The written blocks, read back as a batch.
  auto back = runBatch(e_, seg_, {{OpCode::kRead, local_.p + (8u << 20), seg_, base_ + (4u << 20), 8 * kBlock}});
  ASSERT_EQ(back[0].s, TransferState::kCompleted) << back[0].error.toString();
  EXPECT_EQ(checkPattern(local_.p + (8u << 20), 8 * kBlock, kSeed + 5), -1);
}

TEST_P(ShmInline, submits_moved_at_once_commit_their_tasks_completed) {
  // Two submits of 16 x 64 KiB into one batch (reads, then writes), each
  // moved at once where the registration is mapped: every task COMPLETED
  // with its bytes when submitTransfer returns, nothing in flight, the
  // batch's wait over at once.
  ASSERT_NO_FATAL_FAILURE(start());
  constexpr size_t kBlock = 64u << 10;
  std::memset(local_.p, 0, 16 * kBlock);
  fillPattern(local_.p + 16 * kBlock, 16 * kBlock, kSeed + 9);
  std::vector<TransferRequest> reads, writes;
  for (size_t i = 0; i < 16; ++i) {
    reads.push_back({OpCode::kRead, local_.p + i * kBlock, seg_, base_ + (15 - i) * kBlock, kBlock});
    writes.push_back({OpCode::kWrite, local_.p + (16 + i) * kBlock, seg_, base_ + (8u << 20) + i * kBlock, kBlock});
  }
  BatchID b = 0;
  ASSERT_TRUE(e_.allocateBatchID(32, b).ok());
  ASSERT_TRUE(e_.submitTransfer(b, reads).ok());
  for (size_t i = 0; i < 16; ++i) {
    TransferStatus st;
    ASSERT_TRUE(e_.getTransferStatus(b, i, st).ok());
    EXPECT_EQ(st.s, TransferState::kCompleted) << i << " not complete when submit returned: " << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, kBlock) << i;
  }
  ASSERT_TRUE(e_.submitTransfer(b, writes).ok());
  TransferStatus all;
  ASSERT_TRUE(e_.getBatchTransferStatus(b, all).ok());
  EXPECT_EQ(all.s, TransferState::kCompleted) << all.error.toString();
  EXPECT_EQ(all.transferred_bytes, 32 * kBlock);
  EXPECT_EQ(metricValue(e_.stats(), "hawser_inflight_slices", {{"transport", "shm"}}), 0);
  ASSERT_TRUE(e_.waitTransfer(b, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(e_.freeBatchID(b).ok());
  for (size_t i = 0; i < 16; ++i)
    ASSERT_EQ(checkPattern(local_.p + i * kBlock, kBlock, kSeed, (15 - i) * kBlock), -1) << i;
  auto back = runBatch(e_, seg_, {{OpCode::kRead, local_.p + (12u << 20), seg_, base_ + (8u << 20), 16 * kBlock}});
  ASSERT_EQ(back[0].s, TransferState::kCompleted) << back[0].error.toString();
  EXPECT_EQ(checkPattern(local_.p + (12u << 20), 16 * kBlock, kSeed + 9), -1) << "the written blocks, read back";
  EXPECT_EQ(count("direct_requests"), mapped() ? 33u : 0u);  // the read back too (1 MiB)
  EXPECT_EQ(count("inline_slices"), mapped() ? 0u : 33u);
  const EngineStats stats = e_.stats();
  EXPECT_EQ(metricValue(stats, "hawser_tasks_total", {{"transport", "shm"}, {"direction", "read"}}), 17);
  EXPECT_EQ(metricValue(stats, "hawser_tasks_total", {{"transport", "shm"}, {"direction", "write"}}), 16);
  EXPECT_EQ(metricValue(stats, "hawser_task_duration_seconds", {{"transport", "shm"}, {"direction", "write"}}), 16);
}

TEST_P(ShmInline, transferSync_that_cannot_be_moved_at_once_goes_as_a_batch) {
  ASSERT_NO_FATAL_FAILURE(start());
  // More than shm.inline_bytes (2 x 1 MiB): the copy threads, in slices of
  // shm.split_bytes.
  std::memset(local_.p, 0, 2u << 20);
  Status s = e_.transferSync({{OpCode::kRead, local_.p, seg_, base_, 1u << 20},
                              {OpCode::kRead, local_.p + (1u << 20), seg_, base_ + (1u << 20), 1u << 20}},
                             std::chrono::seconds(20));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(local_.p, 2u << 20, kSeed), -1);
  EXPECT_EQ(count("slices_completed"), 4u);
  // With a notification, which follows the tasks of a batch: the same bytes
  // as a small transfer, copied inline as a batch.
  std::memset(local_.p, 0, 64u << 10);
  s = e_.transferSync({{OpCode::kRead, local_.p, seg_, base_, 64u << 10}}, Notification{"direct", "not"},
                      std::chrono::seconds(20));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(local_.p, 64u << 10, kSeed), -1);
  EXPECT_EQ(count("inline_slices"), 1u);
  EXPECT_EQ(count("direct_requests"), 0u);
  // The same transfer without one: moved at once (a mapped registration).
  s = e_.transferSync({{OpCode::kRead, local_.p, seg_, base_, 64u << 10}}, std::chrono::seconds(20));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(count("direct_requests"), mapped() ? 1u : 0u);
}

TEST_P(ShmInline, a_transferSync_refused_at_its_last_request_moves_nothing) {
  ASSERT_NO_FATAL_FAILURE(start());
  // 15 good reads, then one past the target's memory: refused as a submit
  // is, before a byte moves.
  std::memset(local_.p, 0, 1u << 20);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 15; ++i) reqs.push_back({OpCode::kRead, local_.p + i * 65536, seg_, base_ + i * 65536, 65536});
  reqs.push_back({OpCode::kRead, local_.p + 15 * 65536, seg_, base_ + kTarget - 4096, 65536});
  const Status s = e_.transferSync(reqs, std::chrono::seconds(20));
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  EXPECT_EQ(s.message().rfind("requests[15]: remote range", 0), 0u) << s.toString();
  EXPECT_TRUE(std::all_of(local_.p, local_.p + (1u << 20), [](char c) { return c == 0; })) << "bytes moved";
  EXPECT_EQ(count("direct_requests"), 0u);
  EXPECT_EQ(count("slices_completed"), 0u);
}

TEST_P(ShmInline, a_peer_killed_while_threads_copy_inline_is_unmapped_once_they_stop_reading_its_table) {
  // Four threads submit 4 x 64 KiB reads, each copied by its own thread
  // through the peer's table read without a lock (Peer::borrowInline),
  // while the peer is killed. Every batch ends, completed before the death
  // is noticed or unavailable after; none hangs or crashes; and the dead
  // peer's table is unmapped once the threads stopped: by the death
  // watcher, or by the last inline reader that gave its reader back.
  ASSERT_NO_FATAL_FAILURE(start());
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0}, failed{0}, other{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<TransferRequest> reqs;
      for (size_t i = 0; i < 4; ++i)
        reqs.push_back({OpCode::kRead, local_.p + (t * 4 + i) * 65536, seg_, base_ + (t * 4 + i) * 65536, 65536});
      while (!stop.load()) {
        Status s = e_.transferSync(reqs, std::chrono::seconds(20));
        if (s.ok()) completed.fetch_add(1);
        else if (s.code() == Code::kUnavailable) failed.fetch_add(1);
        else other.fetch_add(1);
      }
    });
  EXPECT_TRUE(eventually([&] { return completed.load() >= 100; })) << "no inline copies before the kill";
  const pid_t dead = serve_.pid;
  serve_.kill(SIGKILL);
  serve_.wait();
  EXPECT_TRUE(eventually([&] { return failed.load() >= 100; })) << "submits after the death did not fail";
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0) << "a batch ended neither completed nor unavailable";
  // Before the death, mapped reads were moved at once (transferSync);
  // after it, each went as a batch, whose copy failed it.
  EXPECT_GE(count("inline_slices"), 400u);
  if (mapped()) EXPECT_GE(count("direct_requests"), 400u);
  EXPECT_TRUE(eventually([&] { return !mapsShmTableOf(dead); })) << "the dead peer's table is still mapped";
}

TEST_P(ShmInline, a_request_of_up_to_inline_bytes_is_not_cut) {
  ASSERT_NO_FATAL_FAILURE(start({{"shm.inline_bytes", "4M"}}));
  g_copiers.clear();
  // 2 x 2 MiB: each more than shm.split_bytes, both within shm.inline_bytes (4 MiB here).
  ASSERT_NO_FATAL_FAILURE(readWriteCheck(2, 2u << 20));
  EXPECT_EQ(g_copiers.get(), std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(count("inline_slices") + count("direct_requests"), 3u * 2);
  EXPECT_EQ(count("direct_requests"), mapped() ? 3u * 2 : 0u);
  EXPECT_EQ(count("slices_completed"), 3u * 2);
}

TEST_P(ShmInline, a_batch_larger_than_inline_bytes_goes_to_the_copy_threads) {
  ASSERT_NO_FATAL_FAILURE(start());
  g_copiers.clear();
  poll_ = true;
  // 8 x 1 MiB = 8 MiB > shm.inline_bytes (1 MiB by default): slices of 512 KiB (shm.split_bytes) for the copy threads.
  ASSERT_NO_FATAL_FAILURE(readWriteCheck(8, 1u << 20));
  EXPECT_EQ(g_copiers.get().count(std::this_thread::get_id()), 0u) << "the submitting thread copied";
  EXPECT_FALSE(g_copiers.get().empty());
  EXPECT_EQ(count("inline_slices"), 0u);
  EXPECT_EQ(count("slices_completed"), 3u * 16);
}

TEST_P(ShmInline, with_inline_bytes_0_every_batch_goes_to_the_copy_threads) {
  ASSERT_NO_FATAL_FAILURE(start({{"shm.inline_bytes", "0"}}));
  g_copiers.clear();
  poll_ = true;
  ASSERT_NO_FATAL_FAILURE(readWriteCheck(16, 64u << 10));
  EXPECT_EQ(g_copiers.get().count(std::this_thread::get_id()), 0u) << "the submitting thread copied";
  EXPECT_EQ(count("inline_slices"), 0u);
  EXPECT_EQ(count("slices_completed"), 3u * 16);
}

TEST_P(ShmInline, a_thread_waiting_for_its_batch_copies_what_is_queued_for_it) {
  ASSERT_NO_FATAL_FAILURE(start({{"shm.threads", "1"}}));
  // The one copy thread is held on another batch's copy (parked at its
  // turn): the waiting thread's batch (8 x 1 MiB, 16 slices of 512 KiB for
  // the copy threads) completes all the same, copied by the waiting thread.
  const BatchID other = holdTheCopyThread();
  g_copiers.clear();
  std::memset(local_.p, 0, 8u << 20);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 8; ++i) reqs.push_back({OpCode::kRead, local_.p + (i << 20), seg_, base_ + (i << 20), 1u << 20});
  BatchID b = 0;
  ASSERT_TRUE(e_.allocateBatchID(reqs.size(), b).ok());
  ASSERT_TRUE(e_.submitTransfer(b, reqs).ok());
  const Waited r = waitWhileHeld(b);
  ASSERT_TRUE(r.wait.ok()) << r.wait.toString() << " (the batch waited for the held copy thread)";
  EXPECT_EQ(r.status.s, TransferState::kCompleted) << r.status.error.toString();
  EXPECT_EQ(checkPattern(local_.p, 8u << 20, kSeed), -1);
  EXPECT_EQ(r.copiers, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(r.waiter_slices, 16u);
  EXPECT_EQ(count("inline_slices"), 0u);
  ASSERT_TRUE(e_.waitTransfer(other, std::chrono::seconds(20)).ok());
  EXPECT_TRUE(e_.freeBatchID(other).ok());
  EXPECT_EQ(checkPattern(local_.p + (12u << 20), 2u << 20, kSeed, 24u << 20), -1);
}

TEST_P(ShmInline, a_thread_waiting_for_a_block_request_copies_its_queued_window) {
  // 32 scattered blocks of 64 KiB: one window of 2 MiB, more than
  // shm.inline_bytes, so the submitter posts it to the copy threads, whose
  // one thread is held on another batch: the waiting thread copies it.
  ASSERT_NO_FATAL_FAILURE(start({{"shm.threads", "1"}}));
  const BatchID other = holdTheCopyThread();
  g_copiers.clear();
  constexpr size_t kN = 32, kBlock = 64u << 10;
  const BatchID b = submitScattered(kN, kBlock);
  ASSERT_NE(b, 0u);
  const Waited r = waitWhileHeld(b);
  ASSERT_TRUE(r.wait.ok()) << r.wait.toString() << " (the block request waited for the held copy thread)";
  EXPECT_EQ(r.status.s, TransferState::kCompleted) << r.status.error.toString();
  ASSERT_NO_FATAL_FAILURE(checkScattered(kN, kBlock));
  EXPECT_EQ(r.copiers, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(r.waiter_slices, kN);
  EXPECT_EQ(count("inline_slices"), 0u);
  ASSERT_TRUE(e_.waitTransfer(other, std::chrono::seconds(20)).ok());
  EXPECT_TRUE(e_.freeBatchID(other).ok());
}

TEST_P(ShmInline, a_block_request_s_first_window_is_copied_by_its_submitter) {
  ASSERT_NO_FATAL_FAILURE(start());
  g_copiers.clear();
  // 32 scattered blocks of 16 KiB (512 KiB: one window).
  constexpr size_t kN = 32, kBlock = 16u << 10;
  const BatchID b = submitScattered(kN, kBlock);
  ASSERT_NE(b, 0u);
  TransferStatus st;
  ASSERT_TRUE(e_.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted) << "not complete when submit returned: " << st.error.toString();
  ASSERT_TRUE(e_.waitTransfer(b, std::chrono::seconds(30)).ok());
  ASSERT_TRUE(e_.freeBatchID(b).ok());
  ASSERT_NO_FATAL_FAILURE(checkScattered(kN, kBlock));
  EXPECT_EQ(g_copiers.get(), std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(count("inline_slices"), kN);
}

INSTANTIATE_TEST_SUITE_P(Memory, ShmInline, ::testing::Values("shared", "private"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace hawser::test
