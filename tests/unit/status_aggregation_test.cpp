// A task's status aggregates its slices: FAILED > TIMEOUT > CANCELED >
// INVALID whatever order they end in; only completed slices count toward
// transferred_bytes; COMPLETED only when every byte is.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/engine_pair.h"
#include "engine/batch.h"

using namespace hawser;
using namespace hawser::test;

TEST(StatusAggregation, failure_rank_orders_failed_timeout_canceled_invalid) {
  EXPECT_GT(failureRank(TransferState::kFailed), failureRank(TransferState::kTimeout));
  EXPECT_GT(failureRank(TransferState::kTimeout), failureRank(TransferState::kCanceled));
  EXPECT_GT(failureRank(TransferState::kCanceled), failureRank(TransferState::kInvalid));
  EXPECT_EQ(failureRank(TransferState::kCompleted), 0);
}

TEST(StatusAggregation, worst_failure_wins_whatever_the_arrival_order) {
  EnginePair p(1 << 20, 1 << 20, true, 4096);
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  std::vector<TransferState> ends = {TransferState::kCompleted, TransferState::kInvalid, TransferState::kCanceled,
                                     TransferState::kTimeout, TransferState::kFailed};
  std::sort(ends.begin(), ends.end());
  int perms = 0;
  do {
    // Slice i of the task ends in ends[i]; slices run in order.
    p.fake_init->setVerdict([&](const FakeTransport::Slice& s) { return ends[s.index]; });
    auto st = runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, p.remote(), 5 * 4096}});
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].s, TransferState::kFailed);
    EXPECT_EQ(st[0].transferred_bytes, 4096u);  // the one completed slice
    EXPECT_EQ(st[0].error.code(), Code::kIoError);
    ++perms;
  } while (std::next_permutation(ends.begin(), ends.end()));
  EXPECT_EQ(perms, 120);
}

TEST(StatusAggregation, timeout_beats_canceled_and_invalid) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  std::vector<TransferState> ends = {TransferState::kInvalid, TransferState::kTimeout, TransferState::kCanceled,
                                     TransferState::kCompleted};
  p.fake_init->setVerdict([&](const FakeTransport::Slice& s) { return ends[s.index]; });
  auto st = runBatch(p.init, p.seg, {{OpCode::kRead, p.local(), p.seg, p.remote(), 4 * 4096}});
  EXPECT_EQ(st[0].s, TransferState::kTimeout);
  EXPECT_EQ(st[0].transferred_bytes, 4096u);
}

