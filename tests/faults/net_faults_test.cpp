// Network faults between two hosts: this test process is host B (its own
// network namespace), `hawser serve` runs on host A (a named namespace), a
// veth pair joins them. Faults: random loss and silent partitions with
// nftables, a rate cap with the tbf qdisc, the link going down, and a
// 50 ms path through a delaying proxy (this kernel has no netem). Every
// transfer either completes with every byte verified or ends FAILED within
// the configured timeout; an outage longer than the timeout fails that batch,
// and the next one succeeds over fresh connections with both engines still
// the same processes; neither side keeps a connection the other abandoned.
//
// The data path is the tcp transport. rdma over the software provider is not
// run here: that provider moves bytes with process_vm_writev between
// processes of one host, so no packet of its data path crosses the veth
// (docs/faults.md).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/delay_proxy.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "rpc/rpc.h"
#include "rpc/socket.h"

using namespace hawser;
using namespace hawser::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// tcp.timeout_ms of both engines: short, so an outage "longer than the
// timeout" fits a CI run.
constexpr int kTimeoutMs = 3000;
constexpr int kConnectTimeoutMs = 2000;
constexpr size_t kLocalBytes = 16u << 20;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// How one batch ended.
struct Outcome {
  bool terminal = false;  // waitTransfer saw every task end within the bound
  TransferState state = TransferState::kWaiting;
  Status error;
  double seconds = 0;
};

class NetFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces, nftables and qdiscs";
    for (const char* tool : {"ip", "nft", "tc"})
      if (sh(std::string("command -v ") + tool + " >/dev/null 2>&1") != 0)
        GTEST_SKIP() << tool << " is not installed (scripts/deps.sh installs iproute2 and nftables)";
    // This process becomes host B: a network namespace of its own, gone
    // with the process, so no rule or qdisc outlives the test.
    if (::unshare(CLONE_NEWNET) != 0)
      GTEST_SKIP() << "unshare(CLONE_NEWNET): " << std::strerror(errno) << " (no network namespaces here)";
    tag_ = std::to_string(::getpid() % 100000);
    ns_a_ = "hwf" + tag_;
    dev_b_ = "vfb" + tag_;
    const int n = static_cast<int>(::getpid() % 250) + 1;
    ip_a_ = "10.214." + std::to_string(n) + ".1";
    ip_b_ = "10.214." + std::to_string(n) + ".2";
    std::string err;
    const std::string dev_a = "vfa" + tag_;
    if (sh("set -e; ip link set lo up; ip netns add " + ns_a_ + "; ip link add " + dev_b_ +
               " type veth peer name " + dev_a + " netns " + ns_a_ + "; ip addr add " + ip_b_ + "/30 dev " + dev_b_ +
               "; ip link set " + dev_b_ + " up; ip -n " + ns_a_ + " addr add " + ip_a_ + "/30 dev " + dev_a +
               "; ip -n " + ns_a_ + " link set " + dev_a + " up; ip -n " + ns_a_ + " link set lo up 2>&1",
           &err) != 0) {
      cleanupNamespace();
      GTEST_SKIP() << "this machine does not allow network namespaces and veth pairs: " << err;
    }
    dev_a_ = dev_a;
    err.clear();
    if (sh("nft -f - 2>&1 <<'EOF'\n"
           "table inet hwfault {\n"
           "  chain in { type filter hook input priority 0; }\n"
           "  chain out { type filter hook output priority 0; }\n"
           "}\n"
           "EOF",
           &err) != 0) {
      cleanupNamespace();
      GTEST_SKIP() << "nftables cannot filter in a network namespace here: " << err;
    }

    // Host A: the target, with the same timeouts as ours.
    const std::vector<std::string> env = {"HAWSER_TCP_TIMEOUT_MS=" + std::to_string(kTimeoutMs),
                                          "HAWSER_TCP_CONNECT_TIMEOUT_MS=" + std::to_string(kConnectTimeoutMs),
                                          "HAWSER_RPC_TIMEOUT_MS=" + std::to_string(kConnectTimeoutMs)};
    ASSERT_TRUE(serve_.exec({"ip", "netns", "exec", ns_a_, hawserBin(), "serve", "--listen", ip_a_ + ":0",
                             "--memory", "32M"},
                            env));
    std::string seg = serve_.waitFor("segment: ", 20000);
    ASSERT_FALSE(seg.empty()) << "hawser serve did not start in namespace " << ns_a_;
    std::string mem = serve_.waitFor("memory: ", 5000);
    ASSERT_FALSE(serve_.waitFor("ready", 5000).empty());
    segment_ = seg.substr(9);
    remote_ = std::stoull(mem.substr(8, mem.find(' ', 8) - 8), nullptr, 16);
    ASSERT_NE(remote_, 0u) << mem;
    serve_pid_ = serve_.pid;

    // Host B: the initiator, this process.
    EngineOptions o;
    o.config = {{"transport", "tcp"},
                {"tcp.timeout_ms", std::to_string(kTimeoutMs)},
                {"tcp.connect_timeout_ms", std::to_string(kConnectTimeoutMs)},
                {"rpc.timeout_ms", std::to_string(kConnectTimeoutMs)}};
    engine_ = std::make_unique<TransferEngine>();
    ASSERT_TRUE(engine_->init("p2p", "host-b", ip_b_, 0, o).ok());
    ASSERT_TRUE(engine_->registerLocalMemory(src_.data(), src_.size(), "cpu:0").ok());
    ASSERT_TRUE(engine_->registerLocalMemory(dst_.data(), dst_.size(), "cpu:0").ok());
  }

  void TearDown() override {
    proxy_.reset();
    engine_.reset();
    serve_.kill(SIGKILL);
    serve_.wait();
    cleanupNamespace();
  }

  void cleanupNamespace() {
    if (!ns_a_.empty()) sh("ip netns del " + ns_a_ + " 2>/dev/null");
  }

  void open() {
    Status s = engine_->openSegment(segment_, seg_);
    ASSERT_TRUE(s.ok()) << s.toString();
  }

  // One batch of one request, waited for at most `bound_ms`.
  Outcome run(OpCode op, char* local, uint64_t remote_off, size_t len, int bound_ms) {
    Outcome out;
    BatchID b = 0;
    EXPECT_TRUE(engine_->allocateBatchID(1, b).ok());
    const auto t0 = Clock::now();
    Status s = engine_->submitTransfer(b, {TransferRequest{op, local, seg_, remote_ + remote_off, len}});
    EXPECT_TRUE(s.ok()) << s.toString();
    out.terminal = engine_->waitTransfer(b, std::chrono::milliseconds(bound_ms)).ok();
    out.seconds = secondsSince(t0);
    TransferStatus st;
    EXPECT_TRUE(engine_->getTransferStatus(b, 0, st).ok());
    out.state = st.s;
    out.error = st.error;
    if (!out.terminal) (void)engine_->cancelTransfer(b);
    // No leaked batch: once terminal, nothing references it.
    Status f = freeWhenIdle(*engine_, b, std::chrono::milliseconds(kTimeoutMs * 2));
    EXPECT_TRUE(f.ok()) << "batch not freed: " << f.toString();
    return out;
  }

  // Writes pattern(seed) to remote[off, off+len), reads it back, checks every
  // byte. Both batches must complete.
  void verifiedRound(uint64_t seed, size_t len, uint64_t off = 0, int bound_ms = 20000) {
    fillPattern(src_.data(), len, seed, off);
    std::memset(dst_.data(), 0, len);
    Outcome w = run(OpCode::kWrite, src_.data(), off, len, bound_ms);
    ASSERT_TRUE(w.terminal) << "write of " << len << " bytes hung past " << bound_ms << " ms";
    ASSERT_EQ(w.state, TransferState::kCompleted) << w.error.toString();
    Outcome r = run(OpCode::kRead, dst_.data(), off, len, bound_ms);
    ASSERT_TRUE(r.terminal) << "read of " << len << " bytes hung past " << bound_ms << " ms";
    ASSERT_EQ(r.state, TransferState::kCompleted) << r.error.toString();
    ASSERT_EQ(checkPattern(dst_.data(), len, seed, off), -1) << "corrupted byte after a round trip";
    last_write_s_ = w.seconds;
    last_read_s_ = r.seconds;
  }

  // Faults on host B's side of the link (its own namespace).
  void partition() {
    ASSERT_EQ(sh("nft add rule inet hwfault in ip saddr " + ip_a_ + " drop && nft add rule inet hwfault out ip daddr " +
                 ip_a_ + " drop"),
              0);
  }
  void heal() { ASSERT_EQ(sh("nft flush chain inet hwfault in && nft flush chain inet hwfault out"), 0); }
  void linkDown() { ASSERT_EQ(sh("ip link set " + dev_b_ + " down"), 0); }
  void linkUp() { ASSERT_EQ(sh("ip link set " + dev_b_ + " up"), 0); }

  // Open descriptors of the target process (a leaked connection is one).
  int targetFds() const {
    std::error_code ec;
    int n = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(serve_pid_) + "/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++n;
    return n;
  }
  bool targetAlive() const { return ::kill(serve_pid_, 0) == 0 && serve_.pid == serve_pid_; }

  EngineStats stats() const { return engine_->stats(); }

  // An outage longer than the timeout, begun before the batch: the batch
  // ends FAILED within the timeout (plus scheduling slack), and once the
  // network is back the next batch succeeds over fresh connections; the
  // target drops the connections it was left with.
  template <class Begin, class End>
  void outageLongerThanTimeout(Begin begin, End end) {
    verifiedRound(1, 4u << 20);  // connections up
    const int fds_before = targetFds();
    const uint64_t connects_before = counter(stats(), "tcp", "connects");
    begin();
    const auto t0 = Clock::now();
    fillPattern(src_.data(), 4u << 20, 2, 0);
    Outcome w = run(OpCode::kWrite, src_.data(), 0, 4u << 20, kTimeoutMs + 5000);
    ASSERT_TRUE(w.terminal) << "the batch hung through the outage";
    EXPECT_EQ(w.state, TransferState::kFailed);
    EXPECT_TRUE(w.error.code() == Code::kTimeout || w.error.code() == Code::kUnavailable) << w.error.toString();
    EXPECT_GE(w.seconds, kTimeoutMs / 1000.0 * 0.9) << "failed before the timeout: " << w.error.toString();
    EXPECT_LE(w.seconds, kTimeoutMs / 1000.0 + 2.0) << "failed well after the timeout";
    // The outage outlasts the failure by a second, then ends.
    while (secondsSince(t0) < kTimeoutMs / 1000.0 + 1.0) std::this_thread::sleep_for(50ms);
    end();
    verifiedRound(3, 4u << 20);
    EXPECT_GT(counter(stats(), "tcp", "connects"), connects_before) << "the next batch reused a dead connection";
    EXPECT_TRUE(targetAlive()) << "the target engine was restarted";
    // The target's side of the abandoned connections goes too (it cannot
    // hear the initiator's close across the outage: TCP keepalive finds it).
    EXPECT_TRUE(eventually([&] { return targetFds() <= fds_before; }, std::chrono::milliseconds(kTimeoutMs * 5)))
        << "target holds " << targetFds() << " descriptors, " << fds_before << " before the outage";
    EXPECT_EQ(counter(stats(), "", "batches_open"), 0u);
  }

  // An outage shorter than the timeout, during a batch: ridden out on the
  // same connections.
  template <class Begin, class End>
  void outageShorterThanTimeout(Begin begin, End end) {
    verifiedRound(1, 4u << 20);
    const uint64_t connects_before = counter(stats(), "tcp", "connects");
    const uint64_t lost_before = counter(stats(), "tcp", "connection_failures");
    begin();
    std::thread healer([&] {
      std::this_thread::sleep_for(1000ms);
      end();
    });
    fillPattern(src_.data(), 8u << 20, 5, 0);
    Outcome w = run(OpCode::kWrite, src_.data(), 0, 8u << 20, kTimeoutMs + 10000);
    healer.join();
    ASSERT_TRUE(w.terminal) << "the batch hung";
    EXPECT_EQ(w.state, TransferState::kCompleted) << w.error.toString();
    EXPECT_GE(w.seconds, 0.9) << "the outage did not hold the batch up: was it in place?";
    std::memset(dst_.data(), 0, 8u << 20);
    Outcome r = run(OpCode::kRead, dst_.data(), 0, 8u << 20, 20000);
    ASSERT_EQ(r.state, TransferState::kCompleted) << r.error.toString();
    EXPECT_EQ(checkPattern(dst_.data(), 8u << 20, 5, 0), -1);
    EXPECT_EQ(counter(stats(), "tcp", "connects"), connects_before);
    EXPECT_EQ(counter(stats(), "tcp", "connection_failures"), lost_before);
  }

  std::string tag_, ns_a_, dev_a_, dev_b_, ip_a_, ip_b_, segment_;
  Child serve_;
  pid_t serve_pid_ = -1;
  uint64_t remote_ = 0;
  Buffer src_{kLocalBytes}, dst_{kLocalBytes};
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<DelayProxy> proxy_;
  SegmentID seg_ = kInvalidSegment;
  double last_write_s_ = 0, last_read_s_ = 0;
};

