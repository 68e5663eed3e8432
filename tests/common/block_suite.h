// Block requests in the transport suite (transport_suite.h includes this):
// a block list, a strided layout and a plan posted several times move the
// right bytes to and from a `hawser serve` child over every transport.
#pragma once

namespace hawser::test {

TEST_P(TransportSuite, block_list_read_lands_each_block_from_the_target) {
  // 3,000 blocks of 4 KiB: 1,000 runs of 3 contiguous ones, runs in reverse
  // order at the target and at unaligned remote offsets.
  const size_t n = 3000, len = 4096;
  SuiteBuffer local(loc(), n * len);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  std::vector<Block> blocks;
  for (size_t i = 0; i < n; ++i)
    blocks.push_back({local.p + i * len, base_ + 7 + (n / 3 - 1 - i / 3) * 3 * len + (i % 3) * len, len});
  PlanID plan;
  ASSERT_TRUE(engine_.prepareBlocks(OpCode::kRead, seg_, blocks, plan).ok());
  PlanInfo info;
  ASSERT_TRUE(engine_.planInfo(plan, info).ok());
  EXPECT_EQ(info.runs, n / 3);
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(1, b).ok());
  ASSERT_TRUE(engine_.postPlan(b, plan).ok());
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine_.getTransferStatus(b, 0, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, n * len);
  ASSERT_TRUE(engine_.freeBatchID(b).ok());
  ASSERT_TRUE(engine_.releasePlan(plan).ok());
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(local.check(i * len, len, kSeed, blocks[i].remote - base_), -1) << "block " << i;
}

TEST_P(TransportSuite, strided_write_then_strided_read_round_trip) {
  // A paged layout: 2,048 blocks of 1 KiB, every 3rd KiB locally, every
  // 5th KiB at the target; read back packed.
  const size_t n = 2048, len = 1024;
  SuiteBuffer src(loc(), n * 3 * len), dst(loc(), n * len);
  ASSERT_TRUE(engine_.registerLocalMemory(src.p, src.n, src.location(), false).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(dst.p, dst.n, dst.location(), false).ok());
  src.fill(0, src.n, 31);
  const uint64_t at = base_ + (40u << 20) + 5;
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(2, b).ok());
  ASSERT_TRUE(engine_.submitStrided(b, OpCode::kWrite, seg_, {src.p, at, len, 3 * len, 5 * len, n}).ok());
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
  dst.zero();
  ASSERT_TRUE(engine_.submitStrided(b, OpCode::kRead, seg_, {dst.p, at, len, len, 5 * len, n}).ok());
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
  for (size_t t = 0; t < 2; ++t) {
    TransferStatus st;
    ASSERT_TRUE(engine_.getTransferStatus(b, t, st).ok());
    ASSERT_EQ(st.s, TransferState::kCompleted) << "task " << t << ": " << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, n * len);
  }
  ASSERT_TRUE(engine_.freeBatchID(b).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst.check(i * len, len, 31, i * 3 * len), -1) << "block " << i;
}

TEST_P(TransportSuite, plan_posted_after_its_memory_was_registered_again_lands) {
  // Unregistering tears down what each transport set up for the region (an
  // rdma MR); registering the memory again sets it up anew. A plan prepared
  // before finds its regions again when posted, with what the transports
  // set up the second time.
  const size_t n = 256, len = 4096;
  SuiteBuffer dst(loc(), 2 * n * len);
  ASSERT_TRUE(engine_.registerLocalMemory(dst.p, dst.n, dst.location(), false).ok());
  const uint64_t at = base_ + (56u << 20);
  PlanID plan;
  ASSERT_TRUE(engine_.prepareStrided(OpCode::kRead, seg_, {dst.p, at, len, 2 * len, len, n}, plan).ok());
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      ASSERT_TRUE(engine_.unregisterLocalMemory(dst.p).ok());
      ASSERT_TRUE(engine_.registerLocalMemory(dst.p, dst.n, dst.location(), false).ok());
    }
    dst.zero();
    BatchID b;
    ASSERT_TRUE(engine_.allocateBatchID(1, b).ok());
    Status s = engine_.postPlan(b, plan);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.toString();
    ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus st;
    ASSERT_TRUE(engine_.getTransferStatus(b, 0, st).ok());
    ASSERT_EQ(st.s, TransferState::kCompleted) << "round " << round << ": " << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, n * len);
    ASSERT_TRUE(engine_.freeBatchID(b).ok());
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(dst.check(2 * i * len, len, kSeed, at - base_ + i * len), -1) << "round " << round << ", block " << i;
  }
  ASSERT_TRUE(engine_.releasePlan(plan).ok());
}

TEST_P(TransportSuite, prepared_write_plan_posted_three_times_lands_each_time) {
  const size_t n = 1500, len = 2000;
  SuiteBuffer src(loc(), n * 4096), back(loc(), n * len);
  ASSERT_TRUE(engine_.registerLocalMemory(src.p, src.n, src.location(), false).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(back.p, back.n, back.location(), false).ok());
  const uint64_t at = base_ + (64u << 20);
  std::vector<uint64_t> l(n), r(n);
  for (size_t i = 0; i < n; ++i) {
    l[i] = reinterpret_cast<uint64_t>(src.p) + i * 4096;
    r[i] = at + (n - 1 - i) * len;  // packed at the target, reversed
  }
  PlanID plan, readback;
  ASSERT_TRUE(engine_.prepareBlocks(OpCode::kWrite, seg_, BlockArrays{l.data(), r.data(), nullptr, len, n}, plan).ok());
  ASSERT_TRUE(engine_.prepareStrided(OpCode::kRead, seg_, {back.p, at, n * len, n * len, n * len, 1}, readback).ok());
  for (uint64_t round = 0; round < 3; ++round) {
    src.fill(0, src.n, 50 + round);
    back.zero();
    BatchID b;
    ASSERT_TRUE(engine_.allocateBatchID(2, b).ok());
    ASSERT_TRUE(engine_.postPlan(b, plan).ok());
    ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
    ASSERT_TRUE(engine_.postPlan(b, readback).ok());
    ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus st;
    ASSERT_TRUE(engine_.getBatchTransferStatus(b, st).ok());
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    ASSERT_TRUE(engine_.freeBatchID(b).ok());
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(back.check((n - 1 - i) * len, len, 50 + round, i * 4096), -1) << "round " << round << " block " << i;
  }
  ASSERT_TRUE(engine_.releasePlan(plan).ok());
  ASSERT_TRUE(engine_.releasePlan(readback).ok());
}

}  // namespace hawser::test
