// The suite every memory transport must pass (integrity, bad input, peer
// failure), against a `hawser serve` child process. Include this header in
// one test file per transport and instantiate it:
//
//   #include "common/transport_suite.h"
//   using hawser::test::TransportSuite;
//   INSTANTIATE_TEST_SUITE_P(Tcp, TransportSuite,
//       ::testing::Values(hawser::test::SuiteParam{"tcp", {}}), hawser::test::suiteName);
//
// SuiteParam.env is set in this process before the engine starts and passed
// to the child; `skip` (optional) returns a reason to skip on this machine.
// `local_location` and `target_location` say where the initiator's buffers
// and the target's memory live ("cpu" or "cuda:N"; the target is then
// `hawser serve --location cuda:N`). GPU buffers are filled and checked
// through host mirrors: host code never touches device memory.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/transport.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"

namespace hawser::test {

struct SuiteParam {
  std::string transport;
  std::vector<std::string> env;          // "KEY=VALUE"
  std::function<std::string()> skip;     // non-empty reason = skip
  Code dead_peer_code = Code::kUnavailable;  // how a transfer to a SIGKILLed peer fails
  Code refused_code = Code::kOutOfRange;     // how the target's refusal of a withdrawn range fails a task
  std::string local_location = "cpu";        // the initiator's buffers: cpu or cuda:N
  std::string target_location = "cpu";       // the target's memory: cpu or cuda:N
  std::vector<std::string> target_args;      // more arguments of the target's `hawser serve` (--gpu-memory vmm)
  size_t kill_rounds = 8;                    // rounds of 32 x 16 MiB reads in flight when the peer is killed
  // Optional: mappings of the target's memory this process still holds (-1:
  // cannot tell); must drop to 0 once the target died.
  std::function<int()> open_handles;
  // The killed owner's memory may outlive it until the copies that use it
  // end (CUDA IPC on a real GPU: the driver holds the exiting process's
  // memory while another process's copies reference it), so the whole
  // batch may complete. Then only "every task ends, in time, and the dead
  // peer is noticed afterwards" is checked.
  bool kill_may_complete = false;
  // Optional: holds (true) and releases (false) the copies in flight, and
  // the counter of this transport that counts the peer's death. The
  // killed-peer case then kills with the copies held and releases them once
  // the death was counted: tasks still queued fail whatever the speed of
  // the copies (the stand-in driver's copies of a dead owner's memory
  // succeed, as a GPU's may, and outran the death's notice when idle).
  std::function<void(bool)> hold_copies;
  std::string death_counter;
};

// A buffer of the initiator: host memory, or GPU memory of the driver the
// engine loads (config gpu.cuda_driver), reached through copies only.
class SuiteBuffer {
 public:
  SuiteBuffer(const std::string& location, size_t n) : n(n) {
    if (location == "cpu") {
      host_ = std::make_unique<Buffer>(n);
      p = host_->p;
      return;
    }
    Status s = loadCudaDriver();
    if (s.ok()) s = allocateDeviceMemory(gpuOrdinalOf(location), n, reinterpret_cast<void**>(&p));
    EXPECT_TRUE(s.ok()) << location << ": " << s.toString();
  }
  ~SuiteBuffer() {
    if (!host_ && p) (void)freeDeviceMemory(p);
  }
  SuiteBuffer(const SuiteBuffer&) = delete;
  // The location to register it with.
  const char* location() const { return host_ ? "cpu:0" : "*"; }
  void fill(size_t off, size_t len, uint64_t seed, uint64_t base = 0) {
    if (host_) return fillPattern(p + off, len, seed, base);
    char* h = mirror(len);
    fillPattern(h, len, seed, base);
    EXPECT_TRUE(copyMemory(p + off, h, len).ok());
  }
  // Zeroes [off, +len) (all of it by default).
  void zero(size_t off = 0, size_t len = SIZE_MAX) {
    len = std::min(len, n - off);
    if (host_) {
      std::memset(p + off, 0, len);
      return;
    }
    char* h = mirror(len);
    std::memset(h, 0, len);
    EXPECT_TRUE(copyMemory(p + off, h, len).ok());
  }
  int64_t check(size_t off, size_t len, uint64_t seed, uint64_t base = 0) const {
    if (host_) return checkPattern(p + off, len, seed, base);
    char* h = mirror(len);
    Status st = copyMemory(h, p + off, len);
    EXPECT_TRUE(st.ok()) << st.toString();
    if (!st.ok()) return 0;  // byte 0 unchecked: reported as bad
    return checkPattern(h, len, seed, base);
  }
  uint64_t sum() const {
    if (host_) return checksum(p, n);
    char* h = mirror(n);
    Status st = copyMemory(h, p, n);
    EXPECT_TRUE(st.ok()) << st.toString();
    return st.ok() ? checksum(h, n) : 0;
  }

