// The rdma transport between processes, over the software verbs provider:
// the target is a child process (tests/rdma/rdma_child.cpp, a helper
// program) that registers seeded memory and then only answers
// checksum/registration commands on a pipe; its CPU takes no part in the
// RDMA READs and WRITEs. The two processes are two hosts: each has soft NICs
// of its own (the parent sv*, the child pv*), so a NIC failure injected on
// one side leaves the other side's NICs alone.
#include <gtest/gtest.h>

#if HAWSER_TEST_RDMA

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "softverbs/soft_env.h"
#include "transport/rdma/rdma_stats.h"

using namespace hawser;
using hawser::test::Buffer;
using hawser::test::SoftVerbsEnv;
using hawser::detail::EngineAccess;

namespace {

// ---------------------------------------------------------------- parent side
class ChildTarget {
 public:
  ~ChildTarget() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (cmd_ >= 0) ::close(cmd_);
    if (out_ >= 0) ::close(out_);
  }

  // Starts the child with `bytes` of memory seeded with `seed`, on the soft
  // NICs `devices`.
  bool start(size_t bytes, uint64_t seed, const std::string& devices) {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return false;
    const std::string cmd_fd = std::to_string(to_child[0]), out_fd = std::to_string(from_child[1]);
    const std::string n = std::to_string(bytes), sd = std::to_string(seed);
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      ::setenv("HAWSER_SOFTVERBS_DEVICES", devices.c_str(), 1);
      ::execl(HAWSER_RDMA_CHILD, HAWSER_RDMA_CHILD, cmd_fd.c_str(), out_fd.c_str(), n.c_str(), sd.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    cmd_ = to_child[1];
    out_ = from_child[0];
    first_line_ = readLine(30000);
    std::istringstream in(first_line_);
    std::string tag;
    in >> tag >> segment_ >> base_;
    return tag == "segment" && !segment_.empty() && base_ != 0;
  }
  // What the child said first ("segment NAME BASE", or "error WHAT").
  const std::string& firstLine() const { return first_line_; }

  std::string request(const std::string& cmd, int timeout_ms = 30000) {
    std::string l = cmd + "\n";
    if (::write(cmd_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "";
    return readLine(timeout_ms);
  }

  void signal(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }

  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  const std::string& segment() const { return segment_; }
  uint64_t base() const { return base_; }

 private:
  std::string readLine(int timeout_ms) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char c;
      if (::read(out_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return "";
  }

  pid_t pid_ = -1;
  int cmd_ = -1, out_ = -1;
  std::string segment_, first_line_;
  uint64_t base_ = 0;
};

class RdmaMultiProcess : public ::testing::Test {
 protected:
  // This process on the soft NICs `devices`, the child target on
  // `child_devices` (same registry: one fabric, two hosts).
  void start(const std::string& devices, const std::string& child_devices, size_t bytes, uint64_t seed,
             std::vector<std::pair<std::string, std::string>> cfg = {}) {
    env_ = std::make_unique<SoftVerbsEnv>(devices);
    for (auto& [k, v] : cfg) env_->set(Config::envName(k), v);
    ASSERT_TRUE(child_.start(bytes, seed, child_devices)) << "child target did not start: " << child_.firstLine();
    EngineOptions o;
    o.config["transport"] = "rdma";
    Status s = engine_.init("p2p", "parent", "127.0.0.1", 0, o);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(engine_.openSegment(child_.segment(), seg_).ok());
  }
  void TearDown() override {
    EngineAccess::of(engine_).shutdown();
    env_.reset();
  }
  // This process's engine's rdma counters (the child's count in the child).
  rdma::StatsSnapshot stats() const { return rdma::statsOf(test::transportCounters(engine_, "rdma")); }

  std::unique_ptr<SoftVerbsEnv> env_;
  ChildTarget child_;
  TransferEngine engine_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(RdmaMultiProcess, checksummed_transfers_over_two_nics) {
  const size_t bytes = 64u << 20;
  start("sv0,sv1", "pv0,pv1", bytes, 9);
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i)
    reqs.push_back({OpCode::kRead, local.p + i * (4u << 20), seg_, child_.base() + i * (4u << 20), 4u << 20});
  for (auto& st : test::runBatch(engine_, seg_, reqs, 60000))
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(std::to_string(test::checksum(local.p, bytes)), child_.request("sum 0 " + std::to_string(bytes)));
  EXPECT_EQ(test::checkPattern(local.p, bytes, 9), -1);
  // Writes at an unaligned offset, verified by the child itself.
  const size_t wlen = 32u << 20, woff = (1u << 20) + 3;
  test::fillPattern(local.p, wlen, 21);
  auto st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base() + woff, wlen}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(child_.request("check 21 " + std::to_string(woff) + " " + std::to_string(wlen)), "ok");
  // Each task's slices alternate over both NICs here, rail-aligned with the
  // peer's (sv0 -> pv0, sv1 -> pv1): 1024 READ + 512 WRITE slices.
  const rdma::StatsSnapshot s = stats();
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ(s.wrs_posted[n], 768u) << "local NIC " << n;
    EXPECT_EQ(s.peer_nic_wrs[n], 768u) << "peer NIC " << n;
  }
  EXPECT_EQ(s.handshakes_sent, 2u);  // one endpoint per NIC pair used
  EXPECT_EQ(s.slice_retries + s.slice_requeues, 0u);
}

TEST_F(RdmaMultiProcess, wrong_rkey_is_refused_at_once_as_out_of_range) {
  start("sv0,sv1", "pv0,pv1", 1 << 20, 3, {{"rdma.retry_limit", "3"}});
  Buffer local(1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  // Every work request of this host presents a corrupted rkey.
  ASSERT_EQ(SoftVerbsEnv::control("badkey sv0 1000000"), 0);
  ASSERT_EQ(SoftVerbsEnv::control("badkey sv1 1000000"), 0);
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 65536}});
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  // No other NIC pair makes the target accept a key it refused: not retried.
  EXPECT_EQ(st[0].error.code(), Code::kOutOfRange) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("IBV_WC_REM_ACCESS_ERR"), std::string::npos) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("not retried"), std::string::npos) << st[0].error.toString();
  EXPECT_EQ(stats().slice_retries, 0u);
  EXPECT_EQ(st[0].transferred_bytes, 0u);
  ASSERT_EQ(SoftVerbsEnv::control("clear sv0"), 0);
  ASSERT_EQ(SoftVerbsEnv::control("clear sv1"), 0);
  // The responder QPs went to ERR with the NAKs; fresh endpoints serve again.
  st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 65536}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(local.p, 65536, 3), -1);
}

