// Block requests between two engines of this process, over tcp and shm: the
// checks (each error names the block), merging of contiguous blocks, plans
// prepared once and posted many times, cancel, status per request, bounded
// engine memory, and descriptors that do not grow with blocks. Bytes moved
// across processes: the transport suite (common/block_suite.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "common/engine_pair.h"
#include "metadata/descriptor.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Two engines of this process moving through `transport`.
class Blocks : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ::setenv("HAWSER_TRANSPORT", GetParam().c_str(), 1);
    pair_ = std::make_unique<EnginePair>(32 * MiB, 32 * MiB, false);
    ::unsetenv("HAWSER_TRANSPORT");
    ASSERT_TRUE(pair_->setup_status.ok()) << pair_->setup_status.toString();
    ASSERT_TRUE(hasTransport(pair_->init, GetParam())) << GetParam() << " is not installed";
    RouteExplanation why;
    ASSERT_TRUE(pair_->init.explainRoute(pair_->seg, "cpu:0", why).ok());
    ASSERT_EQ(why.transport, GetParam()) << why.why;
    fillPattern(pair_->target_mem.p, pair_->target_mem.n, 11);
  }
  TransferEngine& e() { return pair_->init; }
  SegmentID seg() const { return pair_->seg; }
  uint64_t remote(size_t off) const { return pair_->remote(off); }
  char* local(size_t off) { return pair_->local(off); }

  // Submits `blocks` as one task of a fresh batch, waits, returns its status.
  TransferStatus run(OpCode op, const std::vector<Block>& blocks, Status* submitted = nullptr) {
    BatchID b;
    EXPECT_TRUE(e().allocateBatchID(4, b).ok());
    size_t task = 99;
    Status s = e().submitBlocks(b, op, seg(), blocks, &task);
    if (submitted) *submitted = s;
    TransferStatus st;
    if (s.ok()) {
      EXPECT_EQ(task, 0u);
      EXPECT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
      EXPECT_TRUE(e().getTransferStatus(b, 0, st).ok());
    }
    EXPECT_TRUE(e().freeBatchID(b).ok());
    return st;
  }
  TransferStatus runStrided(OpCode op, const StridedBlocks& sb, Status* submitted = nullptr) {
    BatchID b;
    EXPECT_TRUE(e().allocateBatchID(4, b).ok());
    Status s = e().submitStrided(b, op, seg(), sb);
    if (submitted) *submitted = s;
    TransferStatus st;
    if (s.ok()) {
      EXPECT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
      EXPECT_TRUE(e().getTransferStatus(b, 0, st).ok());
    }
    EXPECT_TRUE(e().freeBatchID(b).ok());
    return st;
  }

  std::unique_ptr<EnginePair> pair_;
};

INSTANTIATE_TEST_SUITE_P(Transports, Blocks, ::testing::Values("tcp", "shm"),
                         [](const auto& i) { return i.param; });

TEST_P(Blocks, block_list_read_lands_every_block_in_place) {
  // 2,000 blocks of 4 KiB: runs of 8 contiguous on both sides (merged),
  // placed in reverse order of the runs at the target.
  std::vector<Block> blocks;
  for (size_t i = 0; i < 2000; ++i) {
    const size_t run = i / 8, in = i % 8;
    blocks.push_back({local(i * 4 * KiB), remote((250 - run) * 32 * KiB + in * 4 * KiB + 3), 4 * KiB});
  }
  PlanID plan;
  ASSERT_TRUE(e().prepareBlocks(OpCode::kRead, seg(), blocks, plan).ok());
  PlanInfo info;
  ASSERT_TRUE(e().planInfo(plan, info).ok());
  EXPECT_EQ(info.blocks, 2000u);
  EXPECT_EQ(info.runs, 250u);  // 8 blocks per run
  EXPECT_EQ(info.bytes, 2000 * 4 * KiB);
  ASSERT_TRUE(e().releasePlan(plan).ok());

  TransferStatus st = run(OpCode::kRead, blocks);
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, 2000 * 4 * KiB);
  for (size_t i = 0; i < blocks.size(); ++i)
    ASSERT_EQ(checkPattern(blocks[i].local, 4 * KiB, 11, blocks[i].remote - remote(0)), -1) << "block " << i;
}

