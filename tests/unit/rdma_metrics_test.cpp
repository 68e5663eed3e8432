// The rdma transport's metrics, over the software verbs provider: a
// connection (a set of QPs) counted per peer, a QP lost to an error
// completion counted as a connection failure and replaced, the retried
// slice counted in hawser_retries_total, and the bytes exact.
#include <gtest/gtest.h>

#if HAWSER_TEST_RDMA

#include <map>
#include <string>

#include "common/util.h"
#include "hawser/engine.h"
#include "softverbs/soft_env.h"
#include "transport/rdma/rdma_stats.h"

namespace hawser {
namespace {

using test::Buffer;
using test::SoftVerbsEnv;

// The value of the series of `name` whose labels include `want`; -1 if none.
double valueOf(TransferEngine& e, const std::string& name, const std::map<std::string, std::string>& want) {
  return test::metricValue(e.stats(), name, want);
}

TEST(RdmaMetrics, connections_retries_and_bytes_are_counted_per_peer) {
  SoftVerbsEnv env("sv0");
  EngineOptions o;
  o.config = {{"transport", "rdma"}, {"rdma.retry_limit", "3"}};
  Buffer tmem(4 << 20), lmem(4 << 20);
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0, o).ok());
  ASSERT_TRUE(init.init("p2p", "init", "127.0.0.1", 0, o).ok());
  ASSERT_TRUE(target.registerLocalMemory(tmem.p, tmem.n, "cpu:0", true).ok());
  ASSERT_TRUE(init.registerLocalMemory(lmem.p, lmem.n, "cpu:0", false).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  const uint64_t base = reinterpret_cast<uint64_t>(tmem.p);
  const std::string peer = target.segmentName();
  const std::map<std::string, std::string> rp = {{"transport", "rdma"}, {"peer", peer}};

  test::fillPattern(tmem.p, 1 << 20, 8);
  auto st = test::runBatch(init, seg, {{OpCode::kRead, lmem.p, seg, base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(valueOf(init, "hawser_connects_total", rp), 1);
  EXPECT_EQ(valueOf(init, "hawser_connections", rp), 1);
  EXPECT_EQ(valueOf(init, "hawser_retries_total", rp), 0);

  // One error completion: the QPs go to ERR, the slice is retried on new ones.
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 1 IBV_WC_GENERAL_ERR"), 0);
  test::fillPattern(lmem.p, 4 << 20, 9);
  st = test::runBatch(init, seg, {{OpCode::kWrite, lmem.p, seg, base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(tmem.p, 4 << 20, 9), -1);
  EXPECT_EQ(valueOf(init, "hawser_connection_failures_total", rp), 1);
  EXPECT_EQ(valueOf(init, "hawser_connects_total", rp), 2);
  EXPECT_EQ(valueOf(init, "hawser_connections", rp), 1);
  EXPECT_GE(valueOf(init, "hawser_retries_total", rp), 1);
  EXPECT_EQ(valueOf(init, "hawser_retries_total", rp), double(rdma::statsOf(test::transportCounters(init, "rdma")).slice_retries));
  auto dir = [&](const char* d) {
    auto m = rp;
    m["direction"] = d;
    return m;
  };
  EXPECT_EQ(valueOf(init, "hawser_transferred_bytes_total", dir("read")), 1 << 20);
  EXPECT_EQ(valueOf(init, "hawser_transferred_bytes_total", dir("write")), 4 << 20);
  EXPECT_EQ(valueOf(init, "hawser_tasks_total", dir("write")), 1);
  EXPECT_EQ(valueOf(init, "hawser_inflight_slices", rp), 0);
}

}  // namespace
}  // namespace hawser

#else
TEST(RdmaMetrics, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
