// Signals and notifications end definitely at the receiver (docs/signals.md),
// under faults, across processes: this process is the receiver; the
// initiators are tests/signals/signal_sender.cpp processes over tcp, which
// the tests kill, cut off (network namespaces), or whose frames they drop
// (the outbox's test seam, engine/notify_testing.h). Every wait must end
// with the right outcome before its deadline: never TIMEOUT where the
// outcome was knowable, and no waiter left stuck.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "common/util.h"
#include "hawser/engine.h"

using namespace hawser;
using namespace hawser::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Short bounds, so the faults fit a test run: a sender that does not answer
// for 1.5 s is lost; a receiver asks every 100 ms.
const std::vector<std::string> kEnv = {"HAWSER_TRANSPORT=tcp", "HAWSER_SIGNAL_PEER_TIMEOUT_MS=1500",
                                       "HAWSER_SIGNAL_PROBE_INTERVAL_MS=100", "HAWSER_TCP_TIMEOUT_MS=3000",
                                       "HAWSER_RPC_TIMEOUT_MS=2000"};

std::string describe(const SignalResult& r) {
  return fmt::format("{} {} landed {} from '{}': {}", signalStateName(r.s), signalReasonName(r.reason), r.landed,
                     r.peer, r.error.toString());
}

class Signals : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  void start(std::map<std::string, std::string> extra, const std::string& host = "127.0.0.1") {
    EngineOptions o;
    o.config = {{"transport", "tcp"},
                {"signal.peer_timeout_ms", "1500"},
                {"signal.probe_interval_ms", "100"},
                {"rpc.timeout_ms", "2000"}};
    for (auto& [k, v] : extra) o.config[k] = v;
    engine_ = std::make_unique<TransferEngine>();
    Status s = engine_->init("p2p", "receiver", host, 0, o);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(engine_->registerLocalMemory(mem_.p, mem_.n, "cpu:0", true).ok());
  }

  uint64_t base() const { return reinterpret_cast<uint64_t>(mem_.p); }

  // A signal_sender writing into mem_; `prefix`: argv before it (ip netns exec ...).
  std::string startSender(Child& c, const std::vector<std::string>& cmds, const std::vector<std::string>& prefix = {},
                          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(), {signalSenderBin(), "--target", engine_->segmentName(), "--remote",
                             fmt::format("{:x}", base())});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), cmds.begin(), cmds.end());
    EXPECT_TRUE(c.exec(argv, kEnv));
    std::string seg = c.waitFor("segment: ", 60000);
    EXPECT_FALSE(seg.empty()) << "signal_sender did not start";
    EXPECT_FALSE(c.waitFor("ready", 60000).empty());
    return seg.size() > 9 ? seg.substr(9) : "";
  }

  SignalResult wait(const std::string& peer, const std::string& name, uint64_t expected,
                    std::chrono::milliseconds timeout = 60s) {
    SignalResult r;
    Status s = engine_->waitSignal(peer, name, expected, timeout, r);
    EXPECT_TRUE(s.ok()) << s.toString();
    return r;
  }

  Buffer mem_{16u << 20};
  std::unique_ptr<TransferEngine> engine_;
};

