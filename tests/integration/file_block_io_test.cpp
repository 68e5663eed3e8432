// Storage I/O sized by the disk (file_coalesce.h): a block request whose
// blocks lie back to back (or nearly) in a file and scattered in host
// memory moves in I/Os of file.max_io_size, not one I/O per block; every
// byte is checked, and so is every byte nobody asked for (a write never
// touches a gap between blocks). Every case runs on the io_uring and the
// POSIX engine; the counters prove the coalescing (and the cases fail with
// file.coalesce=false).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "common/util.h"
#include "hawser/engine.h"
#include "transport/file/file_transport.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr uint64_t kFileSeed = 11, kBlockSeed = 12;

// I/Os issued by either engine (short ones resumed count again: none here).
uint64_t ios(const file::FileStats& s) { return s.uring_ops + s.posix_ops; }

class FileCoalesce : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "uring") {
      std::string why = uringUnavailableReason();
      if (!why.empty()) GTEST_SKIP() << "io_uring is not usable on this host: " << why;
    }
    ASSERT_FALSE(dir.path.empty());
    path = dir.path + "/kv";
  }
  void start(std::map<std::string, std::string> extra = {}) {
    EngineOptions o;
    o.config = {{"file.engine", GetParam()}, {"file.max_io_size", "1M"}};
    for (auto& [k, v] : extra) o.config[k] = v;
    Status s = engine.init("p2p", "node-a", "127.0.0.1", 0, o);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(hasTransport(engine, "file"));
    ASSERT_TRUE((s = engine.registerLocalMemory(mem.p, mem.n, "cpu:0", false)).ok()) << s.toString();
    ASSERT_TRUE(engine.openSegment("file://" + path, seg).ok());
  }
  // One block request in its own batch; its status.
  TransferStatus run(OpCode op, const std::vector<Block>& blocks) {
    BatchID b;
    EXPECT_TRUE(engine.allocateBatchID(1, b).ok());
    Status s = engine.submitBlocks(b, op, seg, blocks);
    EXPECT_TRUE(s.ok()) << s.toString();
    EXPECT_TRUE(engine.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus st;
    EXPECT_TRUE(engine.getTransferStatus(b, 0, st).ok());
    EXPECT_TRUE(engine.freeBatchID(b).ok());
    return st;
  }
  // Runs a block request that must complete; the counters before and after.
  void runOk(OpCode op, const std::vector<Block>& blocks, file::FileStats& before, file::FileStats& after) {
    before = file::fileStatsOf(transportCounters(engine, "file"));
    TransferStatus st = run(op, blocks);
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    uint64_t bytes = 0;
    for (const Block& b : blocks) bytes += b.length;
    EXPECT_EQ(st.transferred_bytes, bytes);
    after = file::fileStatsOf(transportCounters(engine, "file"));
  }
  // `n` blocks of `bs` bytes, block i at blockMem(slot, i, bs) and at i * stride of the file.
  std::vector<Block> blocksAt(const std::vector<uint64_t>& slot, uint64_t bs, uint64_t stride) {
    std::vector<Block> blocks(slot.size());
    for (uint64_t i = 0; i < slot.size(); ++i) blocks[i] = Block{blockMem(slot, i, bs), i * stride, bs};
    return blocks;
  }
  // Block i goes to slot[i] of 2n slots, shuffled.
  static std::vector<uint64_t> shuffledSlots(size_t n) {
    std::vector<uint64_t> s(2 * n);
    std::iota(s.begin(), s.end(), 0);
    std::shuffle(s.begin(), s.end(), std::mt19937(5));
    s.resize(n);
    return s;
  }
  // Block i's memory: bs bytes at slot[i] * 2 * bs, never right after
  // another block's (the engine would merge two blocks adjacent in memory
  // and in the file into one run).
  char* blockMem(const std::vector<uint64_t>& slot, uint64_t i, uint64_t bs) { return mem.p + slot[i] * 2 * bs; }
  // The memory no block uses (of 4 x slot.size() x bs bytes) holds zeros.
  void expectUnusedSlotsZero(const std::vector<uint64_t>& slot, uint64_t bs) {
    std::vector<bool> taken(4 * slot.size());
    for (uint64_t s : slot) taken[2 * s] = true;
    for (uint64_t s = 0; s < taken.size(); ++s) {
      if (taken[s]) continue;
      ASSERT_EQ(std::count(mem.p + s * bs, mem.p + (s + 1) * bs, 0), static_cast<long>(bs)) << "slot " << s;
    }
  }
  // Blocks [i * stride, +bs) that cross a multiple of 1 MiB: an I/O ends
  // there, so each is two slices.
  static uint64_t crossings(uint64_t n, uint64_t stride, uint64_t bs) {
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; ++i) c += (i * stride) / MiB != (i * stride + bs - 1) / MiB;
    return c;
  }

  TempDir dir;
  std::string path;
  Buffer mem{40 * MiB};
  TransferEngine engine;
  SegmentID seg = kInvalidSegment;
};