  char* p = nullptr;
  size_t n = 0;

 private:
  // GPU memory's host side for fills and checks, kept from one use to the
  // next: a fresh one a call paid its page faults again (most of a GPU
  // suite case's time in the sanitizer build).
  char* mirror(size_t len) const {
    if (mirror_.size() < len) mirror_.resize(std::max(len, n));
    return mirror_.data();
  }

  std::unique_ptr<Buffer> host_;
  mutable std::vector<char> mirror_;
};

inline void PrintTo(const SuiteParam& p, std::ostream* os) { *os << p.transport; }

inline std::string suiteName(const ::testing::TestParamInfo<SuiteParam>& i) { return i.param.transport; }

class TransportSuite : public ::testing::TestWithParam<SuiteParam> {
 protected:
  static constexpr uint64_t kSeed = 424242;
  // The target's memory: what every case but the 256 MiB read needs (the
  // notification case's writes end at 72 MiB). Each case starts its own
  // target, which fills all of it with the pattern: in the sanitizer build,
  // four at once on two cores, a 300 MiB target took most of a case's time.
  static constexpr size_t kTargetBytes = 80u << 20;
  static constexpr size_t kBigTargetBytes = 300u << 20;  // reads_match_..._256_mib's

  void SetUp() override {
    const auto& p = GetParam();
    if (p.skip) {
      std::string why = p.skip();
      if (!why.empty()) GTEST_SKIP() << why;
    }
    env_ = p.env;
    env_.push_back("HAWSER_TRANSPORT=" + p.transport);
    for (auto& kv : env_) ::putenv(const_cast<char*>(kv.c_str()));
    ASSERT_NO_FATAL_FAILURE(startTarget(kTargetBytes));
    Status s = engine_.init("p2p", "client", "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_NO_FATAL_FAILURE(openTarget());
  }

  // Starts `hawser serve` with `bytes` of memory filled with kSeed's pattern.
  void startTarget(size_t bytes) {
    const auto& p = GetParam();
    target_bytes_ = bytes;
    std::vector<std::string> args = {"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(bytes),
                                     "--fill-seed", std::to_string(kSeed), "--print-notifies"};
    if (p.target_location != "cpu") args.insert(args.end(), {"--location", p.target_location});
    args.insert(args.end(), p.target_args.begin(), p.target_args.end());
    ASSERT_TRUE(child_.start(args, env_));
    // A deadline, not an expectation: an unoptimized sanitizer build fills
    // the pattern far slower beside three other tests on two cores.
    std::string seg = child_.waitFor("segment: ", 90000);
    ASSERT_FALSE(seg.empty()) << "hawser serve did not start";
    ASSERT_FALSE(child_.waitFor("ready", 90000).empty());
    segment_ = seg.substr(9);
  }

  void openTarget() {
    ASSERT_TRUE(engine_.openSegment(segment_, seg_).ok());
    std::vector<SegmentBuffer> bufs;
    ASSERT_TRUE(engine_.segmentBuffers(seg_, bufs).ok());
    ASSERT_EQ(bufs.size(), 1u);
    ASSERT_EQ(bufs[0].length, target_bytes_);
    base_ = bufs[0].addr;
  }

  // A case that needs more than kTargetBytes: the target started anew with
  // `bytes` (the first one closed and stopped).
  void restartTarget(size_t bytes) {
    ASSERT_TRUE(engine_.closeSegment(seg_).ok());
    seg_ = kInvalidSegment;
    child_.kill(SIGKILL);
    child_.wait();
    ::unlink(child_.out_path.c_str());
    ASSERT_NO_FATAL_FAILURE(startTarget(bytes));
    ASSERT_NO_FATAL_FAILURE(openTarget());
  }

  void TearDown() override {
    for (auto& kv : env_) ::unsetenv(kv.substr(0, kv.find('=')).c_str());
  }

  const std::string& loc() const { return GetParam().local_location; }

  // The notifications the target printed so far (`hawser serve
  // --print-notifies`), in the order it took them: "PEER NAME MESSAGE...".
  std::vector<std::string> notified() const {
    std::vector<std::string> out;
    std::ifstream in(child_.out_path);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("notify: ", 0) == 0) out.push_back(line.substr(8));
    return out;
  }