TEST_F(Signals, bad_arguments_are_refused_with_their_reason) {
  SignalResult r;
  EXPECT_EQ(engine_->waitSignal("", "x", 1, 1s, r).code(), Code::kInvalidArgument);
  EXPECT_EQ(engine_->waitSignal("p", "", 1, 1s, r).code(), Code::kInvalidArgument);
  Status s = engine_->waitSignal("p", "x", 0, 1s, r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("expected is 0"), std::string::npos) << s.toString();
  // A submit with a signal: a name, requests, one memory segment.
  TransferEngine other;
  ASSERT_TRUE(other.init("p2p", "other", "127.0.0.1", 0).ok());
  Buffer src(1u << 20);
  ASSERT_TRUE(other.registerLocalMemory(src.p, src.n, "cpu:0", true).ok());
  SegmentID seg, self;
  ASSERT_TRUE(other.openSegment(engine_->segmentName(), seg).ok());
  ASSERT_TRUE(other.openSegment(other.segmentName(), self).ok());
  BatchID b;
  ASSERT_TRUE(other.allocateBatchID(4, b).ok());
  EXPECT_EQ(other.submitTransfer(b, {}, Signal{"s"}).code(), Code::kInvalidArgument);
  EXPECT_EQ(other.submitTransfer(b, {{OpCode::kWrite, src.p, seg, base(), 64}}, Signal{""}).code(),
            Code::kInvalidArgument);
  s = other.submitTransfer(
      b, {{OpCode::kWrite, src.p, seg, base(), 64}, {OpCode::kWrite, src.p, self, reinterpret_cast<uint64_t>(src.p) + 4096, 64}},
      Signal{"two"});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("one segment"), std::string::npos) << s.toString();
  TempDir dir;
  ASSERT_TRUE(writeFile(dir.path + "/f", 4096, 1));
  SegmentID file;
  ASSERT_TRUE(other.openSegment("file://" + dir.path + "/f", file).ok());
  s = other.submitTransfer(b, {{OpCode::kRead, src.p, file, 0, 64}}, Signal{"file"});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  TransferStatus agg;
  ASSERT_TRUE(other.getBatchTransferStatus(b, agg).ok());
  EXPECT_EQ(agg.s, TransferState::kWaiting) << "a refused submit left tasks behind";
  EXPECT_TRUE(other.freeBatchID(b).ok());
}

TEST_F(Signals, a_wait_with_nothing_coming_times_out_only_at_its_deadline) {
  Child sender;
  const std::string peer = startSender(sender, {"await:/nonexistent/never"});
  const auto t0 = Clock::now();
  SignalResult r = wait(peer, "never", 1, 300ms);
  EXPECT_EQ(r.s, SignalState::kTimeout) << describe(r);
  EXPECT_GE(Clock::now() - t0, 300ms) << "TIMEOUT before the deadline";
  EXPECT_EQ(r.error.code(), Code::kTimeout);
}

TEST_F(Signals, frames_sent_again_after_a_loss_count_once) {
  Child sender;
  const std::string peer = startSender(
      sender, {"drop:3", "write:a:2:65536:0:1", "losereply:2", "write:b:2:65536:131072:2"});
  SignalResult r = wait(peer, "a", 2);
  ASSERT_EQ(r.s, SignalState::kCompleted) << describe(r);
  EXPECT_EQ(r.landed, 2u);
  r = wait(peer, "b", 2);
  ASSERT_EQ(r.s, SignalState::kCompleted) << describe(r);
  EXPECT_EQ(r.landed, 2u) << "a frame applied twice";
  EXPECT_EQ(checkPattern(mem_.p, 131072, 1, 0), -1);
  EXPECT_EQ(checkPattern(mem_.p + 131072, 131072, 2, 131072), -1);
  // The frame sent again arrives after the first copy already completed the
  // signal: counted once it came (the sender resends on its reply timeout).
  EXPECT_TRUE(eventually([&] { return counter(*engine_, "", "signal_frames_duplicate") >= 1u; }))
      << "the lost replies' frames came once";
}

