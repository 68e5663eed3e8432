// shm moves the runs of a window with few system calls (issue 25): the
// slices of the tasks one prepare() hands it (a block request's window, or
// the requests of one submitTransfer) go to the kernel as iovecs, up to
// shm.max_iov of them and shm.split_bytes in all per process_vm_readv /
// process_vm_writev call; and a fault in one run fails that run alone.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <random>

#include "common/util.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

constexpr size_t kBlock = 32u << 10;
constexpr size_t kBlocks = 128;

class ShmIov : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions io;
    io.config = {{"transport", "shm"}, {"shm.inline_bytes", inline_bytes_}};
    ASSERT_TRUE(target_.init("p2p", "target", "127.0.0.1", 0).ok());
    if (!hasTransport(target_, "shm")) GTEST_SKIP() << "shm is not installed here (no cross-memory attach)";
    ASSERT_TRUE(init_.init("p2p", "initiator", "127.0.0.1", 0, io).ok());
    ASSERT_TRUE(target_.registerLocalMemory(mem_.p, mem_.n, "cpu:0", true).ok());
    ASSERT_TRUE(init_.registerLocalMemory(local_.p, local_.n, "cpu:0", false).ok());
    ASSERT_TRUE(init_.openSegment(target_.segmentName(), seg_).ok());
  }
  void TearDown() override {
    (void)init_.unregisterLocalMemory(local_.p);
    (void)target_.unregisterLocalMemory(mem_.p);
  }
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem_.p); }
  uint64_t calls() { return counter(init_, "shm", "copy_calls"); }
  Status runBlocks(OpCode op, const std::vector<Block>& blocks) {
    BatchID b = 0;
    Status s = init_.allocateBatchID(1, b);
    if (s.ok()) s = init_.submitBlocks(b, op, seg_, blocks);
    if (s.ok()) s = init_.waitTransfer(b, std::chrono::seconds(30));
    TransferStatus st;
    if (s.ok()) s = init_.getTransferStatus(b, 0, st);
    if (s.ok() && st.s != TransferState::kCompleted)
      s = st.error.ok() ? Status(Code::kInternal, "not completed") : st.error;
    if (b) (void)init_.freeBatchID(b);
    return s;
  }

  std::string inline_bytes_ = "4M";  // the default: a window of up to 4 MiB is copied by its submitter
  Buffer mem_{2 * kBlocks * kBlock}, local_{kBlocks * kBlock};
  TransferEngine target_, init_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(ShmIov, a_window_of_scattered_32k_runs_moves_many_runs_per_system_call) {
  // Block i of the local buffer <-> a shuffled even slot of the target: no
  // two blocks merge into a run, so the window holds kBlocks runs.
  std::vector<uint64_t> slot(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) slot[i] = 2 * i;
  std::shuffle(slot.begin(), slot.end(), std::mt19937_64(7));
  std::vector<Block> blocks(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) blocks[i] = {local_.p + i * kBlock, base() + slot[i] * kBlock, kBlock};
  fillPattern(mem_.p, mem_.n, 11);
  for (OpCode op : {OpCode::kRead, OpCode::kWrite}) {
    SCOPED_TRACE(op == OpCode::kRead ? "read" : "write");
    if (op == OpCode::kWrite) fillPattern(local_.p, local_.n, 12);
    else std::memset(local_.p, 0, local_.n);
    const uint64_t calls0 = calls(), runs0 = counter(init_, "shm", "slices_completed");
    ASSERT_TRUE(runBlocks(op, blocks).ok());
    const uint64_t n_calls = calls() - calls0, runs = counter(init_, "shm", "slices_completed") - runs0;
    EXPECT_EQ(runs, kBlocks);
    // 512 KiB (shm.split_bytes) per call: 16 runs of 32 KiB.
    EXPECT_LE(n_calls * 16, runs) << n_calls << " calls for " << runs << " runs";
    for (size_t i = 0; i < kBlocks; ++i) {
      const char* got = op == OpCode::kRead ? local_.p + i * kBlock : mem_.p + slot[i] * kBlock;
      const uint64_t seed = op == OpCode::kRead ? 11 : 12, at = op == OpCode::kRead ? slot[i] * kBlock : i * kBlock;
      ASSERT_EQ(checkPattern(got, kBlock, seed, at), -1) << "block " << i;
    }
  }
}