TEST_P(Blocks, block_arrays_write_then_strided_read_round_trip) {
  // Parallel arrays (what numpy and C hand over), scattered on both sides.
  const size_t n = 3000, len = 1000;
  std::vector<uint64_t> l(n), r(n);
  for (size_t i = 0; i < n; ++i) {
    l[i] = reinterpret_cast<uint64_t>(local(i * 1024));
    r[i] = remote(16 * MiB + (n - 1 - i) * 2048);  // reversed: destinations out of order, not overlapping
  }
  fillPattern(local(0), n * 1024, 5);
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  BlockArrays a{l.data(), r.data(), nullptr, len, n};
  ASSERT_TRUE(e().submitBlocks(b, OpCode::kWrite, seg(), a).ok());
  ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(e().getTransferStatus(b, 0, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  ASSERT_TRUE(e().freeBatchID(b).ok());
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(pair_->target_mem.p + 16 * MiB + (n - 1 - i) * 2048, len, 5, i * 1024), -1) << i;
  // Read them back in one strided request: remote stride 2048, local stride 1000 (packed).
  std::memset(local(8 * MiB), 0, n * len);
  StridedBlocks sb{local(8 * MiB), remote(16 * MiB), len, len, 2048, n};
  st = runStrided(OpCode::kRead, sb);
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, n * len);
  for (size_t i = 0; i < n; ++i)  // remote block j holds local block n-1-j
    ASSERT_EQ(checkPattern(local(8 * MiB + i * len), len, 5, (n - 1 - i) * 1024), -1) << i;
}

TEST_P(Blocks, contiguous_strided_blocks_become_few_runs) {
  PlanID p;
  StridedBlocks sb{local(0), remote(0), 4 * KiB, 4 * KiB, 4 * KiB, 4096};  // 16 MiB, contiguous both sides
  ASSERT_TRUE(e().prepareStrided(OpCode::kRead, seg(), sb, p).ok());
  PlanInfo info;
  ASSERT_TRUE(e().planInfo(p, info).ok());
  EXPECT_EQ(info.blocks, 4096u);
  EXPECT_EQ(info.runs, 1u);
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  ASSERT_TRUE(e().postPlan(b, p).ok());
  ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(e().getTransferStatus(b, 0, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(checkPattern(local(0), 16 * MiB, 11, 0), -1);
  ASSERT_TRUE(e().freeBatchID(b).ok());
  ASSERT_TRUE(e().releasePlan(p).ok());
}

TEST_P(Blocks, prepared_plan_posted_many_times_moves_the_current_bytes_each_time) {
  // Scattered 512-byte blocks, many more than one window (block.window).
  const size_t n = 5000, len = 512;
  std::vector<Block> w;
  for (size_t i = 0; i < n; ++i) w.push_back({local(i * 1024), remote(20 * MiB + i * 768), len});
  PlanID plan;
  ASSERT_TRUE(e().prepareBlocks(OpCode::kWrite, seg(), w, plan).ok());
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(3, b).ok());
  for (uint64_t round = 0; round < 3; ++round) {
    fillPattern(local(0), n * 1024, 100 + round);
    size_t task = 99;
    ASSERT_TRUE(e().postPlan(b, plan, &task).ok());
    EXPECT_EQ(task, round);
    ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
    TransferStatus st;
    ASSERT_TRUE(e().getTransferStatus(b, task, st).ok());
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, n * len);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(checkPattern(pair_->target_mem.p + 20 * MiB + i * 768, len, 100 + round, i * 1024), -1)
          << "round " << round << " block " << i;
  }
  Status s = e().postPlan(b, plan);
  EXPECT_EQ(s.code(), Code::kCapacityExceeded) << s.toString();
  ASSERT_TRUE(e().freeBatchID(b).ok());
  ASSERT_TRUE(e().releasePlan(plan).ok());
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  s = e().postPlan(b, plan);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not prepared"), std::string::npos) << s.message();
  EXPECT_EQ(e().releasePlan(plan).code(), Code::kInvalidArgument);
  ASSERT_TRUE(e().freeBatchID(b).ok());
}

