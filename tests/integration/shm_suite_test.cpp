// The shared transport suite over shm (a `hawser serve` child process on
// this host, its memory shareable): once with the target's memory mapped
// here (memcpy), once with shm.shared_mappings off (cross-memory attach). And
// what only shm shows: it is picked for a peer of this host by itself, GPU
// memory never goes to it, a dead or closed peer's table is unmapped, and
// where the target refuses an initiator (another user) the engine falls back
// to tcp with one log line that names the reason.
#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <sstream>
#include <thread>

#include "common/log_capture.h"
#include "common/transport_suite.h"

using hawser::test::SuiteParam;
using hawser::test::TransportSuite;

INSTANTIATE_TEST_SUITE_P(Shm, TransportSuite, ::testing::Values(SuiteParam{"shm", {}, {}}), hawser::test::suiteName);
INSTANTIATE_TEST_SUITE_P(ShmCma, TransportSuite,
                         ::testing::Values(SuiteParam{"shm", {"HAWSER_SHM_SHARED_MAPPINGS=false"}, {}}),
                         hawser::test::suiteName);

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 777;
constexpr size_t kTarget = 64u << 20;

class ShmPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(serve_.start({"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(kTarget), "--fill-seed",
                              std::to_string(kSeed)}));
    std::string seg = serve_.waitFor("segment: ", 20000);
    ASSERT_FALSE(seg.empty()) << "hawser serve did not start";
    ASSERT_FALSE(serve_.waitFor("ready", 20000).empty());
    segment_ = seg.substr(9);
  }
  // Opens the segment in `e` and returns the base address of its buffer.
  void open(TransferEngine& e, SegmentID& seg, uint64_t& base) {
    ASSERT_TRUE(e.init("p2p", "client", "127.0.0.1", 0).ok());
    ASSERT_TRUE(e.openSegment(segment_, seg).ok());
    std::vector<SegmentBuffer> bufs;
    ASSERT_TRUE(e.segmentBuffers(seg, bufs).ok());
    ASSERT_EQ(bufs.size(), 1u);
    base = bufs[0].addr;
  }
  // open(), then `local` registered in `e`.
  void openWith(TransferEngine& e, SegmentID& seg, uint64_t& base, Buffer& local) {
    ASSERT_NO_FATAL_FAILURE(open(e, seg, base));
    ASSERT_TRUE(e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  }
  Child serve_;
  std::string segment_;
};

TEST_F(ShmPeer, a_peer_of_this_host_gets_shm_for_host_memory_and_nothing_for_gpu_memory) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  ASSERT_NO_FATAL_FAILURE(open(e, seg, base));
  RouteExplanation host, gpu;
  ASSERT_TRUE(e.explainRoute(seg, "cpu:0", host).ok());
  EXPECT_EQ(host.transport, "shm") << host.why;
  ASSERT_TRUE(e.explainRoute(seg, "cuda:0", gpu).ok());
  EXPECT_NE(gpu.transport, "shm") << gpu.why;
  EXPECT_NE(gpu.why.find("shm: does not move local GPU memory"), std::string::npos) << gpu.why;

  Buffer local(4u << 20);
  ASSERT_TRUE(e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, base + 4096, local.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(checkPattern(local.p, local.n, kSeed, 4096), -1);
  EXPECT_EQ(counter(e, "shm", "bytes_read"), local.n);
  EXPECT_EQ(counter(e, "tcp", "slices_completed"), 0u) << "nothing went over tcp";
}