TEST_F(NetFaults, one_percent_loss_each_way_still_moves_every_byte_verified) {
  open();
  ASSERT_EQ(sh("nft add rule inet hwfault in ip saddr " + ip_a_ +
               " numgen random mod 100 == 0 counter drop && nft add rule inet hwfault out ip daddr " + ip_a_ +
               " numgen random mod 100 == 0 counter drop"),
            0);
  for (uint64_t i = 0; i < 8; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    verifiedRound(100 + i, 4u << 20, (i % 4) << 22);
  }
  // The loss was real: the rules dropped packets.
  std::string out;
  ASSERT_EQ(sh("nft list table inet hwfault", &out), 0);
  uint64_t dropped = 0;
  for (size_t p = out.find("packets "); p != std::string::npos; p = out.find("packets ", p + 1))
    dropped += std::stoull(out.substr(p + 8));
  EXPECT_GT(dropped, 0u) << out;
}

TEST_F(NetFaults, data_connections_to_another_host_keep_autotuned_buffers_and_own_address_counts_as_loopback) {
  open();
  verifiedRound(7, 4u << 20);
  const uint16_t port = static_cast<uint16_t>(std::stoul(segment_.substr(segment_.rfind(':') + 1)));
  // What tcp.loopback_send_buf (default 256K) would have left: setsockopt's
  // figure doubled, capped by net.core.wmem_max.
  std::ifstream wmem("/proc/sys/net/core/wmem_max");
  int wmem_max = 0;
  ASSERT_TRUE(wmem >> wmem_max);
  const int loopback_sndbuf = 2 * std::min(256 << 10, wmem_max);
  int data = 0;
  for (const TcpSocket& t : tcpSockets()) {
    if (t.peer_port != port) continue;
    ++data;
    EXPECT_NE(t.sndbuf, loopback_sndbuf) << "a connection across the veth got the loopback send buffer";
  }
  EXPECT_GE(data, 2) << "the tcp data connections to " << segment_;  // tcp.connections (+ the rpc one)
  // A connection to one of this host's own addresses runs over lo.
  net::Fd ls, c;
  uint16_t own = 0;
  ASSERT_TRUE(net::listenOn(ip_b_, 0, 1, ls, own).ok());
  ASSERT_TRUE(net::connectTo(ip_b_, own, std::chrono::seconds(5), c).ok());
  EXPECT_TRUE(net::isLoopback(c.get()));
}