TEST_F(Signals, frames_the_sender_gave_up_on_fail_the_wait_with_peer_lost) {
  Child sender;
  // (It stays alive: the receiver learns of the loss from the sender itself.)
  const std::string peer = startSender(sender, {"dropall", "write:lost:1:65536:0:3", "hold"});
  const auto t0 = Clock::now();
  SignalResult r = wait(peer, "lost", 1);
  ASSERT_EQ(r.s, SignalState::kFailed) << describe(r);
  EXPECT_EQ(r.reason, SignalReason::kPeerLost);
  EXPECT_NE(r.error.message().find("gave up sending"), std::string::npos) << describe(r);
  std::printf("[ info ] frames given up on: seen after %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  // The initiator's own view agrees: its signal was not delivered.
  ASSERT_FALSE(sender.waitFor("done lost", 30000).empty());
}

TEST_F(Signals, a_cancel_at_the_initiator_reaches_the_receiver_as_the_outcome) {
  Child sender;
  const std::string peer = startSender(sender, {"cancel:c:16:1048576"});
  SignalResult r = wait(peer, "c", 16);
  std::string done = sender.waitFor("done c ", 30000);
  ASSERT_FALSE(done.empty());
  if (done.find("COMPLETED") != std::string::npos) {
    EXPECT_EQ(r.s, SignalState::kCompleted) << describe(r);  // every request finished before the cancel
  } else {
    ASSERT_EQ(r.s, SignalState::kFailed) << describe(r) << " / sender: " << done;
    EXPECT_TRUE(r.reason == SignalReason::kCanceled || r.reason == SignalReason::kTransferFailed) << describe(r);
  }
}

// Four initiators with eight signals each, and a fifth that dies: 36
// waiters at once; those of the living complete with their bytes here, the
// dead one's fail; none is left waiting.
TEST_F(Signals, a_receiver_waits_on_many_signals_from_many_peers) {
  TempDir dir;
  const std::string go = dir.path + "/go";
  constexpr int kPeers = 4, kSignals = 8;
  std::vector<std::unique_ptr<Child>> senders;
  std::vector<std::string> names;
  for (int k = 0; k < kPeers; ++k) {
    std::vector<std::string> cmds = {"await:" + go};
    for (int j = 0; j < kSignals; ++j)
      cmds.push_back(fmt::format("write:s{}:2:65536:{}:{}", j, (k * kSignals + j) * 131072, k * 100 + j));
    senders.push_back(std::make_unique<Child>());
    names.push_back(startSender(*senders.back(), cmds));
  }
  senders.push_back(std::make_unique<Child>());
  // (It writes beyond the others' ranges.)
  const std::string doomed = startSender(*senders.back(), {"await:" + go, "loop:x:65536"}, {},
                                         {"--bytes", "1048576", "--remote", fmt::format("{:x}", base() + (8u << 20))});
  struct Waited {
    std::string peer, name;
    SignalResult r;
  };
  std::vector<Waited> waits;
  for (int k = 0; k < kPeers; ++k)
    for (int j = 0; j < kSignals; ++j) waits.push_back({names[k], fmt::format("s{}", j), {}});
  for (int j = 0; j < 4; ++j) waits.push_back({doomed, fmt::format("x{}", j), {}});
  std::vector<std::thread> threads;
  for (auto& w : waits)
    threads.emplace_back([&] { w.r = wait(w.peer, w.name, w.peer == doomed ? 1 : 2, 120s); });
  ASSERT_TRUE(writeFile(go, 1, 0));
  ASSERT_FALSE(senders.back()->waitFor("looping", 30000).empty());
  senders.back()->kill(SIGKILL);
  senders.back()->wait();
  for (auto& t : threads) t.join();
  int completed = 0, failed = 0;
  for (size_t i = 0; i < waits.size(); ++i) {
    const auto& w = waits[i];
    if (w.peer == doomed) {
      EXPECT_EQ(w.r.s, SignalState::kFailed) << w.name << ": " << describe(w.r);
      EXPECT_EQ(w.r.reason, SignalReason::kPeerLost) << describe(w.r);
      failed += w.r.s == SignalState::kFailed;
    } else {
      ASSERT_EQ(w.r.s, SignalState::kCompleted) << w.peer << " " << w.name << ": " << describe(w.r);
      const int k = static_cast<int>(i) / kSignals, j = static_cast<int>(i) % kSignals;
      const size_t off = (k * kSignals + j) * 131072;
      EXPECT_EQ(checkPattern(mem_.p + off, 131072, k * 100 + j, off), -1) << w.name << " of " << w.peer;
      ++completed;
    }
  }
  EXPECT_EQ(completed, kPeers * kSignals);
  EXPECT_EQ(failed, 4);
}

// A notifying submit ends at the receiver as the notification or as the news
// that it failed: its transfer failed (a withdrawn range), or its sender died
// mid-transfer. Old callers (getNotifies without failures) see what they saw.
TEST_F(Signals, every_notifying_submit_ends_at_the_receiver_delivered_or_failed) {
  // mem_ as two regions; the second is withdrawn before n2 is written to it.
  ASSERT_TRUE(engine_->unregisterLocalMemory(mem_.p).ok());
  const size_t half = mem_.n / 2;
  ASSERT_TRUE(engine_->registerLocalMemory(mem_.p, half, "cpu:0", true).ok());
  ASSERT_TRUE(engine_->registerLocalMemory(mem_.p + half, half, "cpu:0", true).ok());
  TempDir dir;
  Child sender;
  const std::string peer = startSender(
      sender, {"notify:n1:1:65536:0:9", "await:" + dir.path + "/go", "stale", fmt::format("notify:n2:1:65536:{}:9", half)});
  ASSERT_FALSE(sender.waitFor("done n1", 60000).empty());
  ASSERT_TRUE(engine_->unregisterLocalMemory(mem_.p + half).ok());
  ASSERT_TRUE(writeFile(dir.path + "/go", 1, 0));
  ASSERT_FALSE(sender.waitFor("done n2", 60000).empty());
  std::vector<ReceivedNotification> got, all;
  ASSERT_TRUE(eventually([&] {
    EXPECT_TRUE(engine_->getNotifies(got, true).ok());
    all.insert(all.end(), got.begin(), got.end());
    return all.size() >= 2;
  }));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].kind, NotifyKind::kDelivered);
  EXPECT_EQ(all[0].name, "n1");
  EXPECT_EQ(all[0].message, "kv");
  EXPECT_EQ(all[0].peer, peer);
  EXPECT_EQ(all[1].kind, NotifyKind::kFailed);
  EXPECT_EQ(all[1].name, "n2");
  EXPECT_EQ(all[1].peer, peer);
  EXPECT_EQ(all[1].error.code(), Code::kOutOfRange) << all[1].error.toString();

  // Senders killed mid-transfer: each of their notifying submits in flight
  // ends here as a failure.
  for (bool with_failures : {true, false}) {
    // A submit whose announcement never arrived is unknown here and cannot
    // fail here: a sender killed between two of its frames may leave none
    // open. So: killed senders until one left a submit open here, each
    // settled (nothing it announced left open) before the next.
    bool failed_here = false;
    for (int attempt = 0; attempt < 10 && !failed_here; ++attempt) {
      Child looping;
      startSender(looping, {"nloop:n3:65536"}, {}, {"--bytes", "1048576"});
      ASSERT_FALSE(looping.waitFor("looping", 30000).empty());
      const uint64_t failures_before = counter(*engine_, "", "notify_failures_received");
      looping.kill(SIGKILL);
      looping.wait();
      ASSERT_TRUE(eventually([&] { return counter(*engine_, "", "signal_submits_open") == 0; }))
          << "a submit of the killed sender stayed open here";
      failed_here = counter(*engine_, "", "notify_failures_received") > failures_before;
      all.clear();
      ASSERT_TRUE(engine_->getNotifies(all, with_failures).ok());
      size_t failures = 0;
      for (auto& n : all) {
        EXPECT_EQ(n.name, "n3");
        if (n.kind == NotifyKind::kFailed) {
          ++failures;
          EXPECT_EQ(n.error.code(), Code::kUnavailable) << n.error.toString();
        }
      }
      if (with_failures) EXPECT_EQ(failures > 0, failed_here);
      else EXPECT_EQ(failures, 0u) << "getNotifies without failures returned one";
    }
    EXPECT_TRUE(failed_here) << "no notifying submit of a killed sender ended here as failed (10 senders)";
  }
  // The old call too (Mooncake's and NIXL's shape).
  ASSERT_TRUE(engine_->getNotifies(all).ok());
  for (auto& n : all) EXPECT_EQ(n.kind, NotifyKind::kDelivered);
}

