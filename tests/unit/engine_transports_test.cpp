// How the engine installs, selects and reports transports, and its
// synchronous transfer: install failures are errors, not skips; the cheapest
// transport that can serve a request wins; transferSync never leaks a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "common/engine_pair.h"
#include "engine/selection.h"
#include "gpu/cuda_driver.h"
#include "engine/transport_list.h"
#include "metadata/descriptor.h"

using namespace hawser;
using namespace hawser::test;

namespace {

// A transport whose install() returns a chosen status and that moves nothing.
class StubTransport : public Transport {
 public:
  StubTransport(const char* name, TransportCaps caps, Status install = Status::OK())
      : name_(name), caps_(caps), install_(install) {}
  const char* name() const override { return name_; }
  TransportCaps caps() const override { return caps_; }
  Status install(const TransportContext&) override { return install_; }
  Status openPeer(const SegmentDesc&, std::shared_ptr<PeerHandle>& out) override {
    if (!refuse_.empty()) return {Code::kNotSupported, refuse_};
    out = std::make_shared<PeerHandle>();
    return Status::OK();
  }
  Status newSubBatch(size_t, std::unique_ptr<SubBatch>&) override {
    return {Code::kNotSupported, "stub transports move nothing"};
  }
  void diagnose(TransportDiagnosis& d) const override { d.facts.emplace_back("stub", "yes"); }
  std::string refuse_;

 private:
  const char* name_;
  TransportCaps caps_;
  Status install_;
};

uint64_t counter(const Counters& c, const std::string& name) {
  for (auto& [k, v] : c)
    if (k == name) return v;
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// A view of a memory segment with one route per stub.
SegmentView viewOf(std::vector<StubTransport*> ts, bool same_host = false) {
  SegmentView v;
  auto d = std::make_shared<SegmentDesc>();
  d->name = "peer";
  v.desc = d;
  v.same_host = same_host;
  for (auto* t : ts) {
    Route r;
    r.transport = t;
    r.name = t->name();
    r.caps = t->caps();
    r.refusal = t->openRoute(*d, r.peer, r.decline);
    r.counts = !r.peer;
    v.any_counts |= r.counts;
    v.routes.push_back(std::move(r));
  }
  return v;
}

}  // namespace

TEST(TransportInstall, a_transport_failing_to_install_fails_init_naming_it) {
  {
    ScopedTransportFactory broken({"broken", [] {
                                     return std::unique_ptr<Transport>(new StubTransport(
                                         "broken", {.memory_segments = true}, Status(Code::kIoError, "disk on fire")));
                                   }});
    TransferEngine e;
    Status s = e.init("p2p", "n", "127.0.0.1", 0);
    EXPECT_EQ(s.code(), Code::kIoError);
    EXPECT_NE(s.message().find("transport broken failed to install: disk on fire"), std::string::npos) << s.message();
  }
  // Unregistered with its scope: the next engine installs without it.
  TransferEngine e;
  Status s = e.init("p2p", "n", "127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.toString();
  for (auto& d : e.diagnose()) EXPECT_NE(d.transport, "broken");
  EXPECT_FALSE(unregisterTransportFactory("broken"));
}

TEST(TransportInstall, a_transport_the_host_cannot_run_is_left_out_and_diagnosed) {
  ScopedTransportFactory broken({"broken", [] {
                                   return std::unique_ptr<Transport>(new StubTransport(
                                       "broken", {.memory_segments = true}, Status(Code::kNotSupported, "no such device")));
                                 }});
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "n", "127.0.0.1", 0).ok());
  auto names = e.transports();
  EXPECT_EQ(std::find(names.begin(), names.end(), "broken"), names.end());
  bool seen = false;
  for (auto& d : e.diagnose()) {
    if (d.transport != "broken") continue;
    seen = true;
    EXPECT_FALSE(d.installed);
    EXPECT_EQ(d.reason, "no such device");
    EXPECT_EQ(d.facts.size(), 1u);
  }
  EXPECT_TRUE(seen);
  // tcp and file are always built, and install on every host.
  EXPECT_NE(std::find(names.begin(), names.end(), "tcp"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "file"), names.end());
}