TEST_F(NetFaults, ten_megabytes_per_second_cap_is_slow_and_every_byte_verified) {
  open();
  verifiedRound(1, 1u << 20);
  const std::string tbf = " root tbf rate 10mbps burst 64kb latency 200ms";  // tc: mbps = 10^6 bytes/s
  ASSERT_EQ(sh("tc qdisc add dev " + dev_b_ + tbf + " && ip netns exec " + ns_a_ + " tc qdisc add dev " + dev_a_ + tbf),
            0);
  const size_t len = 8u << 20;
  verifiedRound(7, len);
  // Each direction was held to the cap (with room for the bucket's burst),
  // and the slow link never looked like a stall to the timeout.
  EXPECT_GE(last_write_s_, len / 10.5e6) << "write ran faster than the cap";
  EXPECT_GE(last_read_s_, len / 10.5e6) << "read ran faster than the cap";
}

TEST_F(NetFaults, fifty_ms_each_way_through_a_delaying_proxy_moves_every_byte_verified) {
  // Every connection to the target (descriptor fetch, data) goes through
  // the proxy: host B redirects them to it; the proxy's own upstream
  // connections carry its mark and go straight.
  std::string host;
  uint16_t port = 0;
  {
    auto colon = segment_.rfind(':');
    host = segment_.substr(0, colon);
    port = static_cast<uint16_t>(std::stoi(segment_.substr(colon + 1)));
  }
  proxy_ = std::make_unique<DelayProxy>(50ms);
  ASSERT_TRUE(proxy_->start("127.0.0.1", host, port)) << proxy_->error();
  ASSERT_EQ(sh("nft add table ip hwnat && nft add chain ip hwnat out '{ type nat hook output priority -100; }' && "
               "nft add rule ip hwnat out meta mark != " +
               std::to_string(proxy_->mark()) + " ip daddr " + host + " tcp dport " + std::to_string(port) +
               " redirect to :" + std::to_string(proxy_->port())),
            0);
  open();
  // A small read is one round trip: at least 2 x 50 ms.
  Outcome small = run(OpCode::kRead, dst_.data(), 0, 4096, 10000);
  ASSERT_EQ(small.state, TransferState::kCompleted) << small.error.toString();
  EXPECT_GE(small.seconds, 0.1) << "the read did not go through the delaying proxy";
  for (uint64_t i = 0; i < 3; ++i) verifiedRound(40 + i, 8u << 20, i << 23);
  EXPECT_GE(proxy_->connections(), 2u);
  EXPECT_GE(proxy_->bytesRelayed(), 48ull << 20);
}