TEST_F(ShmPeer, a_killed_peer_is_noticed_its_table_unmapped_and_new_tasks_fail_at_once) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  Buffer local(1u << 20);
  ASSERT_NO_FATAL_FAILURE(openWith(e, seg, base, local));
  auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, base, local.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_TRUE(mapsShmTableOf(serve_.pid)) << "the peer's registration table is mapped while it lives";
  const pid_t dead = serve_.pid;
  serve_.kill(SIGKILL);
  serve_.wait();
  // No transfer needed: the engine notices the exit (pidfd) and unmaps.
  EXPECT_TRUE(eventually([&] { return !mapsShmTableOf(dead); })) << "the dead peer's table is still mapped";
  EXPECT_TRUE(eventually([&] { return counter(e, "shm", "peers_gone") == 1; }));
  Status submit;
  auto t0 = std::chrono::steady_clock::now();
  st = runBatch(e, seg, {{OpCode::kWrite, local.p, seg, base, local.n}}, 20000, &submit);
  ASSERT_TRUE(submit.ok()) << submit.toString();
  EXPECT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].error.code(), Code::kUnavailable) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("exited"), std::string::npos) << st[0].error.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(ShmPeer, closing_the_segment_unmaps_the_peers_table) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  ASSERT_NO_FATAL_FAILURE(open(e, seg, base));
  ASSERT_TRUE(mapsShmTableOf(serve_.pid));
  ASSERT_TRUE(e.closeSegment(seg).ok());
  EXPECT_TRUE(eventually([&] { return !mapsShmTableOf(serve_.pid); }));
}

// Freed batches are kept for reuse with the views their submits resolved
// (batch.recycle): closing the segment makes them let go, though no thread
// submits again. Both ways of freeing: transferSync's and freeBatchID.
TEST_F(ShmPeer, closing_the_segment_after_transfers_unmaps_the_peers_table_though_freed_batches_are_kept) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  Buffer local(1u << 20);
  ASSERT_NO_FATAL_FAILURE(openWith(e, seg, base, local));
  for (int round = 0; round < 3; ++round) {  // the second and third reuse the first's batch and view
    Status s = e.transferSync({{OpCode::kRead, local.p, seg, base + 4096, local.n}}, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_EQ(checkPattern(local.p, local.n, kSeed, 4096), -1) << "round " << round;
    std::memset(local.p, 0, local.n);
  }
  std::thread([&] {
    auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, base, 4096}});
    EXPECT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  }).join();
  ASSERT_TRUE(mapsShmTableOf(serve_.pid));
  ASSERT_TRUE(e.closeSegment(seg).ok());
  EXPECT_TRUE(eventually([&] { return !mapsShmTableOf(serve_.pid); }))
      << "a freed batch kept for reuse still holds the closed segment's view";
  // Opened again: a new id, a new view; the kept batch does not use the old one.
  SegmentID again;
  ASSERT_TRUE(e.openSegment(segment_, again).ok());
  EXPECT_NE(again, seg);
  Status s = e.transferSync({{OpCode::kRead, local.p, again, base + 8192, local.n}}, std::chrono::seconds(20));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(local.p, local.n, kSeed, 8192), -1);
  s = e.transferSync({{OpCode::kRead, local.p, seg, base, 4096}}, std::chrono::seconds(20));
  EXPECT_EQ(s.code(), Code::kSegmentNotFound) << s.toString();
}