std::string paramName(const ::testing::TestParamInfo<std::string>& i) { return i.param; }

}  // namespace

// 256 blocks of 32 KiB scattered over host memory, one contiguous 8 MiB of
// the file: written and read back in 1 MiB I/Os (one iovec per block), not
// 256 I/Os; the bytes after the range stay as they were.
TEST_P(FileCoalesce, scattered_host_blocks_and_a_contiguous_file_range_move_in_1m_ios) {
  constexpr uint64_t n = 256, bs = 32 * KiB;
  ASSERT_TRUE(writeFile(path, n * bs + MiB, kFileSeed));
  start();
  const auto slot = shuffledSlots(n);
  const auto blocks = blocksAt(slot, bs, bs);
  for (uint64_t i = 0; i < n; ++i) fillPattern(blockMem(slot, i, bs), bs, kBlockSeed, i * bs);
  file::FileStats before, after;
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kWrite, blocks, before, after));
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n) << "every block went in an I/O with others";
  // 8 MiB in 1 MiB I/Os (a window boundary may split one more).
  EXPECT_GE(ios(after) - ios(before), n * bs / MiB);
  EXPECT_LE(ios(after) - ios(before), n * bs / MiB + 2);
  EXPECT_EQ(after.coalesced_ios - before.coalesced_ios, ios(after) - ios(before));
  EXPECT_EQ(after.vectored_ios - before.vectored_ios, ios(after) - ios(before)) << "aligned blocks: no bounce";
  EXPECT_EQ(after.bounce_slices, before.bounce_slices);
  auto disk = readFile(path, 0, n * bs + MiB);
  ASSERT_EQ(disk.size(), n * bs + MiB);
  EXPECT_EQ(checkPattern(disk.data(), n * bs, kBlockSeed, 0), -1);
  EXPECT_EQ(checkPattern(disk.data() + n * bs, MiB, kFileSeed, n * bs), -1) << "bytes past the range changed";

  std::memset(mem.p, 0, mem.n);
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kRead, blocks, before, after));
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n);
  EXPECT_LE(ios(after) - ios(before), n * bs / MiB + 2);
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(blockMem(slot, i, bs), bs, kBlockSeed, i * bs), -1) << "block " << i;
  expectUnusedSlotsZero(slot, bs);
}

// Block requests reach the file transport as windows of runs (no task per
// run: SubBatch::prepareRuns), block.run_window runs at a time: with windows
// of 16 runs of 32 KiB, each window is one 512 KiB I/O.
TEST_P(FileCoalesce, block_requests_come_as_windows_of_runs_each_its_own_ios) {
  constexpr uint64_t n = 256, bs = 32 * KiB;
  ASSERT_TRUE(writeFile(path, n * bs, kFileSeed));
  start({{"block.run_window", "16"}, {"block.window", "1024"}});
  const auto slot = shuffledSlots(n);
  file::FileStats before, after;
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kRead, blocksAt(slot, bs, bs), before, after));
  EXPECT_EQ(ios(after) - ios(before), n / 16) << "windows of block.run_window runs (block.window is for tasks)";
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n);
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(blockMem(slot, i, bs), bs, kFileSeed, i * bs), -1) << "block " << i;
}

// file.coalesce=false: the same request is one I/O per block (the layout
// the coalescing replaces; nothing is counted as coalesced).
TEST_P(FileCoalesce, with_coalescing_off_every_block_is_an_io_of_its_own) {
  constexpr uint64_t n = 64, bs = 32 * KiB;
  ASSERT_TRUE(writeFile(path, n * bs, kFileSeed));
  start({{"file.coalesce", "false"}});
  const auto slot = shuffledSlots(n);
  file::FileStats before, after;
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kRead, blocksAt(slot, bs, bs), before, after));
  EXPECT_EQ(ios(after) - ios(before), n);
  EXPECT_EQ(after.coalesced_ios, before.coalesced_ios);
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(blockMem(slot, i, bs), bs, kFileSeed, i * bs), -1) << "block " << i;
}

