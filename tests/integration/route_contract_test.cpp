// Route contracts and fallbacks (docs/routes.md): a request the contract
// forbids fails at submit with kNoTransport naming the transport it would
// have taken, the one expected and why that one is unavailable; a fallback
// that happens is counted (hawser_route_fallbacks_total{from,to,reason}),
// shown by `hawser doctor --peer` and logged once per peer and reason.
//
// The refusals are real ones: shm declining a target started in pid and
// mount namespaces of its own whose socket directory (shm.socket_dir) is a
// tmpfs of its mount namespace (two containers that share no volume),
// rdma absent from a host without an RDMA NIC, and a cheaper transport
// installed in the initiator that declines every peer with a reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "common/log_capture.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 4242;
constexpr size_t kTarget = 4u << 20;

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(needle, p)) != std::string::npos; p += needle.size()) ++n;
  return n;
}

// Why this host cannot start a process in pid and mount namespaces of its own ("" when it can).
std::string unshareUnavailable() {
  if (::access("/usr/bin/unshare", X_OK) != 0) return "no /usr/bin/unshare";
  if (sh("/usr/bin/unshare --pid --mount --fork true >/dev/null 2>&1") != 0)
    return "unshare --pid --mount is not permitted here (needs CAP_SYS_ADMIN or user namespaces)";
  return "";
}

bool rdmaInstalled(TransferEngine& e) {
  for (auto& d : e.diagnose())
    if (d.transport == "rdma") return d.installed;
  return false;
}

// `hawser serve` exposing kTarget bytes of pattern kSeed; `hidden_socket`:
// in pid and mount namespaces of its own, its shm socket in a directory
// (shm.socket_dir) that a tmpfs mounted there in its mount namespace hides
// from everyone else.
class Target {
 public:
  bool start(bool hidden_socket) {
    std::string cmd = hawserBin() + " serve --listen 127.0.0.1:0 --memory " + std::to_string(kTarget) +
                      " --fill-seed " + std::to_string(kSeed);
    std::vector<std::string> argv{"/bin/sh", "-c", "exec " + cmd};
    if (hidden_socket)
      argv = {"/usr/bin/unshare", "--pid", "--mount", "--fork", "--kill-child", "/bin/sh", "-c",
              "mount -t tmpfs hawser-test " + dir_.path + " && exec env HAWSER_SHM_SOCKET_DIR=" + dir_.path + " " +
                  cmd};
    if (!child_.exec(argv)) return false;
    std::string seg = child_.waitFor("segment: ", 20000);
    if (seg.empty() || child_.waitFor("ready", 20000).empty()) return false;
    segment = seg.substr(9);
    while (!segment.empty() && (segment.back() == '\n' || segment.back() == '\r')) segment.pop_back();
    return true;
  }
  std::string segment;

 private:
  TempDir dir_;
  Child child_;
};

class Routes : public ::testing::Test {
 protected:
  // Opens the target in `e` (initialized with `config`) and registers `local`.
  void open(TransferEngine& e, const std::map<std::string, std::string>& config = {}) {
    EngineOptions o;
    o.config = config;
    ASSERT_TRUE(e.init("p2p", "initiator", "127.0.0.1", 0, o).ok());
    ASSERT_TRUE(e.openSegment(target_.segment, seg_).ok());
    std::vector<SegmentBuffer> bufs;
    ASSERT_TRUE(e.segmentBuffers(seg_, bufs).ok());
    ASSERT_EQ(bufs.size(), 1u);
    base_ = bufs[0].addr;
    ASSERT_TRUE(e.registerLocalMemory(local_.p, local_.n, "cpu:0", false).ok());
  }
  TransferRequest read(size_t off, size_t len) { return {OpCode::kRead, local_.p + off, seg_, base_ + off, len}; }

  Target target_;
  Buffer local_{1u << 20};
  SegmentID seg_ = kInvalidSegment;
  uint64_t base_ = 0;
};