  // Signals: starts tests/signals/signal_sender.cpp, the initiator, toward
  // `remote` (an address of this engine's memory) over this transport, with
  // `cmds`; its segment name in sender_seg_.
  void startSender(Child& c, uint64_t remote, const std::vector<std::string>& cmds) {
    std::vector<std::string> argv = {signalSenderBin(), "--target", engine_.segmentName(), "--remote",
                                     fmt::format("{:x}", remote), "--location", loc()};
    argv.insert(argv.end(), cmds.begin(), cmds.end());
    ASSERT_TRUE(c.exec(argv, env_));
    std::string seg = c.waitFor("segment: ", 90000);
    ASSERT_FALSE(seg.empty()) << "signal_sender did not start";
    sender_seg_ = seg.substr(9);
    ASSERT_FALSE(c.waitFor("ready", 90000).empty());
  }
  SignalResult waitSignal(const std::string& name, uint64_t expected, std::chrono::milliseconds timeout) {
    SignalResult r;
    Status s = engine_.waitSignal(sender_seg_, name, expected, timeout, r);
    EXPECT_TRUE(s.ok()) << s.toString();
    return r;
  }

  Child child_;
  std::string sender_seg_;
  std::vector<std::string> env_;
  TransferEngine engine_;
  std::string segment_;
  SegmentID seg_ = kInvalidSegment;
  uint64_t base_ = 0;
  size_t target_bytes_ = 0;
};

TEST_P(TransportSuite, reads_match_the_targets_bytes_from_1_byte_to_256_mib) {
  ASSERT_NO_FATAL_FAILURE(restartTarget(kBigTargetBytes));
  SuiteBuffer local(loc(), (256u << 20) + 4096);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  for (size_t len : {1ul, 3ul, 4095ul, 65536ul, 65537ul, 1ul << 20, (4ul << 20) + 11, 256ul << 20}) {
    uint64_t off = (len * 7 + 13) % (target_bytes_ - len);  // unaligned remote offsets
    size_t loff = len % 4096 ? 7 : 0;                       // and unaligned local addresses
    auto st = runBatch(engine_, seg_, {{OpCode::kRead, local.p + loff, seg_, base_ + off, len}}, 120000);
    ASSERT_EQ(st.size(), 1u);
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << "len " << len << ": " << st[0].error.toString();
    EXPECT_EQ(st[0].transferred_bytes, len);
    EXPECT_EQ(local.check(loff, len, kSeed, off), -1) << "len " << len;
  }
}

TEST_P(TransportSuite, writes_then_reads_back_byte_for_byte) {
  SuiteBuffer src(loc(), (64u << 20) + 64), dst(loc(), (64u << 20) + 64);
  ASSERT_TRUE(engine_.registerLocalMemory(src.p, src.n, src.location(), false).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(dst.p, dst.n, dst.location(), false).ok());
  uint64_t seed = 99;
  for (size_t len : {1ul, 100ul, 65535ul, 1ul << 20, 64ul << 20}) {
    uint64_t off = 4096 * 3 + 5;
    src.fill(3, len, ++seed);
    dst.zero(0, len + 1);  // what the read below lands in
    auto st = runBatch(engine_, seg_, {{OpCode::kWrite, src.p + 3, seg_, base_ + off, len}}, 60000);
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << len << ": " << st[0].error.toString();
    st = runBatch(engine_, seg_, {{OpCode::kRead, dst.p + 1, seg_, base_ + off, len}}, 60000);
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << len << ": " << st[0].error.toString();
    EXPECT_EQ(dst.check(1, len, seed), -1) << len;
  }
}

TEST_P(TransportSuite, many_tasks_in_one_batch_each_land_in_place) {
  const size_t n = 64, len = 100000;
  SuiteBuffer src(loc(), n * len), dst(loc(), n * len);
  ASSERT_TRUE(engine_.registerLocalMemory(src.p, src.n, src.location(), false).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(dst.p, dst.n, dst.location(), false).ok());
  src.fill(0, src.n, 5);
  std::vector<TransferRequest> w, r;
  for (size_t i = 0; i < n; ++i) {
    uint64_t off = (n - 1 - i) * len + 1;  // reversed placement
    w.push_back({OpCode::kWrite, src.p + i * len, seg_, base_ + off, len});
    r.push_back({OpCode::kRead, dst.p + i * len, seg_, base_ + off, len});
  }
  for (auto& st : runBatch(engine_, seg_, w, 60000)) ASSERT_EQ(st.s, TransferState::kCompleted);
  for (auto& st : runBatch(engine_, seg_, r, 60000)) ASSERT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(src.sum(), dst.sum());
}

TEST_P(TransportSuite, remote_range_outside_the_targets_memory_is_refused_at_submit) {
  SuiteBuffer local(loc(), 8192);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  Status s;
  runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, base_ + target_bytes_ - 100, 200}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  runBatch(engine_, seg_, {{OpCode::kWrite, local.p, seg_, base_ - 4096, 200}}, 1000, &s);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
}