TEST_F(RdmaMultiProcess, deregistered_region_is_a_remote_access_error) {
  start("sv0,sv1", "pv0,pv1", 1 << 20, 4, {{"rdma.retry_limit", "3"}});
  Buffer local(1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), 4096}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(child_.request("revoke"), "ok");  // its MRs are gone on both NICs
  st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), 4096}});
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_NE(st[0].error.message().find("IBV_WC_REM_ACCESS_ERR"), std::string::npos) << st[0].error.toString();
}

TEST_F(RdmaMultiProcess, unregistered_region_is_never_written) {
  start("sv0,sv1", "pv0,pv1", 1 << 20, 8, {{"rdma.retry_limit", "3"}});
  Buffer local(1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 4096}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(child_.request("unreg"), "ok");
  // The owner's change notice reaches this engine asynchronously; take it
  // here, so the cached descriptor stays stale and the write reaches the
  // NIC, which must refuse it (the window before a notice arrives).
  ASSERT_TRUE(test::eventually([&] { return detail::EngineAccess::of(engine_).store()->mayHaveChanged(child_.segment(), 0); }))
      << "no change notice from the target";
  test::fillPattern(local.p, 4096, 99);
  Status s;
  st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), 4096}}, 30000, &s);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].transferred_bytes, 0u);
  EXPECT_NE(st[0].error.message().find("IBV_WC_REM_ACCESS_ERR"), std::string::npos) << st[0].error.toString();
  EXPECT_EQ(child_.request("check 8 0 4096"), "ok");  // untouched
  ASSERT_TRUE(engine_.closeSegment(seg_).ok());
  ASSERT_TRUE(engine_.openSegment(child_.segment(), seg_).ok());
  test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), 4096}}, 5000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
}