// Every window goes to the copy threads.
class ShmIovThreads : public ShmIov {
 protected:
  ShmIovThreads() { inline_bytes_ = "0"; }
};

TEST_F(ShmIovThreads, runs_longer_than_a_slice_are_cut_and_end_once_each) {
  // Three runs of 1.25 MiB (three slices each, copied by any copy thread).
  constexpr size_t kLong = (5u << 20) / 4;
  std::vector<Block> blocks;
  for (size_t i = 0; i < 3; ++i) blocks.push_back({local_.p + i * kLong, base() + (2 - i) * 2 * kLong, kLong});
  fillPattern(mem_.p, mem_.n, 31);
  std::memset(local_.p, 0, local_.n);
  const uint64_t calls0 = calls();
  ASSERT_TRUE(runBlocks(OpCode::kRead, blocks).ok());
  EXPECT_EQ(calls() - calls0, 9u) << "a call per slice of 512 KiB or less";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(checkPattern(local_.p + i * kLong, kLong, 31, (2 - i) * 2 * kLong), -1) << i;
  fillPattern(local_.p, 3 * kLong, 32);
  ASSERT_TRUE(runBlocks(OpCode::kWrite, blocks).ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(checkPattern(mem_.p + (2 - i) * 2 * kLong, kLong, 32, i * kLong), -1) << i;
}

TEST_F(ShmIov, a_fault_in_one_run_of_a_call_fails_that_run_alone) {
  // The target's page under request 5 cannot be accessed (its owner's bug):
  // the call stops there; the runs before and after it complete.
  constexpr size_t kN = 16, kBad = 5;
  auto remote = [&](size_t i) { return base() + 2 * i * kBlock; };
  char* bad = mem_.p + 2 * kBad * kBlock;
  for (OpCode op : {OpCode::kRead, OpCode::kWrite}) {
    SCOPED_TRACE(op == OpCode::kRead ? "read" : "write");
    fillPattern(mem_.p, mem_.n, 21);
    if (op == OpCode::kWrite) fillPattern(local_.p, local_.n, 22);
    else std::memset(local_.p, 0, local_.n);
    ASSERT_EQ(::mprotect(bad, 4096, PROT_NONE), 0);
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < kN; ++i) reqs.push_back({op, local_.p + i * kBlock, seg_, remote(i), kBlock});
    const uint64_t calls0 = calls();
    auto st = runBatch(init_, seg_, reqs);
    const uint64_t n_calls = calls() - calls0;
    ASSERT_EQ(::mprotect(bad, 4096, PROT_READ | PROT_WRITE), 0);
    ASSERT_EQ(st.size(), kN);
    for (size_t i = 0; i < kN; ++i) {
      if (i == kBad) {
        EXPECT_EQ(st[i].s, TransferState::kFailed);
        EXPECT_EQ(st[i].error.code(), Code::kIoError) << st[i].error.toString();
        EXPECT_NE(st[i].error.message().find(std::strerror(EFAULT)), std::string::npos) << st[i].error.toString();
        continue;
      }
      ASSERT_EQ(st[i].s, TransferState::kCompleted) << i << ": " << st[i].error.toString();
      const char* got = op == OpCode::kRead ? local_.p + i * kBlock : mem_.p + 2 * i * kBlock;
      const uint64_t seed = op == OpCode::kRead ? 21 : 22, at = op == OpCode::kRead ? 2 * i * kBlock : i * kBlock;
      EXPECT_EQ(checkPattern(got, kBlock, seed, at), -1) << "request " << i;
    }
    // One call up to the fault, one that fails on it, one for the rest.
    EXPECT_EQ(n_calls, 3u);
  }
}

}  // namespace
}  // namespace hawser::test