TEST_P(Blocks, a_block_request_is_one_task_beside_plain_requests) {
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(3, b).ok());
  ASSERT_TRUE(e().submitTransfer(b, {{OpCode::kRead, local(0), seg(), remote(0), 4096}}).ok());
  size_t task = 0;
  StridedBlocks sb{local(MiB), remote(MiB), 100, 200, 300, 1000};
  ASSERT_TRUE(e().submitStrided(b, OpCode::kRead, seg(), sb, &task).ok());
  EXPECT_EQ(task, 1u);
  ASSERT_TRUE(e().submitTransfer(b, {{OpCode::kRead, local(4096), seg(), remote(4096), 4096}}).ok());
  ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(e().getTransferStatus(b, 1, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(st.transferred_bytes, 100000u);
  ASSERT_TRUE(e().getBatchTransferStatus(b, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(st.transferred_bytes, 100000u + 8192);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(checkPattern(local(MiB + i * 200), 100, 11, MiB + i * 300), -1) << i;
  ASSERT_TRUE(e().freeBatchID(b).ok());
}

TEST_P(Blocks, cancel_ends_a_large_block_request_canceled_and_the_batch_frees) {
  // 200,000 scattered 16-byte blocks: far more than the lanes hold at once.
  StridedBlocks sb{local(0), remote(0), 16, 64, 128, 200000};
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  ASSERT_TRUE(e().submitStrided(b, OpCode::kRead, seg(), sb).ok());
  ASSERT_TRUE(e().cancelTransfer(b).ok());
  ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(e().getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCanceled) << stateName(st.s) << " " << st.error.toString();
  EXPECT_LT(st.transferred_bytes, 200000u * 16);
  EXPECT_TRUE(eventually([&] { return e().freeBatchID(b).ok(); }));
}

TEST_P(Blocks, an_overlap_among_thousands_of_shuffled_destinations_names_both_blocks) {
  // Two block tables, as a paged KV cache has: destinations out of order, so
  // they are sorted (radix sort beyond 256 blocks) before the check.
  const size_t n = 3000;
  std::vector<size_t> lslot(n), rslot(n);
  std::iota(lslot.begin(), lslot.end(), 0);
  std::iota(rslot.begin(), rslot.end(), 0);
  std::shuffle(lslot.begin(), lslot.end(), std::mt19937(21));
  std::shuffle(rslot.begin(), rslot.end(), std::mt19937(22));
  std::vector<Block> blocks(n);
  for (size_t i = 0; i < n; ++i) blocks[i] = Block{local(lslot[i] * 2048), remote(rslot[i] * 2048), 2048};
  Status s;
  TransferStatus st = run(OpCode::kRead, blocks, &s);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  for (size_t i = 0; i < n; i += 7)
    ASSERT_EQ(checkPattern(blocks[i].local, 2048, 11, blocks[i].remote - remote(0)), -1) << "block " << i;
  // Block 2500's destination moved to start 100 bytes into block 40's.
  auto bad = blocks;
  bad[2500].local = static_cast<char*>(bad[40].local) + 100;
  run(OpCode::kRead, bad, &s);
  EXPECT_EQ(s.code(), Code::kAddressOverlapped) << s.toString();
  EXPECT_NE(s.message().find("blocks[2500]: destination"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("overlaps blocks[40]'s"), std::string::npos) << s.message();
  // For a WRITE the target's side is the destination.
  bad = blocks;
  bad[7].remote = bad[2999].remote + 1000;  // inside block 2999's destination only
  bad[7].length = 500;
  run(OpCode::kWrite, bad, &s);
  EXPECT_EQ(s.code(), Code::kAddressOverlapped) << s.toString();
  EXPECT_NE(s.message().find("blocks[2999]: destination"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("overlaps blocks[7]'s"), std::string::npos) << s.message();
}

TEST_P(Blocks, engine_memory_per_in_flight_block_is_bounded_and_reported) {
  // 200,000 scattered blocks in flight: the engine holds windows, not blocks.
  const size_t n = 200000;
  StridedBlocks sb{local(0), remote(0), 8, 40, 72, n};
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  ASSERT_TRUE(e().submitStrided(b, OpCode::kRead, seg(), sb).ok());
  const uint64_t bound = counter(e(), "", "block_window_bytes_max_per_task");
  EXPECT_GT(counter(e(), "", "block_bytes_per_inflight_run"), 0u);
  uint64_t most = 0;
  TransferStatus st;
  do {
    most = std::max(most, counter(e(), "", "block_window_bytes"));
    ASSERT_TRUE(e().getTransferStatus(b, 0, st).ok());
  } while (!isTerminal(st.s));
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, bound);
  EXPECT_LT(bound, n * counter(e(), "", "block_bytes_per_inflight_run")) << "the bound must not grow with the blocks";
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(checkPattern(local(i * 40), 8, 11, i * 72), -1) << i;
  ASSERT_TRUE(e().freeBatchID(b).ok());
  EXPECT_EQ(counter(e(), "", "block_window_bytes"), 0u);
  EXPECT_EQ(counter(e(), "", "block_runs_inflight"), 0u);
}

// ---- checks: each error names the block ---------------------------------------

TEST_P(Blocks, bad_blocks_are_refused_naming_the_block) {
  auto refused = [&](OpCode op, std::vector<Block> blocks, Code code, const std::string& needle) {
    Status s;
    run(op, blocks, &s);
    EXPECT_EQ(s.code(), code) << s.toString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    PlanID p = 0;
    Status ps = e().prepareBlocks(op, seg(), blocks, p);
    EXPECT_EQ(ps.code(), code) << "prepare: " << ps.toString();
    EXPECT_EQ(ps.message(), s.message());
  };
  std::vector<Block> ok;
  for (size_t i = 0; i < 10; ++i) ok.push_back({local(i * 8192), remote(i * 8192), 4096});
  refused(OpCode::kRead, {}, Code::kInvalidArgument, "blocks is empty");
  auto b = ok;
  b[3].length = 0;
  refused(OpCode::kRead, b, Code::kInvalidArgument, "blocks[3]: length is 0");
  b = ok;
  b[5].local = reinterpret_cast<void*>(0x1000);
  refused(OpCode::kRead, b, Code::kNotRegistered, "blocks[5]: local range [0x1000, +4096)");
  b = ok;
  b[6].local = local(32 * MiB - 100);  // runs past the end of the registered region
  refused(OpCode::kWrite, b, Code::kNotRegistered, "blocks[6]:");
  b = ok;
  b[7].remote = remote(32 * MiB - 10);
  refused(OpCode::kRead, b, Code::kOutOfRange, "blocks[7]: remote range");
  b = ok;
  b[8].local = nullptr;
  refused(OpCode::kRead, b, Code::kInvalidArgument, "blocks[8]: local address is null");
  // Destinations overlapping: in order (found in the pass) and out of order (sorted).
  b = ok;
  b[4].local = local(3 * 8192 + 4000);
  refused(OpCode::kRead, b, Code::kAddressOverlapped, "blocks[4]: destination");
  b = ok;
  b[9].local = local(2 * 8192 + 100);
  refused(OpCode::kRead, b, Code::kAddressOverlapped, "blocks[9]: destination");
  b = ok;
  b[2].remote = remote(0);  // a WRITE: the remote side is the destination
  refused(OpCode::kWrite, b, Code::kAddressOverlapped, "overlaps blocks[0]'s");
  // Overlapping sources are fine (a READ's remote side, a WRITE's local side).
  b = ok;
  b[2].remote = remote(0);
  Status s;
  TransferStatus st = run(OpCode::kRead, b, &s);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(checkPattern(local(2 * 8192), 4096, 11, 0), -1);
  // A segment that is not open.
  PlanID none = 0;
  EXPECT_EQ(e().prepareBlocks(OpCode::kRead, 12345, ok, none).code(), Code::kSegmentNotFound);
  BatchID batch;
  ASSERT_TRUE(e().allocateBatchID(1, batch).ok());
  EXPECT_EQ(e().submitBlocks(batch + 100, OpCode::kRead, seg(), ok).code(), Code::kInvalidBatch);
  EXPECT_EQ(counter(e(), "", "block_tasks"), 1u);  // only the good one
  ASSERT_TRUE(e().freeBatchID(batch).ok());
}

TEST_P(Blocks, bad_strided_layouts_are_refused_naming_the_block) {
  auto refused = [&](OpCode op, StridedBlocks sb, Code code, const std::string& needle) {
    Status s;
    runStrided(op, sb, &s);
    EXPECT_EQ(s.code(), code) << s.toString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    PlanID p = 0;
    EXPECT_EQ(e().prepareStrided(op, seg(), sb, p).code(), code);
  };
  refused(OpCode::kRead, {local(0), remote(0), 4096, 4096, 4096, 0}, Code::kInvalidArgument, "count is 0");
  refused(OpCode::kRead, {local(0), remote(0), 0, 4096, 4096, 5}, Code::kInvalidArgument, "block_length is 0");
  refused(OpCode::kRead, {local(0), remote(0), 4096, 2048, 8192, 5}, Code::kAddressOverlapped,
          "blocks[1]: destination in local memory (READ) overlaps blocks[0]'s");
  refused(OpCode::kWrite, {local(0), remote(0), 4096, 8192, 0, 5}, Code::kAddressOverlapped, "blocks[1]:");
  // The 9th block (index 8) runs past the target's memory: named.
  refused(OpCode::kRead, {local(0), remote(32 * MiB - 8 * 65536 - 100), 4096, 4096, 65536, 20}, Code::kOutOfRange,
          "blocks[8]: remote range");
  // The 5th block's local side leaves the registered region.
  refused(OpCode::kRead, {local(32 * MiB - 4 * MiB - 10), remote(0), 4096, MiB, 4096, 6}, Code::kNotRegistered,
          "blocks[4]:");
  // Sources may repeat: a WRITE of one local block to many places.
  Status s;
  TransferStatus st = runStrided(OpCode::kWrite, {local(0), remote(MiB), 64, 0, 64, 100}, &s);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
}

TEST_P(Blocks, a_plan_whose_local_memory_was_unregistered_is_refused_at_post) {
  Buffer extra(MiB);
  ASSERT_TRUE(e().registerLocalMemory(extra.p, extra.n, "cpu:0", false).ok());
  PlanID p;
  StridedBlocks sb{extra.p, remote(0), 4096, 8192, 4096, 100};
  ASSERT_TRUE(e().prepareStrided(OpCode::kRead, seg(), sb, p).ok());
  ASSERT_TRUE(e().unregisterLocalMemory(extra.p).ok());
  BatchID b;
  ASSERT_TRUE(e().allocateBatchID(1, b).ok());
  Status s = e().postPlan(b, p);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  EXPECT_NE(s.message().find("no longer registered"), std::string::npos) << s.message();
  TransferStatus st;
  EXPECT_EQ(e().getTransferStatus(b, 0, st).code(), Code::kInvalidArgument);  // no task was added
  ASSERT_TRUE(e().freeBatchID(b).ok());
  ASSERT_TRUE(e().releasePlan(p).ok());
}

TEST_P(Blocks, descriptors_do_not_grow_with_blocks) {
  auto size = [](TransferEngine& x) {
    return encodeSegmentText(detail::EngineAccess::of(x).localDescriptor()).size();
  };
  const size_t target_before = size(pair_->target), init_before = size(e());
  std::vector<PlanID> plans;
  for (size_t n : {1ul, 1000ul, 100000ul}) {
    std::vector<Block> blocks;
    for (size_t i = 0; i < n; ++i) blocks.push_back({local(i * 64), remote(i * 128), 32});
    PlanID p;
    ASSERT_TRUE(e().prepareBlocks(OpCode::kRead, seg(), blocks, p).ok());
    plans.push_back(p);
    BatchID b;
    ASSERT_TRUE(e().allocateBatchID(1, b).ok());
    ASSERT_TRUE(e().postPlan(b, p).ok());
    ASSERT_TRUE(e().waitTransfer(b, std::chrono::seconds(60)).ok());
    EXPECT_EQ(size(pair_->target), target_before) << n << " blocks";
    EXPECT_EQ(size(e()), init_before) << n << " blocks";
    ASSERT_TRUE(e().freeBatchID(b).ok());
  }
  std::vector<SegmentBuffer> bufs;
  ASSERT_TRUE(e().segmentBuffers(seg(), bufs).ok());
  EXPECT_EQ(bufs.size(), 1u);  // one registered region, one buffer
  for (PlanID p : plans) ASSERT_TRUE(e().releasePlan(p).ok());
  EXPECT_EQ(counter(e(), "", "block_plans_open"), 0u);
  EXPECT_EQ(counter(e(), "", "block_plan_bytes"), 0u);
}

}  // namespace

namespace {

// File segments: the file transport moves block requests as it moves
// requests (runs at file offsets; contiguous blocks merged), and a block past
// the end of the file is refused naming it.
TEST(BlocksOnFiles, block_list_and_strided_requests_read_and_write_a_file_segment) {
  TempDir dir;
  const std::string path = dir.path + "/blocks.bin";
  ASSERT_TRUE(writeFile(path, 4 * MiB, 77));
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "files", "127.0.0.1", 0).ok());
  Buffer mem(4 * MiB);
  ASSERT_TRUE(e.registerLocalMemory(mem.p, mem.n, "cpu:0", false).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment("file://" + path, seg).ok());
  // 300 blocks of 4 KiB read from every 3rd 4 KiB of the file (O_DIRECT aligned), reversed locally.
  std::vector<Block> blocks;
  for (size_t i = 0; i < 300; ++i) blocks.push_back({mem.p + (299 - i) * 4096, i * 3 * 4096, 4096});
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(4, b).ok());
  ASSERT_TRUE(e.submitBlocks(b, OpCode::kRead, seg, blocks).ok());
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(e.getTransferStatus(b, 0, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(checkPattern(mem.p + (299 - i) * 4096, 4096, 77, i * 3 * 4096), -1) << i;
  // A strided write of 100 blocks of 1000 bytes (unaligned: through the file transport's bounce path), read back.
  fillPattern(mem.p, 100 * 2000, 5);
  ASSERT_TRUE(e.submitStrided(b, OpCode::kWrite, seg, {mem.p, 2 * MiB + 3, 1000, 2000, 1500, 100}).ok());
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(30)).ok());
  ASSERT_TRUE(e.getTransferStatus(b, 1, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  std::memset(mem.p + 3 * MiB, 0, 100 * 1500);
  ASSERT_TRUE(e.submitStrided(b, OpCode::kRead, seg, {mem.p + 3 * MiB, 2 * MiB + 3, 1500, 1500, 1500, 100}).ok());
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(30)).ok());
  ASSERT_TRUE(e.getTransferStatus(b, 2, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  for (size_t i = 0; i < 100; ++i)
    ASSERT_EQ(checkPattern(mem.p + 3 * MiB + i * 1500, 1000, 5, i * 2000), -1) << i;
  // Past the end of the file: refused, naming the block.
  blocks = {{mem.p, 0, 4096}, {mem.p + 4096, 4 * MiB - 100, 4096}};
  Status s = e.submitBlocks(b, OpCode::kRead, seg, blocks);
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find("blocks[1]: range"), std::string::npos) << s.message();
  ASSERT_TRUE(e.freeBatchID(b).ok());
}

}  // namespace