TEST_F(NetFaults, partition_shorter_than_the_timeout_is_ridden_out) {
  open();
  outageShorterThanTimeout([&] { partition(); }, [&] { heal(); });
}

TEST_F(NetFaults, partition_longer_than_the_timeout_fails_the_batch_then_fresh_connections_serve) {
  open();
  outageLongerThanTimeout([&] { partition(); }, [&] { heal(); });
}

TEST_F(NetFaults, link_down_shorter_than_the_timeout_is_ridden_out) {
  open();
  outageShorterThanTimeout([&] { linkDown(); }, [&] { linkUp(); });
}

TEST_F(NetFaults, link_down_longer_than_the_timeout_fails_the_batch_then_fresh_connections_serve) {
  open();
  outageLongerThanTimeout([&] { linkDown(); }, [&] { linkUp(); });
}

// A control connection (descriptor fetches, change notices) whose client
// vanished during a partition: the listener's thread waiting for its next
// frame must not wait forever (keepalive, every rpc.timeout_ms).
TEST_F(NetFaults, a_control_connection_abandoned_in_a_partition_is_released_by_the_target) {
  const int fds_before = targetFds();
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(net::splitHostPort(segment_, host, port).ok());
  net::Fd fd;
  ASSERT_TRUE(rpc::openStream(host, port, rpc::kConnControl, 2s, fd).ok());
  ASSERT_TRUE(eventually([&] { return targetFds() == fds_before + 1; }, 5s)) << "the target did not take it";
  partition();
  net::setResetOnClose(fd.get());
  fd.reset();  // the reset is lost in the partition
  heal();
  EXPECT_TRUE(eventually([&] { return targetFds() <= fds_before; }, std::chrono::milliseconds(kConnectTimeoutMs * 6)))
      << "target holds " << targetFds() << " descriptors, " << fds_before << " before";
}

// A write that FAILED must not land later over a write that completed after
// it. Across a partition the initiator's kernel still holds the abandoned
// request's bytes and would send them once the network heals (at its next
// retransmission, seconds later), over the target's copy of the dead
// connection, which never heard the initiator close it.
TEST_F(NetFaults, a_write_failed_by_a_partition_never_lands_after_the_network_heals) {
  open();
  const size_t len = 256u << 10;
  verifiedRound(1, len);
  partition();
  const auto t0 = Clock::now();
  fillPattern(src_.data(), len, 50, 0);
  Outcome w1 = run(OpCode::kWrite, src_.data(), 0, len, kTimeoutMs + 5000);
  ASSERT_TRUE(w1.terminal);
  ASSERT_EQ(w1.state, TransferState::kFailed);
  heal();
  verifiedRound(51, len);  // completes over fresh connections
  // TCP retransmits with exponential backoff from 200 ms: the abandoned
  // bytes would come back about 6.2 s after they were first sent. Watch
  // the range until well past that: it keeps the completed write's bytes.
  const auto watch = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::seconds(10) - (Clock::now() - t0));
  int64_t bad = -1;
  EXPECT_TRUE(holdsFor(
      [&] {
        std::memset(dst_.data(), 0, len);
        Outcome r = run(OpCode::kRead, dst_.data(), 0, len, 10000);
        if (r.state != TransferState::kCompleted) return false;
        bad = checkPattern(dst_.data(), len, 51, 0);
        return bad == -1;
      },
      watch))
      << "byte " << bad << " of the range changed after the write that completed: the failed write landed late";
}