TEST_F(Signals, a_signal_nobody_waits_for_expires) {
  engine_.reset();
  start({{"signal.expire_ms", "200"}});
  Child sender;
  // It stays alive (hold): a wait on a sender that exited fails with
  // PEER_LOST instead of timing out, and it may exit before the wait.
  const std::string peer = startSender(sender, {"write:e:1:4096:0:4", "hold"});
  ASSERT_FALSE(sender.waitFor("done e COMPLETED", 30000).empty());
  ASSERT_TRUE(eventually([&] { return counter(*engine_, "", "signals_expired") >= 1; }))
      << "the unwaited signal was never dropped";
  SignalResult r = wait(peer, "e", 1, 100ms);
  EXPECT_EQ(r.s, SignalState::kTimeout) << describe(r);
  EXPECT_EQ(r.landed, 0u);
}

TEST_F(Signals, a_full_signal_table_drops_the_oldest_signal_nobody_waits_for) {
  engine_.reset();
  start({{"signal.max_signals", "2"}});
  Child sender;
  // (It stays alive: a wait on a sender that exited fails instead.)
  const std::string peer = startSender(
      sender, {"write:f1:1:4096:0:1", "write:f2:1:4096:4096:2", "write:f3:1:4096:8192:3", "hold"});
  ASSERT_FALSE(sender.waitFor("done f3 COMPLETED", 30000).empty());
  EXPECT_EQ(counter(*engine_, "", "signals_expired"), 1u) << "the table holds 2: the third drops the first";
  SignalResult r = wait(peer, "f3", 1, 10s);
  EXPECT_EQ(r.s, SignalState::kCompleted) << describe(r);
  r = wait(peer, "f2", 1, 10s);
  EXPECT_EQ(r.s, SignalState::kCompleted) << describe(r);
  r = wait(peer, "f1", 1, 100ms);
  EXPECT_EQ(r.s, SignalState::kTimeout) << "the oldest should have gone: " << describe(r);
}