// Blocks of odd lengths at odd addresses, back to back in the file from an
// odd offset: no block is aligned, so they go through bounce buffers (and a
// write's unaligned head and tail through the page cache), still a few
// large I/Os, not one per block; the bytes around the range stay.
TEST_P(FileCoalesce, odd_lengths_at_unaligned_addresses_go_as_few_bounced_ios) {
  constexpr uint64_t n = 300, at = 123;
  std::vector<uint64_t> len(n), off(n);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    len[i] = 1000 + (i * 37) % 4000 + 1;
    off[i] = at + total;
    total += len[i];
  }
  const uint64_t file_len = at + total + 5000;
  ASSERT_TRUE(writeFile(path, file_len, kFileSeed));
  start();
  // Block i at 7 + i % 13 bytes into its 8 KiB slot: never aligned.
  const auto slot = shuffledSlots(n);
  std::vector<Block> blocks(n);
  for (uint64_t i = 0; i < n; ++i) {
    blocks[i] = Block{blockMem(slot, i, 4 * KiB) + 7 + i % 13, off[i], len[i]};
    fillPattern(blocks[i].local, len[i], kBlockSeed, off[i]);
  }
  file::FileStats before, after;
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kWrite, blocks, before, after));
  // Two windows (the first is short), each a chain of < 1 MiB: its aligned
  // middle, and its unaligned head and tail.
  EXPECT_LE(ios(after) - ios(before), 6u) << "one I/O per block?";
  EXPECT_GE(after.coalesced_runs - before.coalesced_runs, n - 4);
  EXPECT_EQ(after.direct_slices, before.direct_slices) << "unaligned memory went straight to an O_DIRECT fd";
  auto disk = readFile(path, 0, file_len);
  ASSERT_EQ(disk.size(), file_len);
  EXPECT_EQ(checkPattern(disk.data(), at, kFileSeed, 0), -1) << "bytes before the range changed";
  EXPECT_EQ(checkPattern(disk.data() + at, total, kBlockSeed, at), -1);
  EXPECT_EQ(checkPattern(disk.data() + at + total, 5000, kFileSeed, at + total), -1) << "bytes after changed";

  for (const Block& b : blocks) std::memset(b.local, 0, b.length);
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kRead, blocks, before, after));
  EXPECT_LE(ios(after) - ios(before), 4u);
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(checkPattern(blocks[i].local, len[i], kBlockSeed, off[i]), -1) << i;
}

// 32 KiB blocks with 8 KiB of the file between them (file.coalesce_gap is
// 16 KiB): reads go through the gaps in large I/Os (the gaps read and
// dropped: the memory around each block stays zero); writes never write a
// gap, so they do not coalesce across one, and the gaps' bytes on disk stay
// what they were.
TEST_P(FileCoalesce, reads_pass_through_a_gap_and_writes_leave_it_untouched) {
  constexpr uint64_t n = 64, bs = 32 * KiB, gap = 8 * KiB, stride = bs + gap;
  ASSERT_TRUE(writeFile(path, n * stride, kFileSeed));
  start();
  const auto slot = shuffledSlots(n);
  const auto blocks = blocksAt(slot, bs, stride);
  file::FileStats before, after;
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kRead, blocks, before, after));
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n + crossings(n, stride, bs));
  EXPECT_LE(ios(after) - ios(before), n * stride / MiB + 2);
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(blockMem(slot, i, bs), bs, kFileSeed, i * stride), -1) << "block " << i;
  expectUnusedSlotsZero(slot, bs);  // the gaps were dropped, not written anywhere

  for (uint64_t i = 0; i < n; ++i) fillPattern(blockMem(slot, i, bs), bs, kBlockSeed, i * stride);
  ASSERT_NO_FATAL_FAILURE(runOk(OpCode::kWrite, blocks, before, after));
  EXPECT_EQ(after.coalesced_ios, before.coalesced_ios) << "a write coalesced across a gap";
  EXPECT_EQ(ios(after) - ios(before), n + crossings(n, stride, bs));
  auto disk = readFile(path, 0, n * stride);
  ASSERT_EQ(disk.size(), n * stride);
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(checkPattern(disk.data() + i * stride, bs, kBlockSeed, i * stride), -1) << "block " << i;
    ASSERT_EQ(checkPattern(disk.data() + i * stride + bs, gap, kFileSeed, i * stride + bs), -1)
        << "the gap after block " << i << " was written";
  }
}

// Requests of one submitTransfer coalesce too (they are one window of the
// transport), each completing with its own bytes.
TEST_P(FileCoalesce, adjacent_requests_of_one_submit_share_ios) {
  constexpr uint64_t n = 64, bs = 16 * KiB;
  ASSERT_TRUE(writeFile(path, n * bs, kFileSeed));
  start();
  const auto slot = shuffledSlots(n);
  std::vector<TransferRequest> reqs;
  for (uint64_t i = 0; i < n; ++i) reqs.push_back({OpCode::kRead, blockMem(slot, i, bs), seg, i * bs, bs});
  auto before = file::fileStatsOf(transportCounters(engine, "file"));
  auto sts = runBatch(engine, seg, reqs);
  auto after = file::fileStatsOf(transportCounters(engine, "file"));
  ASSERT_EQ(sts.size(), n);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(sts[i].s, TransferState::kCompleted) << i << ": " << sts[i].error.toString();
    EXPECT_EQ(sts[i].transferred_bytes, bs);
    ASSERT_EQ(checkPattern(blockMem(slot, i, bs), bs, kFileSeed, i * bs), -1) << "request " << i;
  }
  EXPECT_EQ(ios(after) - ios(before), 1u) << "64 x 16 KiB = one 1 MiB I/O";
  EXPECT_EQ(after.coalesced_runs - before.coalesced_runs, n);
}

INSTANTIATE_TEST_SUITE_P(Engines, FileCoalesce, ::testing::Values("uring", "posix"), paramName);