class OtherMountNamespace : public Routes {
 protected:
  void SetUp() override {
    if (std::string why = unshareUnavailable(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(target_.start(/*hidden_socket=*/true)) << "hawser serve under unshare --pid --mount did not start";
  }
  // How shm words the refusal: the socket file is not to be seen from here.
  std::string why() const { return "segment '" + target_.segment + "': the peer's socket "; }
};

TEST_F(OtherMountNamespace, shm_declines_the_peer_and_the_fallback_to_tcp_is_counted_and_logged_once) {
  LogCapture log;
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e));
  RouteExplanation r;
  ASSERT_TRUE(e.explainRoute(seg_, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "tcp") << r.why;
  EXPECT_EQ(r.fallback_from, "shm") << r.why;
  EXPECT_EQ(r.fallback_reason, "other_mount_namespace") << r.why;
  EXPECT_EQ(r.fallback_detail.rfind(why(), 0), 0u) << r.fallback_detail;
  EXPECT_NE(r.fallback_detail.find("its shm.socket_dir is not a directory this process sees"), std::string::npos)
      << r.fallback_detail;
  EXPECT_EQ(routeFallbacks(e, "shm", "tcp", "other_mount_namespace"), -1) << "nothing fell back yet";

  for (int round = 0; round < 2; ++round) {
    auto st = runBatch(e, seg_, {read(0, 4096), read(4096, 8192), read(65536, 65536)});
    ASSERT_EQ(st.size(), 3u);
    for (auto& s : st) ASSERT_EQ(s.s, TransferState::kCompleted) << s.error.toString();
  }
  EXPECT_EQ(checkPattern(local_.p, 12288, kSeed, 0), -1);
  EXPECT_EQ(checkPattern(local_.p + 65536, 65536, kSeed, 65536), -1);
  // Every request that fell back, counted; in the Prometheus text too.
  EXPECT_EQ(routeFallbacks(e, "shm", "tcp", "other_mount_namespace"), 6);
  const std::string text = prometheusText(e.stats().metrics);
  EXPECT_NE(text.find("hawser_route_fallbacks_total{from=\"shm\",to=\"tcp\",reason=\"other_mount_namespace\"} 6"),
            std::string::npos)
      << text;
  // One warning for this peer and reason, not one per request or submit.
  const std::string logged = log.text();
  EXPECT_EQ(occurrences(logged, "requests go over tcp, not shm: other_mount_namespace"), 1u) << logged;
  EXPECT_EQ(occurrences(logged, "segment '" + target_.segment + "': requests go over tcp"), 1u) << logged;
}

TEST_F(OtherMountNamespace, a_contract_allowing_only_shm_refuses_the_request_naming_tcp_shm_and_why) {
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e, {{"route.transports", "shm"}}));
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(4, b).ok());
  Status s = e.submitTransfer(b, {read(0, 4096), read(4096, 4096)});
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  const std::string body = "segment '" + target_.segment +
                           "': the route contract (transports shm, from config route.transports/route.require) "
                           "forbids the route this request would take, tcp; the expected route, shm, is "
                           "unavailable: other_mount_namespace: " + why();
  const std::string prefix = "requests[0]: " + body;
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  // All or nothing: the batch holds nothing, nothing fell back.
  TransferStatus bs;
  ASSERT_TRUE(e.getBatchTransferStatus(b, bs).ok());
  EXPECT_EQ(bs.transferred_bytes, 0u);
  EXPECT_EQ(routeFallbacks(e, "shm", "tcp", "other_mount_namespace"), -1);
  // explainRoute says the same.
  RouteExplanation r;
  ASSERT_TRUE(e.explainRoute(seg_, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "");
  const std::string explained = "to the peer's host memory: " + body;
  EXPECT_EQ(r.why.substr(0, explained.size()), explained) << r.why;
  ASSERT_TRUE(e.freeBatchID(b).ok());
}

TEST_F(OtherMountNamespace, a_request_contract_replaces_the_engines_either_way) {
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e, {{"route.transports", "shm"}}));
  // The engine's contract forbids tcp; this request's allows it.
  TransferRequest q = read(0, 8192);
  q.route = RouteContract{true, kRouteTcp, 0};
  auto st = runBatch(e, seg_, {q});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(checkPattern(local_.p, 8192, kSeed, 0), -1);
  // The contract left shm out: taking tcp is its choice, not a fallback.
  EXPECT_EQ(routeFallbacks(e, "shm", "tcp", "other_mount_namespace"), -1);
  // A request that requires same_host: shm is what it expected.
  q.route = RouteContract{true, 0, kSameHost};
  Status submit;
  st = runBatch(e, seg_, {q}, 30000, &submit);
  EXPECT_EQ(submit.code(), Code::kNoTransport) << submit.toString();
  const std::string prefix = "requests[0]: segment '" + target_.segment +
                             "': the route contract (require same_host, from the request) forbids the route this "
                             "request would take, tcp; the expected route, shm, is unavailable: other_mount_namespace: ";
  EXPECT_EQ(submit.message().substr(0, prefix.size()), prefix) << submit.message();
}