TEST(TransportInstall, built_transports_say_which_forced_names_are_bad_values_and_which_cannot_run) {
  ScopedTransportFactory broken({"broken", [] {
                                   return std::unique_ptr<Transport>(new StubTransport(
                                       "broken", {.memory_segments = true}, Status(Code::kNotSupported, "no such device")));
                                 }});
  const std::vector<std::string> built = TransferEngine::builtTransports();  // no init() needed
  auto has = [&](const char* n) { return std::find(built.begin(), built.end(), n) != built.end(); };
  EXPECT_TRUE(has("tcp"));
  EXPECT_TRUE(has("file"));
  EXPECT_TRUE(has("nvmeof")) << "the reference's name for file";
  EXPECT_TRUE(has("broken"));
  EXPECT_FALSE(has("carrier-pigeon"));
  // Listed but unable to install here: kNoTransport; not listed: a bad value.
  EngineOptions o;
  o.config["transport"] = "broken";
  TransferEngine a;
  EXPECT_EQ(a.init("p2p", "a", "127.0.0.1", 0, o).code(), Code::kNoTransport);
  o.config["transport"] = "carrier-pigeon";
  TransferEngine b;
  EXPECT_EQ(b.init("p2p", "b", "127.0.0.1", 0, o).code(), Code::kInvalidArgument);
}

TEST(TransportInstall, installed_transports_are_listed_cheapest_first) {
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "n", "127.0.0.1", 0).ok());
  int last = -1;
  std::map<std::string, int> rank;
  for (auto& d : e.diagnose()) rank[d.transport] = d.cost_rank;
  for (auto& n : e.transports()) {
    EXPECT_GE(rank[n], last) << n;
    last = rank[n];
  }
}

TEST(TransportSelection, the_cheapest_transport_that_fits_wins_whatever_the_list_order) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40});
  StubTransport rdma("rdma", {.memory_segments = true, .cost_rank = 30});
  SegmentView v = viewOf({&tcp, &rdma});
  std::string why;
  const Route* r = selectRoute(v, RouteQuery{}, "", &why);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "rdma");
  EXPECT_NE(why.find("rdma (rank 30)"), std::string::npos) << why;
}

TEST(TransportSelection, a_forced_transport_wins_for_memory_segments) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40});
  StubTransport rdma("rdma", {.memory_segments = true, .cost_rank = 30});
  SegmentView v = viewOf({&tcp, &rdma});
  std::string why;
  const Route* r = selectRoute(v, RouteQuery{}, "tcp", &why);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "tcp");
  EXPECT_NE(why.find("rdma: not tcp (forced by config 'transport')"), std::string::npos) << why;
}

TEST(TransportSelection, memory_kinds_same_host_and_peer_refusals_are_each_named) {
  StubTransport host_only("tcp", {.memory_segments = true, .cost_rank = 40});
  StubTransport local("shm", {.memory_segments = true, .same_host_only = true, .cost_rank = 20});
  StubTransport gpu("nvlink", {.memory_segments = true, .local_memory = kGpuMemory, .remote_memory = kGpuMemory,
                               .same_host_only = true, .cost_rank = 10});
  StubTransport refusing("rdma", {.memory_segments = true, .cost_rank = 30});
  refusing.refuse_ = "no NIC reaches the peer's fabric";
  SegmentView v = viewOf({&host_only, &local, &gpu, &refusing});
  std::string why;
  // Another host: only tcp fits.
  const Route* r = selectRoute(v, RouteQuery{}, "", &why);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "tcp");
  EXPECT_NE(why.find("shm: needs both ends on one host"), std::string::npos) << why;
  EXPECT_NE(why.find("nvlink: does not move local host memory"), std::string::npos) << why;
  EXPECT_NE(why.find("rdma: no NIC reaches the peer's fabric"), std::string::npos) << why;
  // GPU memory at both ends, another host: nothing.
  r = selectRoute(v, RouteQuery{kGpuMemory, kGpuMemory}, "", &why);
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(why.find("tcp: does not move local GPU memory"), std::string::npos) << why;
  // Same host: shm for host memory, nvlink for GPU memory.
  SegmentView same = viewOf({&host_only, &local, &gpu, &refusing}, /*same_host=*/true);
  r = selectRoute(same, RouteQuery{}, "");
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "shm");
  r = selectRoute(same, RouteQuery{kGpuMemory, kGpuMemory}, "");
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "nvlink");
  // Host memory here, GPU memory there: the remote kind rules nvlink and shm out.
  r = selectRoute(same, RouteQuery{kHostMemory, kGpuMemory}, "", &why);
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(why.find("tcp: does not move remote GPU memory"), std::string::npos) << why;
}

TEST(TransportSelection, file_segments_go_to_the_file_transport_even_when_one_is_forced) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40});
  StubTransport file("file", {.file_segments = true, .cost_rank = 50});
  SegmentView v = viewOf({&tcp, &file});
  auto d = std::make_shared<SegmentDesc>(*v.desc);
  d->kind = SegmentDesc::Kind::kFile;
  v.desc = d;
  const Route* r = selectRoute(v, RouteQuery{}, "tcp");
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->transport->name(), "file");
}