// Transport-side refusal: a request that passes the engine's checks (the
// range is in the descriptor the initiator holds) but that the target must
// refuse, because it withdrew that memory since.
TEST_P(TransportSuite, range_the_target_withdrew_is_refused_by_the_target_itself) {
  SuiteBuffer local(loc(), 1u << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  local.fill(0, local.n, 5);
  child_.kill(SIGUSR1);
  ASSERT_FALSE(child_.waitFor("withdrawn").empty()) << "hawser serve did not withdraw its memory";
  // Take the owner's change notice, so the engine keeps the descriptor it has
  // and the request reaches the target.
  auto* store = detail::EngineAccess::of(engine_).store();
  ASSERT_TRUE(eventually([&] { return store->mayHaveChanged(segment_, 0); }));
  for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
    Status submitted;
    auto st = runBatch(engine_, seg_, {{op, local.p, seg_, base_ + 4096, 65536}}, 20000, &submitted);
    ASSERT_TRUE(submitted.ok()) << "the engine must accept it: " << submitted.toString();
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].s, TransferState::kFailed);
    EXPECT_EQ(st[0].transferred_bytes, 0u);
    EXPECT_EQ(st[0].error.code(), GetParam().refused_code) << st[0].error.toString();
  }
  EXPECT_EQ(local.check(0, local.n, 5), -1) << "a refused read must not touch local memory";
}