TEST_F(OtherMountNamespace, doctor_peer_shows_the_fallback_with_its_reason) {
  std::string out;
  ASSERT_EQ(sh(hawserBin() + " doctor --json --peer " + target_.segment + " 2>/dev/null", &out), 0) << out;
  auto j = nlohmann::json::parse(lastLine(out));
  auto& host = j["peer"]["routes"]["cpu:0"];
  EXPECT_EQ(host["transport"], "tcp") << j.dump();
  ASSERT_TRUE(host.contains("fallback")) << j.dump();
  EXPECT_EQ(host["fallback"]["from"], "shm");
  EXPECT_EQ(host["fallback"]["to"], "tcp");
  EXPECT_EQ(host["fallback"]["reason"], "other_mount_namespace");
  ASSERT_EQ(sh(hawserBin() + " doctor --peer " + target_.segment + " 2>/dev/null", &out), 0) << out;
  EXPECT_NE(out.find("  fallback shm -> tcp: other_mount_namespace: " + why()),
            std::string::npos)
      << out;
}

class SameHost : public Routes {
 protected:
  void SetUp() override { ASSERT_TRUE(target_.start(/*hidden_socket=*/false)) << "hawser serve did not start"; }
};

TEST_F(SameHost, requiring_zero_copy_without_an_rdma_nic_names_rdma_and_its_absence) {
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e, {{"route.require", "zero_copy"}}));
  if (rdmaInstalled(e)) GTEST_SKIP() << "this host has an RDMA NIC";
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(1, b).ok());
  Status s = e.submitTransfer(b, {read(0, 4096)});
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  const std::string prefix = "requests[0]: segment '" + target_.segment +
                             "': the route contract (require zero_copy, from config route.transports/route.require) "
                             "forbids the route this request would take, shm; the expected route, rdma, is "
                             "unavailable: no_device: not installed on this host: ";
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  ASSERT_TRUE(e.freeBatchID(b).ok());
}

TEST_F(SameHost, a_peer_served_by_its_best_transport_is_no_fallback) {
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e, {{"route.transports", "shm,tcp"}}));
  auto st = runBatch(e, seg_, {read(0, 4096)});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  RouteExplanation r;
  ASSERT_TRUE(e.explainRoute(seg_, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "shm") << r.why;
  EXPECT_EQ(r.fallback_from, "") << r.why;
  for (const MetricFamily& f : e.stats().metrics)
    EXPECT_NE(f.name, "hawser_route_fallbacks_total") << "no fallback happened";
}

TEST_F(SameHost, one_submit_from_one_region_over_two_transports_moves_every_byte_on_each) {
  // Requests 0 and 2 may take tcp only, 1 and 3 the engine's best (shm),
  // all four from one registered region: the submit keeps that region once
  // for each transport (the first entry takes the registry's reference, the
  // others copy it), and each transport gets its own registration of it.
  TransferEngine e;
  ASSERT_NO_FATAL_FAILURE(open(e));
  std::memset(local_.p, 0, 4 * 65536);
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 4; ++i) {
    reqs.push_back(read(i * 65536, 65536));
    if (i % 2 == 0) reqs.back().route = RouteContract{true, kRouteTcp, 0};
  }
  const uint64_t tcp0 = counter(e, "tcp", "slices_completed"), shm0 = counter(e, "shm", "slices_completed");
  auto st = runBatch(e, seg_, reqs);
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(st[i].s, TransferState::kCompleted) << i << ": " << st[i].error.toString();
  EXPECT_EQ(checkPattern(local_.p, 4 * 65536, kSeed), -1);
  EXPECT_EQ(counter(e, "tcp", "slices_completed") - tcp0, 2u);
  EXPECT_EQ(counter(e, "shm", "slices_completed") - shm0, 2u);
}