// An initiator process stopped for longer than its timeout (SIGSTOP, a
// paused VM, a starved thread) while writes were on the wire: its kernel
// kept the connections going, so the target applied them and answered; on
// resuming, the initiator reads those answers and completes the writes
// instead of calling the quiet stretch a silent peer.
TEST_F(NetFaults, an_initiator_stopped_past_its_timeout_completes_what_moved_meanwhile) {
  const int fds_idle = targetFds();
  Child bench;
  ASSERT_TRUE(bench.start({"bench", "--target", segment_, "--host", ip_b_, "--op", "write", "--block-size", "64K",
                           "--batch-size", "8", "--threads", "2", "--seconds", "6"},
                          {"HAWSER_TCP_TIMEOUT_MS=1000"}));
  // Until its batches flow: the target serves its two data connections.
  ASSERT_TRUE(eventually([&] { return targetFds() >= fds_idle + 2; }, 10s));
  // Mid-run: 8 MiB more of its writes acknowledged by the target's kernel
  // (every TCP connection of this namespace is the initiator's).
  auto acked = [] {
    uint64_t n = 0;
    for (const TcpSocket& t : tcpSockets()) n += t.bytes_acked;
    return n;
  };
  const uint64_t acked_before = acked();
  ASSERT_TRUE(eventually([&] { return acked() >= acked_before + (8u << 20); }, 10s))
      << "the initiator's writes do not flow: " << acked() - acked_before << " bytes acknowledged";
  ASSERT_TRUE(stopProcess(bench.pid)) << "the initiator did not stop";
  std::this_thread::sleep_for(2500ms);  // the property is about time passing: 2.5 x its timeout
  ::kill(bench.pid, SIGCONT);
  const int rc = bench.wait();
  std::string out;
  sh("cat " + bench.out_path, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("verified: yes"), std::string::npos) << out;
}

// The same for a target that stops (SIGSTOP: a frozen process, a paused
// VM) while a write is on its way: its kernel buffers the request, the
// initiator times out and closes; when the target resumes, the buffered
// write of a connection its initiator abandoned must not be applied.
TEST_F(NetFaults, a_write_failed_because_the_target_froze_never_lands_when_it_resumes) {
  open();
  const size_t len = 32u << 10;  // fits in the stopped target's receive buffer
  verifiedRound(1, len);
  const int fds_before = targetFds();
  // Every thread of the target stopped before the write leaves: one still
  // running on the other core would apply it.
  ASSERT_TRUE(stopProcess(serve_pid_)) << "the target did not stop";
  fillPattern(src_.data(), len, 60, 0);
  Outcome w1 = run(OpCode::kWrite, src_.data(), 0, len, kTimeoutMs + 5000);
  ::kill(serve_pid_, SIGCONT);
  ASSERT_TRUE(w1.terminal);
  ASSERT_EQ(w1.state, TransferState::kFailed);
  EXPECT_EQ(w1.error.code(), Code::kTimeout) << w1.error.toString();
  // The target ends the abandoned connection (it sees the close right
  // behind the buffered request).
  EXPECT_TRUE(eventually([&] { return targetFds() <= fds_before; }, std::chrono::milliseconds(kTimeoutMs * 5)))
      << "target holds " << targetFds() << " descriptors, " << fds_before << " before";
  std::memset(dst_.data(), 0, len);
  Outcome r = run(OpCode::kRead, dst_.data(), 0, len, 10000);
  ASSERT_EQ(r.state, TransferState::kCompleted) << r.error.toString();
  EXPECT_EQ(checkPattern(dst_.data(), len, 1, 0), -1) << "the failed write landed when the target resumed";
}

}  // namespace