TEST(StatusAggregation, batch_status_ranks_tasks_and_sums_bytes) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  p.fake_init->setVerdict([&](const FakeTransport::Slice& s) {
    return s.remote == p.remote(8192) ? TransferState::kCanceled : TransferState::kCompleted;
  });
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(3, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(0), p.seg, p.remote(0), 4096},
                                        {OpCode::kRead, p.local(8192), p.seg, p.remote(8192), 4096},
                                        {OpCode::kRead, p.local(16384), p.seg, p.remote(16384), 100}})
                  .ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(10)).ok());
  TransferStatus agg;
  ASSERT_TRUE(p.init.getBatchTransferStatus(b, agg).ok());
  EXPECT_EQ(agg.s, TransferState::kCanceled);
  EXPECT_EQ(agg.transferred_bytes, 4096u + 100u);
  TransferStatus t0;
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, t0).ok());
  EXPECT_EQ(t0.s, TransferState::kCompleted);
  EXPECT_EQ(t0.transferred_bytes, 4096u);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST(StatusAggregation, task_is_pending_until_every_slice_ends) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  p.fake_init->hold(true);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.local(), p.seg, p.remote(), 3 * 4096}}).ok());
  TransferStatus st;
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kPending);
  EXPECT_EQ(p.init.waitTransfer(b, std::chrono::milliseconds(50)).code(), Code::kTimeout);
  p.fake_init->hold(false);
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(st.transferred_bytes, 3u * 4096);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST(StatusAggregation, completed_agrees_with_status_in_every_state) {
  // Task::completed() (transferSync's shortcut when no statuses are asked
  // for) is status().s == COMPLETED: not before submission, not while a
  // slice is out, not after a failed slice, not when a completed slice
  // reported fewer bytes than the request's length.
  Batch b(1, 5, 10);
  {
    std::lock_guard sl(b.submitMutex());
    for (size_t i = 0; i < 5; ++i) {
      b.task(i).reset(TransferRequest{OpCode::kRead, nullptr, 0, 0, 8192}, i, nullptr, nullptr, -1);
      b.task(i).setSliceCount(2);
    }
  }
  auto agree = [&](size_t i, TransferState want) {
    EXPECT_EQ(b.task(i).status().s, want) << i;
    EXPECT_EQ(b.task(i).completed(), want == TransferState::kCompleted) << i;
  };
  agree(0, TransferState::kWaiting);
  {
    std::lock_guard sl(b.submitMutex());
    b.commit(5, 10);
  }
  agree(0, TransferState::kPending);
  b.task(0).completeSlice(TransferState::kCompleted, 4096);
  agree(0, TransferState::kPending);  // one slice of two
  b.task(0).completeSlice(TransferState::kCompleted, 4096);
  agree(0, TransferState::kCompleted);
  b.task(1).completeSlice(TransferState::kCompleted, 4096);
  b.task(1).completeSlice(TransferState::kCanceled, 0);
  agree(1, TransferState::kCanceled);
  b.task(2).completeSlice(TransferState::kCompleted, 4096);
  b.task(2).completeSlice(TransferState::kCompleted, 100);  // short: never COMPLETED
  agree(2, TransferState::kFailed);
  b.task(3).completeSlices(2, 8192);
  agree(3, TransferState::kCompleted);
  b.task(4).failSlices(2, TransferState::kTimeout, Status(Code::kTimeout, "late"));
  agree(4, TransferState::kTimeout);
  b.dropSubBatches();
}

TEST(StatusAggregation, a_task_used_again_after_a_failure_reports_only_its_new_outcome) {
  // A freed batch is kept and handed out again (batch.recycle), its tasks
  // with it; a task's error is reset only when a failure had set it
  // (Task::resetBorrowed): the next use must report its own outcome, never
  // the earlier failure.
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  const std::vector<TransferRequest> req = {{OpCode::kWrite, p.local(), p.seg, p.remote(), 4096}};
  auto run = [&](TransferState verdict) {
    p.fake_init->setVerdict([verdict](const FakeTransport::Slice&) { return verdict; });
    auto st = runBatch(p.init, p.seg, req);
    EXPECT_EQ(st.size(), 1u);
    return st.empty() ? TransferStatus{} : st[0];
  };
  for (int i = 0; i < 3; ++i) {
    TransferStatus failed = run(TransferState::kFailed);
    EXPECT_EQ(failed.s, TransferState::kFailed);
    EXPECT_EQ(failed.error.message(), "FAILED");
    TransferStatus done = run(TransferState::kCompleted);
    EXPECT_EQ(done.s, TransferState::kCompleted);
    EXPECT_TRUE(done.error.ok()) << done.error.toString();
    EXPECT_EQ(done.transferred_bytes, 4096u);
    TransferStatus late = run(TransferState::kTimeout);
    EXPECT_EQ(late.s, TransferState::kTimeout);
    EXPECT_EQ(late.error.message(), "TIMEOUT");  // its own, not the earlier FAILED
  }
  std::vector<TransferStatus> statuses;
  p.fake_init->setVerdict([](const FakeTransport::Slice&) { return TransferState::kCompleted; });
  EXPECT_TRUE(p.init.transferSync(req, std::chrono::seconds(10), &statuses).ok());
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_TRUE(statuses[0].error.ok()) << statuses[0].error.toString();
}