TEST(EngineRoutes, explain_route_names_the_transport_a_peer_would_get) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  RouteExplanation r;
  ASSERT_TRUE(p.init.explainRoute(p.seg, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "fake");  // rank 1, cheaper than tcp
  ASSERT_TRUE(p.init.explainRoute(p.seg, "cuda:0", r).ok());
  if (gpu::CudaDriver::get()) {  // a GPU host: tcp stages GPU memory
    EXPECT_EQ(r.transport, "tcp") << r.why;
  } else {
    EXPECT_EQ(r.transport, "");
    EXPECT_NE(r.why.find("tcp: does not move local GPU memory"), std::string::npos) << r.why;
  }
  EXPECT_EQ(p.init.explainRoute(4242, "cpu:0", r).code(), Code::kSegmentNotFound);
}

TEST(TransferSync, moves_every_byte_and_reports_each_task) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  fillPattern(p.target_mem.p, 65536, 7);
  std::vector<TransferStatus> st;
  Status s = p.init.transferSync({{OpCode::kRead, p.local(), p.seg, p.remote(), 32768},
                                  {OpCode::kRead, p.local(32768), p.seg, p.remote(32768), 32768}},
                                 std::chrono::seconds(10), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[1].s, TransferState::kCompleted);
  EXPECT_EQ(st[1].transferred_bytes, 32768u);
  EXPECT_EQ(checkPattern(p.local(), 65536, 7), -1);
  EXPECT_EQ(counter(p.init.stats().engine, "batches_open"), 0u);
}

TEST(TransferSync, a_bad_request_is_refused_and_no_batch_is_left) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  char stray[16];
  Status s = p.init.transferSync({{OpCode::kRead, stray, p.seg, p.remote(), 16}}, std::chrono::seconds(10));
  EXPECT_EQ(s.code(), Code::kNotRegistered);
  EXPECT_EQ(counter(p.init.stats().engine, "batches_open"), 0u);
  EXPECT_EQ(counter(p.init.stats().engine, "submits_refused"), 1u);
}

TEST(TransferSync, a_deadline_cancels_and_frees_the_batch) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  p.fake_init->hold(true);
  std::vector<TransferStatus> st;
  Status s = p.init.transferSync({{OpCode::kRead, p.local(), p.seg, p.remote(), 8192}}, std::chrono::milliseconds(50),
                                 &st);
  EXPECT_EQ(s.code(), Code::kTimeout);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].s, TransferState::kCanceled);
  EXPECT_EQ(counter(p.init.stats().engine, "batches_open"), 0u);
  EXPECT_EQ(counter(p.init.stats().engine, "sync_timeouts"), 1u);
  p.fake_init->hold(false);
}

TEST(TransferSync, io_that_cannot_be_stopped_keeps_its_batch_until_it_ends_then_it_is_reaped) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  p.fake_init->setCancelable(false);
  p.fake_init->hold(true);
  Status s = p.init.transferSync({{OpCode::kRead, p.local(), p.seg, p.remote(), 4096}}, std::chrono::milliseconds(20));
  EXPECT_EQ(s.code(), Code::kTimeout);
  // The slice still references memory: the batch stays (not freed under I/O).
  EXPECT_EQ(counter(p.init.stats().engine, "batches_open"), 1u);
  p.fake_init->hold(false);
  ASSERT_TRUE(eventually([&] { return p.fake_init->slicesExecuted() == 1; }));
  // The next transfer reaps it.
  s = p.init.transferSync({{OpCode::kRead, p.local(), p.seg, p.remote(), 4096}}, std::chrono::seconds(10));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(counter(p.init.stats().engine, "batches_open"), 0u);
  EXPECT_EQ(counter(p.init.stats().engine, "orphan_batches_reaped"), 1u);
}

TEST(EngineStats, transports_report_counters_that_move_with_traffic) {
  EnginePair p(1 << 20, 1 << 20, /*fake=*/false);
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  auto before = p.init.stats();
  ASSERT_TRUE(p.init.transferSync({{OpCode::kWrite, p.local(), p.seg, p.remote(), 65536}}, std::chrono::seconds(10))
                  .ok());
  auto after = p.init.stats();
  // Whichever transport carried it (shm between engines of one host, else tcp).
  auto slices = [](const EngineStats& st) {
    uint64_t n = 0;
    for (auto& t : st.transports)
      if (t.transport == "shm" || t.transport == "tcp") n += counter(t.counters, "slices_completed");
    return n;
  };
  const uint64_t b = slices(before), a = slices(after);
  EXPECT_GT(a, b);
  EXPECT_EQ(counter(after.engine, "tasks_submitted"), counter(before.engine, "tasks_submitted") + 1);
}