TEST_P(TransportSuite, peer_killed_mid_batch_fails_the_tasks_and_nothing_hangs) {
  const size_t len = 64u << 20;
  const size_t rounds = GetParam().kill_rounds;
  SuiteBuffer local(loc(), len);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 32; ++i) reqs.push_back({OpCode::kRead, local.p + (i % 4) * (16u << 20), seg_,
                                                base_ + (i % 4) * (16u << 20), 16u << 20});
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(reqs.size() * rounds, b).ok());
  auto t0 = std::chrono::steady_clock::now();
  // Keep the batch busy, then kill the target with SIGKILL once it has
  // served part of the batch and the rest is still in flight.
  for (size_t round = 0; round < rounds; ++round) ASSERT_TRUE(engine_.submitTransfer(b, reqs).ok());
  TransferStatus progress;
  ASSERT_TRUE(eventually([&] {
    return engine_.getBatchTransferStatus(b, progress).ok() && progress.transferred_bytes > 0;
  })) << "the target served no byte of the batch";
  ASSERT_EQ(progress.s, TransferState::kPending) << "the batch ended before the peer could be killed";
  const auto& hold = GetParam().hold_copies;
  if (hold) {
    hold(true);
    // Held: nothing more ends; most of the batch must still be queued.
    ASSERT_TRUE(engine_.getBatchTransferStatus(b, progress).ok());
    if (progress.s != TransferState::kPending) hold(false);
    ASSERT_EQ(progress.s, TransferState::kPending) << "the batch ended before its copies were held";
  }
  child_.kill(SIGKILL);
  child_.wait();
  if (hold) {
    const bool noticed = eventually([&] { return counter(engine_, GetParam().transport, GetParam().death_counter) >= 1; });
    hold(false);
    ASSERT_TRUE(noticed) << "the peer's death was not counted (" << GetParam().death_counter << ")";
  }
  Status w = engine_.waitTransfer(b, std::chrono::seconds(30));
  ASSERT_TRUE(w.ok()) << "tasks still unfinished 30 s after the peer died: " << w.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  TransferStatus agg;
  ASSERT_TRUE(engine_.getBatchTransferStatus(b, agg).ok());
  const bool all_done = GetParam().kill_may_complete && agg.s == TransferState::kCompleted;
  if (!all_done) {
    EXPECT_EQ(agg.s, TransferState::kFailed) << "expected some task to fail after SIGKILL";
  }
  size_t failed = 0;
  for (size_t i = 0; i < reqs.size() * rounds; ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_.getTransferStatus(b, i, st).ok());
    ASSERT_TRUE(isTerminal(st.s));
    if (st.s == TransferState::kFailed) {
      ++failed;
      EXPECT_LT(st.transferred_bytes, reqs[i % reqs.size()].length);
      EXPECT_FALSE(st.error.ok());
    }
  }
  if (!all_done) {
    EXPECT_GT(failed, 0u);
  } else {
    EXPECT_EQ(local.check(0, len, kSeed), -1) << "a batch that completed must hold the target's bytes";
  }
  EXPECT_TRUE(engine_.freeBatchID(b).ok());
  // A fresh batch to the dead peer: the engine checks requests against the
  // cached descriptor (nobody told it the peer died), so the submit is
  // accepted and the task fails in flight, promptly, with nothing moved.
  Status submit;
  auto st = runBatch(engine_, seg_, {{OpCode::kRead, local.p, seg_, base_, 4096}}, 20000, &submit);
  ASSERT_TRUE(submit.ok()) << submit.toString();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].s, TransferState::kFailed) << stateName(st[0].s);
  EXPECT_EQ(st[0].transferred_bytes, 0u);
  EXPECT_EQ(st[0].error.code(), GetParam().dead_peer_code) << st[0].error.toString();
  // Nothing of the dead peer stays mapped here (the segment is still open).
  if (auto& open = GetParam().open_handles; open && open() >= 0) {
    EXPECT_TRUE(eventually([&] { return open() == 0; })) << open() << " mapping(s) of the dead peer left open";
  }
}

// Notifications ride the engines' rpc listeners, after the transfer: the
// target must see the written bytes when it takes the notification (its
// `serve --print-notifies` checks the range the message names the moment it
// drains it), and notifications arrive in the order they were issued, not
// the order their transfers finished.
TEST_P(TransportSuite, notification_arrives_after_the_writes_it_follows_in_issue_order) {
  const size_t big = 64u << 20, part = 16u << 20;
  SuiteBuffer src(loc(), big + 4096);
  ASSERT_TRUE(engine_.registerLocalMemory(src.p, src.n, src.location(), false).ok());
  const uint64_t seed = 31337, off = 8u << 20;
  src.fill(0, big, seed);
  src.fill(big, 1, seed + 1);
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(8, b).ok());
  // n0: four writes of 16 MiB; n1: one byte elsewhere, likely done first.
  std::vector<TransferRequest> w;
  for (size_t i = 0; i < big / part; ++i)
    w.push_back({OpCode::kWrite, src.p + i * part, seg_, base_ + off + i * part, part});
  const std::string msg0 = "pattern " + std::to_string(off) + " " + std::to_string(big) + " " + std::to_string(seed);
  ASSERT_TRUE(engine_.submitTransfer(b, w, Notification{"n0", msg0}).ok());
  ASSERT_TRUE(engine_.submitTransfer(b, {{OpCode::kWrite, src.p + big, seg_, base_ + 4096, 1}},
                                     Notification{"n1", "pattern 4096 1 " + std::to_string(seed + 1)})
                  .ok());
  // Issued after both: delivered after both, whenever they finish.
  Status sent = engine_.sendNotify(seg_, Notification{"n2", "alone"});
  ASSERT_TRUE(sent.ok()) << sent.toString();
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(60)).ok());
  std::vector<NotifyStatus> ns;
  ASSERT_TRUE(engine_.getNotifyStatus(b, ns).ok());
  ASSERT_EQ(ns.size(), 2u);
  for (auto& n : ns) EXPECT_EQ(n.s, NotifyState::kDelivered) << notifyStateName(n.s) << ": " << n.error.toString();
  EXPECT_TRUE(engine_.freeBatchID(b).ok());
  const std::string me = engine_.segmentName();
  ASSERT_TRUE(eventually([&] { return notified().size() >= 3; })) << "the target printed " << notified().size();
  auto lines = notified();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], me + " n0 " + msg0 + " pattern ok");
  EXPECT_EQ(lines[1], me + " n1 pattern 4096 1 " + std::to_string(seed + 1) + " pattern ok");
  EXPECT_EQ(lines[2], me + " n2 alone");
}