// A transport cheaper than any other that declines every peer, saying why.
class DecliningTransport : public Transport {
 public:
  const char* name() const override { return "declining"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.memory_segments = true;
    c.cost_rank = 5;
    return c;
  }
  Status install(const TransportContext&) override { return Status::OK(); }
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override {
    RouteDecline why;
    return openRoute(seg, out, why);
  }
  Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>&, RouteDecline& why) override {
    why = {RouteReason::kPermissionDenied, "declining refuses segment '" + seg.name + "'"};
    return {Code::kNotSupported, why.text};
  }
  Status newSubBatch(size_t, std::unique_ptr<SubBatch>&) override { return {Code::kNotSupported, "moves nothing"}; }
};

TEST_F(SameHost, a_cheaper_transport_declining_the_peer_is_a_fallback_counted_per_request_and_logged_once) {
  LogCapture log;
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "initiator", "127.0.0.1", 0).ok());
  ASSERT_TRUE(detail::EngineAccess::of(e).installTransport(std::make_unique<DecliningTransport>()).ok());
  ASSERT_TRUE(e.openSegment(target_.segment, seg_).ok());
  std::vector<SegmentBuffer> bufs;
  ASSERT_TRUE(e.segmentBuffers(seg_, bufs).ok());
  base_ = bufs[0].addr;
  ASSERT_TRUE(e.registerLocalMemory(local_.p, local_.n, "cpu:0", false).ok());
  for (int round = 0; round < 3; ++round) {
    auto st = runBatch(e, seg_, {read(0, 4096), read(8192, 4096)});
    for (auto& s : st) ASSERT_EQ(s.s, TransferState::kCompleted) << s.error.toString();
    // A second open of the segment finds the same refusal: still one line.
    SegmentID again;
    ASSERT_TRUE(e.openSegment(target_.segment, again).ok());
    ASSERT_TRUE(e.closeSegment(again).ok());
  }
  EXPECT_EQ(checkPattern(local_.p, 4096, kSeed, 0), -1);
  EXPECT_EQ(routeFallbacks(e, "declining", "shm", "permission_denied"), 6);
  const std::string logged = log.text();
  EXPECT_EQ(occurrences(logged, "segment '" + target_.segment +
                                    "': requests go over shm, not declining: permission_denied: declining refuses "
                                    "segment '" + target_.segment + "'"),
            1u)
      << logged;
  // Block requests count too: one per block request.
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(1, b).ok());
  std::vector<Block> blocks = {{local_.p, base_, 4096}, {local_.p + 8192, base_ + 16384, 4096}};
  ASSERT_TRUE(e.submitBlocks(b, OpCode::kRead, seg_, blocks).ok());
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(freeWhenIdle(e, b).ok());
  EXPECT_EQ(routeFallbacks(e, "declining", "shm", "permission_denied"), 7);
  // Switched off by a contract that leaves the cheaper transport out: shm is its choice.
  TransferRequest q = read(0, 4096);
  q.route = RouteContract{true, kRouteShm | kRouteTcp, 0};
  auto st = runBatch(e, seg_, {q});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(routeFallbacks(e, "declining", "shm", "permission_denied"), 7);
}

TEST(RouteConfig, an_unknown_name_in_the_contract_fails_init_naming_the_key) {
  TransferEngine e;
  EngineOptions o;
  o.config = {{"route.require", "zero_copy,fast"}};
  Status s = e.init("p2p", "n", "127.0.0.1", 0, o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "init: config route.require (env HAWSER_ROUTE_REQUIRE) = 'zero_copy,fast': 'fast' is not a route property "
            "(one of: zero_copy, no_staging, same_host)");
  TransferEngine e2;
  o.config = {{"route.transports", "tcp, infiniband"}};
  s = e2.init("p2p", "n", "127.0.0.1", 0, o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "init: config route.transports (env HAWSER_ROUTE_TRANSPORTS) = 'tcp, infiniband': 'infiniband' is not a "
            "transport a route contract can name (one of: tcp, shm, rdma, nvlink, file, nvmeof)");
}

}  // namespace
}  // namespace hawser::test