TEST_F(RdmaMultiProcess, peer_killed_fails_the_tasks_with_the_verbs_status) {
  start("sv0,sv1", "pv0,pv1", 16 << 20, 5, {{"rdma.retry_limit", "3"}});
  Buffer local(16 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 16 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  // Kill the target while a batch is in flight: everything ends, nothing hangs.
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(64, b).ok());
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 64; ++i)
    reqs.push_back({OpCode::kRead, local.p + (i % 16) * (1 << 20), seg_, child_.base() + (i % 16) * (1 << 20),
                    1 << 20});
  ASSERT_TRUE(engine_.submitTransfer(b, reqs).ok());
  child_.kill();
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
  TransferStatus agg;
  ASSERT_TRUE(engine_.getBatchTransferStatus(b, agg).ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus t;
    ASSERT_TRUE(engine_.getTransferStatus(b, i, t).ok());
    EXPECT_TRUE(t.s == TransferState::kCompleted || t.s == TransferState::kFailed) << stateName(t.s);
  }
  EXPECT_TRUE(engine_.freeBatchID(b).ok());
  // Connected QPs towards the dead process: the requester's retries run out.
  st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 1 << 20}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  const std::string& msg = st[0].error.message();
  EXPECT_TRUE(msg.find("IBV_WC_RETRY_EXC_ERR") != std::string::npos || msg.find("handshake") != std::string::npos)
      << msg;
  EXPECT_LT(st[0].transferred_bytes, 1u << 20);
}

TEST_F(RdmaMultiProcess, peer_gone_before_the_handshake_fails_every_slice_at_once_without_retries) {
  start("sv0,sv1", "pv0,pv1", 4 << 20, 4, {{"rdma.retry_limit", "8"}});
  Buffer local(4 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  // The descriptor is cached, no endpoint exists yet, and nothing listens
  // at the peer's address any more: each NIC pair's handshake is refused.
  child_.kill();
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 4; ++i)
    reqs.push_back({OpCode::kRead, local.p + i * (1 << 20), seg_, child_.base() + i * (1 << 20), 1 << 20});
  auto st = test::runBatch(engine_, seg_, reqs, 20000);
  ASSERT_EQ(st.size(), reqs.size());
  for (const auto& t : st) {
    ASSERT_EQ(t.s, TransferState::kFailed) << stateName(t.s);
    EXPECT_EQ(t.error.code(), Code::kUnavailable) << t.error.toString();
    EXPECT_NE(t.error.message().find("the peer is gone"), std::string::npos) << t.error.message();
    EXPECT_NE(t.error.message().find("Connection refused"), std::string::npos) << t.error.message();
    EXPECT_EQ(t.transferred_bytes, 0u);
  }
  // No slice was retried: one handshake per endpoint, not retry_limit of them.
  const rdma::StatsSnapshot s = stats();
  EXPECT_EQ(s.slice_retries, 0u);
  EXPECT_LE(s.handshakes_sent, 2u);
  EXPECT_GE(s.handshakes_sent, 1u);
}

TEST_F(RdmaMultiProcess, cancel_while_the_handshake_hangs_cancels_the_queued_slices) {
  start("sv0", "pv0", 4 << 20, 10, {{"rdma.connect_timeout_ms", "3000"}});
  Buffer local(4 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  // The target is stopped before any endpoint exists: the handshake hangs and
  // every slice waits, unposted, on the connecting endpoint.
  ASSERT_TRUE(test::stopProcess(child_.pid())) << "the target did not stop";
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(4, b).ok());
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 4; ++i)
    reqs.push_back({OpCode::kRead, local.p + i * (1 << 20), seg_, child_.base() + i * (1 << 20), 1 << 20});
  ASSERT_TRUE(engine_.submitTransfer(b, reqs).ok());
  // The handshake request is out (and will not be answered): the slices
  // wait on the connecting endpoint.
  ASSERT_TRUE(test::eventually([this] { return stats().handshakes_sent >= 1; }))
      << "no handshake was started";
  ASSERT_TRUE(engine_.cancelTransfer(b).ok());
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(2)).ok()) << "queued slices were not canceled";
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus t;
    ASSERT_TRUE(engine_.getTransferStatus(b, i, t).ok());
    EXPECT_EQ(t.s, TransferState::kCanceled);
    EXPECT_EQ(t.transferred_bytes, 0u);
  }
  EXPECT_TRUE(engine_.freeBatchID(b).ok());  // nothing references the memory
  child_.signal(SIGCONT);
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), 4 << 20}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(local.p, 4 << 20, 10), -1);
}

TEST_F(RdmaMultiProcess, nic_that_disappears_is_replaced_by_the_second_nic) {
  const size_t bytes = 16u << 20;
  start("sv0,sv1", "pv0,pv1", bytes, 6, {{"rdma.retry_limit", "2"}});
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(SoftVerbsEnv::control("down sv0"), 0);  // this host's NIC only: the peer keeps pv0
  std::memset(local.p, 0, bytes);
  st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(std::to_string(test::checksum(local.p, bytes)), child_.request("sum 0 " + std::to_string(bytes)));
  test::fillPattern(local.p, bytes, 44);
  const uint64_t sv1_before = stats().wrs_posted[1];
  st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(child_.request("check 44 0 " + std::to_string(bytes)), "ok");
  // sv0 is gone from this engine's routes: all 256 WRITE slices took sv1.
  EXPECT_EQ(stats().wrs_posted[1] - sv1_before, 256u);
}