TEST(RouteContracts, only_the_transports_a_contract_allows_are_candidates) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40, .host_properties = kNoStaging});
  StubTransport shm("shm", {.memory_segments = true, .same_host_only = true, .cost_rank = 20,
                            .host_properties = kNoStaging | kSameHost});
  SegmentView v = viewOf({&tcp, &shm}, /*same_host=*/true);
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "", Contract{}).route->name, "shm");
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "", Contract{kRouteTcp, 0}).route->name, "tcp");
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "", Contract{0, kSameHost}).route->name, "shm");
  std::string why;
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "", Contract{kRouteTcp, kSameHost}, &why).route, nullptr);
  EXPECT_EQ(why, "tcp: not allowed by the route contract; shm: not allowed by the route contract");
  // A contract leaving a working transport out is a choice, not a fallback.
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "", Contract{kRouteTcp, 0}).fallback, nullptr);
}

TEST(RouteContracts, a_cheaper_transport_that_declined_is_the_fallback_unless_a_transport_is_forced) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40, .host_properties = kNoStaging});
  StubTransport shm("shm", {.memory_segments = true, .same_host_only = true, .cost_rank = 20,
                            .host_properties = kNoStaging | kSameHost});
  StubTransport rdma("rdma", {.memory_segments = true, .cost_rank = 30, .host_properties = kZeroCopy | kNoStaging});
  shm.refuse_ = "pid 7 is not running in this pid namespace";
  rdma.refuse_ = "no NIC shares a link layer";
  SegmentView v = viewOf({&tcp, &shm, &rdma}, /*same_host=*/true);
  RouteChoice c = selectRoute(v, RouteQuery{}, "", Contract{});
  ASSERT_NE(c.route, nullptr);
  EXPECT_EQ(c.route->name, "tcp");
  ASSERT_NE(c.fallback, nullptr);
  EXPECT_EQ(c.fallback->name, "shm") << "the cheapest that declined";
  EXPECT_EQ(c.fallback->decline.reason, RouteReason::kRefused) << "a stub classifies nothing";
  EXPECT_EQ(c.fallback->decline.text, "pid 7 is not running in this pid namespace");
  // A contract that leaves shm out: rdma is the one passed over.
  c = selectRoute(v, RouteQuery{}, "", Contract{kRouteTcp | kRouteRdma, 0});
  ASSERT_NE(c.fallback, nullptr);
  EXPECT_EQ(c.fallback->name, "rdma");
  // Forced by config 'transport': no fallback.
  EXPECT_EQ(selectRoute(v, RouteQuery{}, "tcp", Contract{}).fallback, nullptr);
}

TEST(RouteContracts, a_forbidden_request_names_the_route_it_would_take_the_expected_one_and_why) {
  StubTransport tcp("tcp", {.memory_segments = true, .cost_rank = 40, .host_properties = kNoStaging});
  StubTransport shm("shm", {.memory_segments = true, .same_host_only = true, .cost_rank = 20,
                            .host_properties = kNoStaging | kSameHost});
  shm.refuse_ = "pid 7 is not running in this pid namespace";
  SegmentView v = viewOf({&tcp, &shm}, /*same_host=*/true);
  Route rdma;
  rdma.name = "rdma";
  rdma.caps = {.memory_segments = true, .cost_rank = 30, .host_properties = kZeroCopy | kNoStaging};
  rdma.decline = {RouteReason::kNoDevice, "not installed on this host: no RDMA device"};
  v.absent.push_back(rdma);
  const Route* would = selectRoute(v, RouteQuery{}, "");
  ASSERT_NE(would, nullptr);
  Status s = contractRefusal(v, RouteQuery{}, Contract{0, kSameHost}, *would, "the request");
  EXPECT_EQ(s.code(), Code::kNoTransport);
  EXPECT_EQ(s.message(),
            "segment 'peer': the route contract (require same_host, from the request) forbids the route this request "
            "would take, tcp; the expected route, shm, is unavailable: refused: pid 7 is not running in this pid "
            "namespace");
  s = contractRefusal(v, RouteQuery{}, Contract{0, kZeroCopy}, *would, "config route.transports/route.require");
  EXPECT_EQ(s.message(),
            "segment 'peer': the route contract (require zero_copy, from config route.transports/route.require) "
            "forbids the route this request would take, tcp; the expected route, rdma, is unavailable: no_device: "
            "not installed on this host: no RDMA device");
  // Nothing of the build gives it: what the route taken lacks.
  s = contractRefusal(v, RouteQuery{kGpuMemory, kGpuMemory}, Contract{kRouteNvlink, 0}, *would, "the request");
  EXPECT_EQ(s.message(),
            "segment 'peer': the route contract (transports nvlink, from the request) forbids the route this request "
            "would take, tcp; no transport of this build that the contract allows moves GPU memory to GPU memory "
            "(tcp is not among the allowed transports)");
}