// A transfer that fails is never notified: the target refuses a range it
// withdrew, the notification stays unsent with the task's error, and the
// next one to that peer still goes out.
TEST_P(TransportSuite, notification_of_a_failed_write_is_never_delivered) {
  SuiteBuffer local(loc(), 1u << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(local.p, local.n, local.location(), false).ok());
  local.fill(0, local.n, 5);
  child_.kill(SIGUSR1);
  ASSERT_FALSE(child_.waitFor("withdrawn").empty()) << "hawser serve did not withdraw its memory";
  auto* store = detail::EngineAccess::of(engine_).store();
  ASSERT_TRUE(eventually([&] { return store->mayHaveChanged(segment_, 0); }));
  BatchID b;
  ASSERT_TRUE(engine_.allocateBatchID(1, b).ok());
  ASSERT_TRUE(engine_.submitTransfer(b, {{OpCode::kWrite, local.p, seg_, base_ + 4096, 65536}},
                                     Notification{"lost", "pattern 4096 65536 5"})
                  .ok());
  ASSERT_TRUE(engine_.waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine_.getTransferStatus(b, 0, st).ok());
  ASSERT_EQ(st.s, TransferState::kFailed);
  std::vector<NotifyStatus> ns;
  ASSERT_TRUE(engine_.getNotifyStatus(b, ns).ok());
  ASSERT_EQ(ns.size(), 1u);
  EXPECT_EQ(ns[0].s, NotifyState::kNotSent) << notifyStateName(ns[0].s);
  EXPECT_EQ(ns[0].error.code(), GetParam().refused_code) << ns[0].error.toString();
  EXPECT_NE(ns[0].error.message().find("'lost' not sent: task 0"), std::string::npos) << ns[0].error.toString();
  EXPECT_TRUE(engine_.freeBatchID(b).ok());
  ASSERT_TRUE(engine_.sendNotify(seg_, Notification{"after", "x"}).ok());
  ASSERT_TRUE(eventually([&] { return !notified().empty(); }));
  EXPECT_EQ(notified(), std::vector<std::string>{engine_.segmentName() + " after x"});
}

// ---- signals (docs/signals.md): this process is the receiver ----------------------
// The initiator is tests/signals/signal_sender.cpp, a process of its own over
// the same transport (the suite's environment), writing into memory of this
// process (the initiator's kind: cpu or cuda:N) that it registered remote
// accessible; this process waits on the signals.

inline std::string describe(const SignalResult& r) {
  return fmt::format("{} {} landed {} from '{}': {}", signalStateName(r.s), signalReasonName(r.reason), r.landed,
                     r.peer, r.error.toString());
}