TEST_F(RdmaMultiProcess, nic_that_disappears_on_the_peer_only_is_replaced_by_its_other_nic) {
  const size_t bytes = 16u << 20;
  start("sv0,sv1", "pv0,pv1", bytes, 12, {{"rdma.retry_limit", "2"}});
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(SoftVerbsEnv::control("down pv0"), 0);  // the peer's NIC; both of ours stay
  std::memset(local.p, 0, bytes);
  const rdma::StatsSnapshot before = stats();
  st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(std::to_string(test::checksum(local.p, bytes)), child_.request("sum 0 " + std::to_string(bytes)));
  rdma::StatsSnapshot s = stats();
  s -= before;  // this READ's counts only
  // Our NICs are fine: both still carry slices. What went to pv0 timed out
  // (or was flushed behind that) and was retried towards pv1, where every
  // one of the 256 slices landed.
  EXPECT_GT(s.wrs_posted[0], 0u);
  EXPECT_GT(s.wrs_posted[1], 0u);
  EXPECT_GT(s.peer_nic_wrs[0], 0u) << "nothing was sent to the dead peer NIC (our descriptor of it is stale)";
  EXPECT_EQ(s.peer_nic_wrs[0],
            s.wc_errors[0] + s.wc_errors[1] + s.wc_flushes[0] + s.wc_flushes[1])
      << "every WR sent to pv0 ended in an error or a flush";
  EXPECT_EQ(s.peer_nic_wrs[1], 256u) << "every slice landed through pv1, once";
  test::fillPattern(local.p, bytes, 45);
  st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(child_.request("check 45 0 " + std::to_string(bytes)), "ok");
}

TEST_F(RdmaMultiProcess, one_nic_here_stripes_over_the_peers_three) {
  // Unequal NIC counts: 96 slices from sv0 spread evenly over pv0..pv2.
  const size_t bytes = 6u << 20;
  start("sv0", "pv0,pv1,pv2", bytes, 13);
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(local.p, bytes, 13), -1);
  const rdma::StatsSnapshot s = stats();
  EXPECT_EQ(s.wrs_posted[0], 96u);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(s.peer_nic_wrs[p], 32u) << "peer NIC pv" << p;
  EXPECT_EQ(s.handshakes_sent, 3u);
}

TEST_F(RdmaMultiProcess, three_nics_here_stripe_onto_the_peers_one) {
  const size_t bytes = 6u << 20;
  start("sv0,sv1,sv2", "pv0", bytes, 14);
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  test::fillPattern(local.p, bytes, 15);
  auto st = test::runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(child_.request("check 15 0 " + std::to_string(bytes)), "ok");
  const rdma::StatsSnapshot s = stats();
  for (int n = 0; n < 3; ++n) EXPECT_EQ(s.wrs_posted[n], 32u) << "local NIC sv" << n;
  EXPECT_EQ(s.peer_nic_wrs[0], 96u);
}

TEST_F(RdmaMultiProcess, injected_error_completions_are_retried_on_the_other_nic_and_counted_there) {
  // The buffer is on node 0, sv0 too: every first attempt goes through sv0,
  // so sv1 carries retries only.
  const size_t bytes = 8u << 20;
  start("sv0:numa=0,sv1:numa=1", "pv0,pv1", bytes, 7, {{"rdma.retry_limit", "2"}});
  Buffer local(bytes);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 5 IBV_WC_RETRY_EXC_ERR"), 0);
  auto st = test::runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, child_.base(), bytes}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(local.p, bytes, 7), -1);
  const rdma::StatsSnapshot s = stats();
  EXPECT_EQ(s.wc_errors[0], 5u);
  EXPECT_EQ(s.slice_retries, 5u);
  EXPECT_EQ(s.retries_to[1], 5u);
  EXPECT_EQ(s.wrs_posted[1], 5u);
  // Flushed slices went again where they were (no attempt used).
  EXPECT_EQ(s.wc_flushes[0], s.slice_requeues);
  EXPECT_EQ(s.wrs_posted[0], 128u + s.slice_requeues);
  EXPECT_EQ(s.wc_errors[1] + s.wc_flushes[1], 0u);
}

}  // namespace

#else
TEST(RdmaMultiProcess, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