// One thread's batches, each freed and handed out again with what it kept
// (its shm sub-batch, the work of its last submit copied here): submits the
// thread copies of more and fewer requests than the last, one the copy
// threads cut, and a batch of two submits, reads and writes, every byte
// checked.
TEST_F(ShmPeer, a_kept_batch_carries_submits_of_every_size_and_kind_byte_for_byte) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  Buffer local(16u << 20);
  ASSERT_NO_FATAL_FAILURE(openWith(e, seg, base, local));
  struct Shape {
    size_t block, count;
  };
  // Inline (up to shm.inline_bytes 1M), then cut by the copy threads (8 MiB), then inline again.
  const Shape shapes[] = {{4096, 4}, {65536, 16}, {256, 3}, {8u << 20, 1}, {1000, 40}, {65536, 2}};
  uint64_t seed = 1;
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(fmt::format("{} x {}", sh.count, sh.block));
    // Reads: request i reads target block (count - 1 - i) into local block i.
    std::memset(local.p, 0, local.n);
    std::vector<TransferRequest> reads, writes;
    for (size_t i = 0; i < sh.count; ++i) {
      const uint64_t remote = base + (sh.count - 1 - i) * sh.block;
      reads.push_back({OpCode::kRead, local.p + i * sh.block, seg, remote, sh.block});
      writes.push_back({OpCode::kWrite, local.p + i * sh.block, seg, remote, sh.block});
    }
    Status s = e.transferSync(reads, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
    for (size_t i = 0; i < sh.count; ++i)
      ASSERT_EQ(checkPattern(local.p + i * sh.block, sh.block, kSeed, (sh.count - 1 - i) * sh.block), -1) << i;
    // Writes of a new pattern, then read back into the other half of the buffer.
    ++seed;
    for (size_t i = 0; i < sh.count; ++i) fillPattern(local.p + i * sh.block, sh.block, seed, (sh.count - 1 - i) * sh.block);
    s = e.transferSync(writes, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
    const size_t half = local.n / 2;
    std::memset(local.p + half, 0, half);
    s = e.transferSync({{OpCode::kRead, local.p + half, seg, base, sh.block * sh.count}}, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
    EXPECT_EQ(checkPattern(local.p + half, sh.block * sh.count, seed, 0), -1);
    // The target as it was, for the next shape.
    fillPattern(local.p, sh.block * sh.count, kSeed, 0);
    s = e.transferSync({{OpCode::kWrite, local.p, seg, base, sh.block * sh.count}}, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  // Two submits into one batch (the second's tasks after the first's), twice.
  for (int round = 0; round < 2; ++round) {
    std::memset(local.p, 0, local.n);
    BatchID b = kInvalidBatch;
    ASSERT_TRUE(e.allocateBatchID(8, b).ok());
    ASSERT_TRUE(e.submitTransfer(b, {{OpCode::kRead, local.p, seg, base + 4096, 4096}}).ok());
    ASSERT_TRUE(e.submitTransfer(b, {{OpCode::kRead, local.p + 8192, seg, base + 65536, 65536},
                                     {OpCode::kRead, local.p + 100000, seg, base, 100}})
                    .ok());
    ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(20)).ok());
    for (size_t t = 0; t < 3; ++t) {
      TransferStatus st;
      ASSERT_TRUE(e.getTransferStatus(b, t, st).ok());
      EXPECT_EQ(st.s, TransferState::kCompleted) << t << ": " << st.error.toString();
    }
    ASSERT_TRUE(e.freeBatchID(b).ok());
    EXPECT_EQ(checkPattern(local.p, 4096, kSeed, 4096), -1);
    EXPECT_EQ(checkPattern(local.p + 8192, 65536, kSeed, 65536), -1);
    EXPECT_EQ(checkPattern(local.p + 100000, 100, kSeed, 0), -1);
  }
}

// A kept batch's local region is not used once memory was unregistered:
// the old range is refused, the range registered again is moved.
TEST_F(ShmPeer, a_region_unregistered_after_transfers_is_refused_and_one_registered_again_is_moved) {
  TransferEngine e;
  SegmentID seg;
  uint64_t base;
  Buffer local(1u << 20);
  ASSERT_NO_FATAL_FAILURE(openWith(e, seg, base, local));
  for (int round = 0; round < 2; ++round) {
    Status s = e.transferSync({{OpCode::kRead, local.p, seg, base, 65536}}, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  ASSERT_TRUE(e.unregisterLocalMemory(local.p).ok());
  Status s = e.transferSync({{OpCode::kRead, local.p, seg, base, 65536}}, std::chrono::seconds(20));
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  // The first half again: the kept batch's whole-buffer region must not serve the second half.
  ASSERT_TRUE(e.registerLocalMemory(local.p, local.n / 2, "cpu:0", false).ok());
  s = e.transferSync({{OpCode::kRead, local.p + local.n / 2, seg, base, 65536}}, std::chrono::seconds(20));
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  std::memset(local.p, 0, local.n);
  s = e.transferSync({{OpCode::kRead, local.p, seg, base + 4096, local.n / 2}}, std::chrono::seconds(20));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(local.p, local.n / 2, kSeed, 4096), -1);
}

TEST_F(ShmPeer, bench_json_names_shm_as_the_transport_that_carried_the_data) {
  std::string out;
  ASSERT_EQ(sh(hawserBin() + " bench --target " + segment_ +
                   " --op write --block-size 64K --batch-size 8 --threads 2 --total 16M --json",
               &out),
            0)
      << out;
  auto j = nlohmann::json::parse(lastLine(out));
  EXPECT_TRUE(j["verified"].get<bool>()) << j.dump();
  EXPECT_EQ(j["transports"], nlohmann::json::array({"shm"})) << j.dump();
}

// The target runs as root; the initiator, a forked child that drops to uid
// nobody, is refused by the target's socket (another user): tcp serves it.
TEST_F(ShmPeer, another_user_refused_by_the_socket_falls_back_to_tcp_and_logs_why_once) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start a target another user may not attach to";
  const passwd* nobody = ::getpwnam("nobody");
  if (!nobody) GTEST_SKIP() << "no user 'nobody' on this host";
  const uid_t uid = nobody->pw_uid;
  const gid_t gid = nobody->pw_gid;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    std::ostringstream why;  // empty: everything held
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      why << "cannot become nobody: " << std::strerror(errno);
    } else {
      LogCapture log;
      TransferEngine e;
      SegmentID seg;
      Buffer local(1u << 20);
      std::vector<SegmentBuffer> bufs;
      RouteExplanation r;
      if (!e.init("p2p", "nobody", "127.0.0.1", 0).ok() || !e.openSegment(segment_, seg).ok() ||
          !e.segmentBuffers(seg, bufs).ok() || bufs.empty() ||
          !e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok()) {
        why << "engine setup failed; ";
      } else {
        if (!e.explainRoute(seg, "cpu:0", r).ok() || r.transport != "tcp") why << "route: " << r.transport << "; ";
        if (r.why.find("shm: segment") == std::string::npos ||
            r.why.find("its shm socket refused this process: uid " + std::to_string(uid) +
                       " may not map the memory of uid 0") == std::string::npos)
          why << "why: " << r.why << "; ";
        for (int round = 0; round < 2; ++round) {
          auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, bufs[0].addr + 100, local.n}});
          if (st.size() != 1 || st[0].s != TransferState::kCompleted)
            why << "read failed: " << (st.empty() ? "" : st[0].error.toString()) << "; ";
          else if (checkPattern(local.p, local.n, kSeed, 100) != -1)
            why << "read data differs; ";
          // A second open of the segment finds the same refusal: not logged again.
          SegmentID again;
          if (round == 0 && (!e.openSegment(segment_, again).ok() || !e.closeSegment(again).ok()))
            why << "reopen failed; ";
        }
        if (counter(e, "tcp", "slices_completed") == 0) why << "tcp carried nothing; ";
        if (counter(e, "shm", "bytes_read") != 0) why << "shm moved bytes; ";
        const std::string text = log.text();
        size_t lines = 0;
        for (size_t p = 0; (p = text.find("requests go over tcp, not shm", p)) != std::string::npos; ++p) ++lines;
        if (lines != 1) why << lines << " fallback log lines: " << text << "; ";
        if (text.find("may not map the memory") == std::string::npos ||
            text.find("not shm: permission_denied") == std::string::npos)
          why << "the log line does not name the reason and the fallback: " << text << "; ";
      }
    }
    const std::string msg = why.str();
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(msg, "");
}

}  // namespace
}  // namespace hawser::test