TEST_P(TransportSuite, signal_completes_once_its_requests_landed_and_their_bytes_are_here) {
  const size_t mib = 1u << 20;
  SuiteBuffer mem(loc(), 8 * mib);
  mem.zero();
  ASSERT_TRUE(engine_.registerLocalMemory(mem.p, mem.n, mem.location(), true).ok());
  Child sender;
  // Four requests of 1 MiB, then eight blocks of 64 KiB as one block request;
  // then the sender stays until `go` exists (alive while the consumed wait runs).
  const std::string go = fmt::format("/tmp/hawser-signal-go-{}-{}", ::getpid(), GetParam().transport);
  std::filesystem::remove(go);
  startSender(sender, reinterpret_cast<uint64_t>(mem.p),
              {"write:kv1:4:1048576:0:77", fmt::format("blocks:kv2:8:65536:{}:78", 4 * mib), "await:" + go});
  SignalResult r = waitSignal("kv1", 4, std::chrono::seconds(120));
  ASSERT_EQ(r.s, SignalState::kCompleted) << describe(r);
  EXPECT_EQ(r.landed, 4u);
  EXPECT_EQ(r.peer, sender_seg_);
  EXPECT_EQ(mem.check(0, 4 * mib, 77, 0), -1) << "COMPLETED before the bytes were here";
  r = waitSignal("kv2", 1, std::chrono::seconds(120));  // a block request counts as one request
  ASSERT_EQ(r.s, SignalState::kCompleted) << describe(r);
  EXPECT_EQ(mem.check(4 * mib, 8 * 65536, 78, 4 * mib), -1) << "COMPLETED before the blocks were here";
  // Consumed: a second wait starts from nothing (and times out at its deadline).
  r = waitSignal("kv1", 4, std::chrono::milliseconds(50));
  EXPECT_EQ(r.s, SignalState::kTimeout) << describe(r);
  EXPECT_EQ(r.landed, 0u);
  { std::ofstream(go).put('1'); }
  ASSERT_FALSE(sender.waitFor("finished", 60000).empty());
  std::filesystem::remove(go);
}

// The receiver withdrew the range; the initiator still holds the descriptor
// naming it, so the request reaches this engine's transport, which refuses it.
TEST_P(TransportSuite, signal_of_a_range_the_receiver_withdrew_fails_with_refused) {
  SuiteBuffer kept(loc(), 1u << 20), gone(loc(), 1u << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(kept.p, kept.n, kept.location(), true).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(gone.p, gone.n, gone.location(), true).ok());
  // The sender addresses both from the lower one (its bytes come from its
  // buffer's start when the offset lies beyond it).
  const uint64_t base = std::min(reinterpret_cast<uint64_t>(kept.p), reinterpret_cast<uint64_t>(gone.p));
  const uint64_t off = reinterpret_cast<uint64_t>(gone.p) - base;
  TempDir dir;
  const std::string go = dir.path + "/go";
  Child sender;
  startSender(sender, base, {"await:" + go, "stale", fmt::format("write:gone:1:65536:{}:5", off)});
  ASSERT_TRUE(engine_.unregisterLocalMemory(gone.p).ok());
  ASSERT_TRUE(writeFile(go, 1, 0));
  SignalResult r = waitSignal("gone", 1, std::chrono::seconds(120));
  ASSERT_EQ(r.s, SignalState::kFailed) << describe(r);
  EXPECT_EQ(r.reason, SignalReason::kRefused) << describe(r);
  EXPECT_EQ(r.error.code(), GetParam().refused_code) << describe(r);
  EXPECT_EQ(r.peer, sender_seg_);
  EXPECT_EQ(r.landed, 0u);
  ASSERT_FALSE(sender.waitFor("done gone FAILED", 60000).empty());
}

TEST_P(TransportSuite, signal_fails_with_peer_lost_when_its_initiator_is_killed_mid_batch) {
  SuiteBuffer mem(loc(), 8u << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(mem.p, mem.n, mem.location(), true).ok());
  Child sender;
  startSender(sender, reinterpret_cast<uint64_t>(mem.p), {"loop:doomed:1048576"});
  ASSERT_FALSE(sender.waitFor("looping", 60000).empty());
  // Never reached: the initiator writes until it dies, with requests in flight.
  // (Whether the wait begins before or after the kill, it must end FAILED.)
  SignalResult r;
  std::thread waiter([&] { r = waitSignal("doomed", uint64_t(1) << 40, std::chrono::seconds(120)); });
  const auto killed = std::chrono::steady_clock::now();
  sender.kill(SIGKILL);
  sender.wait();
  waiter.join();
  const auto seen = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed);
  ASSERT_EQ(r.s, SignalState::kFailed) << describe(r);
  EXPECT_EQ(r.reason, SignalReason::kPeerLost) << describe(r);
  EXPECT_NE(r.error.message().find(sender_seg_), std::string::npos) << describe(r);
  std::printf("[ info ] %s: the killed initiator was seen after %lld ms\n", GetParam().transport.c_str(),
              static_cast<long long>(seen.count()));
}

}  // namespace hawser::test

#include "common/block_suite.h"  // block lists, strided layouts and plans over every transport