// A partition between the receiver (this process, a network namespace of
// its own) and an initiator in another: the receiver's probes go
// unanswered, and the wait fails within signal.peer_timeout_ms.
TEST_F(Signals, a_partition_from_the_initiator_fails_the_wait_with_peer_lost) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces and nftables";
  for (const char* tool : {"ip", "nft"})
    if (sh(std::string("command -v ") + tool + " >/dev/null 2>&1") != 0) GTEST_SKIP() << tool << " is not installed";
  engine_.reset();
  if (::unshare(CLONE_NEWNET) != 0) GTEST_SKIP() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
  const std::string tag = std::to_string(::getpid() % 100000), ns = "hws" + tag;
  const int n = static_cast<int>(::getpid() % 250) + 1;
  const std::string ip_a = fmt::format("10.215.{}.1", n), ip_b = fmt::format("10.215.{}.2", n);
  std::string err;
  if (sh("set -e; ip link set lo up; ip netns add " + ns + "; ip link add vsb" + tag + " type veth peer name vsa" +
             tag + " netns " + ns + "; ip addr add " + ip_b + "/30 dev vsb" + tag + "; ip link set vsb" + tag +
             " up; ip -n " + ns + " addr add " + ip_a + "/30 dev vsa" + tag + "; ip -n " + ns + " link set vsa" +
             tag + " up; ip -n " + ns + " link set lo up 2>&1",
         &err) != 0 ||
      sh("nft add table inet hws && nft add chain inet hws in '{ type filter hook input priority 0; }' && nft add "
         "chain inet hws out '{ type filter hook output priority 0; }' 2>&1",
         &err) != 0) {
    sh("ip netns del " + ns + " 2>/dev/null");
    GTEST_SKIP() << "no network namespaces, veth pairs or nftables here: " << err;
  }
  start({}, ip_b);
  Child sender;
  const std::string peer = startSender(sender, {"loop:cut:65536"}, {"ip", "netns", "exec", ns},
                                       {"--host", ip_a, "--bytes", "1048576"});
  ASSERT_FALSE(sender.waitFor("looping", 30000).empty());
  SignalResult r;
  std::thread waiter([&] { r = wait(peer, "cut", uint64_t(1) << 40, 120s); });
  ASSERT_TRUE(eventually([&] { return counter(*engine_, "", "signal_frames_received") >= 2; }));
  const auto t0 = Clock::now();
  ASSERT_EQ(sh("nft add rule inet hws in ip saddr " + ip_a + " drop && nft add rule inet hws out ip daddr " + ip_a +
               " drop"),
            0);
  waiter.join();
  const auto seen = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_EQ(r.s, SignalState::kFailed) << describe(r);
  EXPECT_EQ(r.reason, SignalReason::kPeerLost) << describe(r);
  EXPECT_NE(r.error.message().find("did not answer"), std::string::npos) << describe(r);
  std::printf("[ info ] partition: seen after %lld ms (signal.peer_timeout_ms 1500)\n",
              static_cast<long long>(seen.count()));
  sender.kill(SIGKILL);
  sender.wait();
  engine_.reset();
  sh("ip netns del " + ns + " 2>/dev/null");
}

}  // namespace
