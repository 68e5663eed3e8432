// The rdma transport inside engines, over the software verbs provider: NIC
// discovery and its reasons, registration attributes, endpoints, NIC choice,
// retries and failures. (Cross-process behaviour: tests/integration.)
#include <algorithm>
#include <gtest/gtest.h>

#if HAWSER_TEST_RDMA

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/registry.h"
#include "base/transport.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "metadata/descriptor.h"
#include "rpc/rpc.h"
#include "softverbs/soft_env.h"
#include "transport/rdma/rdma_connect.h"
#include "transport/rdma/rdma_context.h"
#include "transport/rdma/rdma_probe.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_testing.h"

namespace hawser {
std::unique_ptr<Transport> makeRdmaTransport();
}

using namespace hawser;
using hawser::test::Buffer;
using hawser::test::hasTransport;
using hawser::test::SoftVerbsEnv;
using hawser::detail::EngineAccess;

namespace {

EngineOptions forcedRdma(const std::vector<std::pair<std::string, std::string>>& cfg = {}) {
  EngineOptions o;
  o.config["transport"] = "rdma";
  for (auto& [k, v] : cfg) o.config[k] = v;
  return o;
}

// An rdma transport installed on its own (no engine) over soft NICs sv0, sv1.
struct LoneRdma {
  SoftVerbsEnv env{"sv0,sv1"};
  Config cfg;
  MemoryRegistry registry;
  rpc::Server server;
  std::unique_ptr<Transport> t = makeRdmaTransport();
  Status status;
  LoneRdma() {
    if (!(status = server.start("127.0.0.1", 0)).ok()) return;
    TransportContext ctx;
    ctx.config = &cfg;
    ctx.registry = &registry;
    ctx.rpc = &server;
    ctx.host = "127.0.0.1";
    ctx.rpc_port = server.port();
    status = t->install(ctx);
  }
  ~LoneRdma() {
    t->shutdown();
    server.stop();
  }
};

// A host-memory region as the engine hands it to registerRegion.
Region hostRegion(void* p, size_t n, bool remote) {
  Region r;
  r.addr = reinterpret_cast<uint64_t>(p);
  r.length = n;
  r.location = "cpu:0";
  r.remote_accessible = remote;
  return r;
}

const rdma::NicReport* find(const std::vector<rdma::NicReport>& v, const std::string& name) {
  for (auto& r : v)
    if (r.name == name) return &r;
  return nullptr;
}

// Two engines of this process, both forced to rdma.
struct RdmaPair {
  Buffer tmem, lmem;  // outlive the engines
  TransferEngine target, init;
  SegmentID seg = kInvalidSegment;
  uint64_t base = 0;
  Status status;

  RdmaPair(size_t tbytes, size_t lbytes, const std::vector<std::pair<std::string, std::string>>& cfg = {},
           const std::string& local_location = "cpu:0", const std::string& target_location = "cpu:0")
      : tmem(tbytes), lmem(lbytes) {
    const EngineOptions o = forcedRdma(cfg);
    if (!(status = target.init("p2p", "target", "127.0.0.1", 0, o)).ok()) return;
    if (!(status = init.init("p2p", "init", "127.0.0.1", 0, o)).ok()) return;
    test::fillPattern(tmem.p, tmem.n, 5);
    if (!(status = target.registerLocalMemory(tmem.p, tmem.n, target_location, true)).ok()) return;
    if (!(status = init.registerLocalMemory(lmem.p, lmem.n, local_location, false)).ok()) return;
    if (!(status = init.openSegment(target.segmentName(), seg)).ok()) return;
    base = reinterpret_cast<uint64_t>(tmem.p);
  }
};

// Two engines of this process on soft NICs of their own (one registry, one
// host): the target opens `target_devices`, the initiator `init_devices`,
// each with its own config, as two hosts that differ would.
struct SplitPair {
  Buffer tmem, lmem;
  TransferEngine target, init;
  SegmentID seg = kInvalidSegment;
  uint64_t base = 0;
  Status status;

  SplitPair(SoftVerbsEnv& env, const std::string& target_devices, const std::string& init_devices, size_t bytes,
            const std::vector<std::pair<std::string, std::string>>& target_cfg = {},
            const std::vector<std::pair<std::string, std::string>>& init_cfg = {},
            const std::string& local_location = "cpu:0")
      : tmem(bytes), lmem(bytes) {
    env.set("HAWSER_SOFTVERBS_DEVICES", target_devices);
    if (!(status = target.init("p2p", "target", "127.0.0.1", 0, forcedRdma(target_cfg))).ok()) return;
    env.set("HAWSER_SOFTVERBS_DEVICES", init_devices);
    if (!(status = init.init("p2p", "init", "127.0.0.1", 0, forcedRdma(init_cfg))).ok()) return;
    test::fillPattern(tmem.p, tmem.n, 5);
    if (!(status = target.registerLocalMemory(tmem.p, tmem.n, "cpu:0", true)).ok()) return;
    if (!(status = init.registerLocalMemory(lmem.p, lmem.n, local_location, false)).ok()) return;
    if (!(status = init.openSegment(target.segmentName(), seg)).ok()) return;
    base = reinterpret_cast<uint64_t>(tmem.p);
  }
};

// READ then WRITE of `len` bytes both ways, byte-exact; the first failure.
std::string roundTrip(SplitPair& p, size_t len) {
  std::memset(p.lmem.p, 0, len);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, len}});
  if (st.size() != 1 || st[0].s != TransferState::kCompleted)
    return "READ: " + (st.empty() ? std::string("no status") : st[0].error.toString());
  if (test::checkPattern(p.lmem.p, len, 5) != -1) return "READ: bytes differ";
  test::fillPattern(p.lmem.p, len, 66);
  st = test::runBatch(p.init, p.seg, {{OpCode::kWrite, p.lmem.p, p.seg, p.base, len}});
  if (st.size() != 1 || st[0].s != TransferState::kCompleted)
    return "WRITE: " + (st.empty() ? std::string("no status") : st[0].error.toString());
  if (test::checkPattern(p.tmem.p, len, 66) != -1) return "WRITE: bytes differ";
  test::fillPattern(p.tmem.p, len, 5);
  return "";
}

class RdmaTransportTest : public ::testing::Test {};

// The rdma counters of `e`, summed with those of `more` (each engine counts
// its own: the initiator posts and retries, the target serves handshakes).
template <typename... More>
rdma::StatsSnapshot rdmaStats(const TransferEngine& e, const More&... more) {
  rdma::StatsSnapshot s = rdma::statsOf(test::transportCounters(e, "rdma"));
  ((s += rdma::statsOf(test::transportCounters(more, "rdma"))), ...);
  return s;
}

TEST_F(RdmaTransportTest, probe_reports_each_nic_and_why_it_is_or_is_not_used) {
  SoftVerbsEnv env("sv0:numa=0,sv1:numa=1:down,sv2:v1,sv3:ib,sv4");
  Config c;
  c.set("rdma.devices", "sv0,sv1,sv2,sv3,sv9");
  std::string err;
  auto nics = rdma::probeNics(c, &err);
  EXPECT_EQ(err, "");
  const rdma::NicReport* r = find(nics, "sv0");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->used) << r->reason;
  EXPECT_EQ(r->numa_node, 0);
  EXPECT_EQ(r->port, 1);
  EXPECT_EQ(r->link_layer, "Ethernet");
  EXPECT_EQ(r->gid_type, "RoCE v2");  // the IPv4-mapped RoCE v2 GID wins
  EXPECT_EQ(r->gid_index, 3);
  EXPECT_EQ(r->gid.substr(0, 29), "0000:0000:0000:0000:0000:ffff");
  EXPECT_EQ(r->active_mtu, 4096);
  ASSERT_NE(r = find(nics, "sv1"), nullptr);
  EXPECT_FALSE(r->used);
  EXPECT_EQ(r->numa_node, 1);
  EXPECT_NE(r->reason.find("no ACTIVE port"), std::string::npos) << r->reason;
  ASSERT_NE(r = find(nics, "sv2"), nullptr);
  EXPECT_TRUE(r->used);
  EXPECT_EQ(r->gid_type, "RoCE v1");  // no v2 entry: the IPv4 v1 one
  EXPECT_EQ(r->gid_index, 1);
  ASSERT_NE(r = find(nics, "sv3"), nullptr);
  EXPECT_TRUE(r->used);
  EXPECT_EQ(r->link_layer, "InfiniBand");
  EXPECT_GT(r->lid, 0);
  EXPECT_EQ(r->gid_index, -1);
  ASSERT_NE(r = find(nics, "sv4"), nullptr);
  EXPECT_FALSE(r->used);
  EXPECT_NE(r->reason.find("not listed in rdma.devices"), std::string::npos);
  ASSERT_NE(r = find(nics, "sv9"), nullptr);
  EXPECT_FALSE(r->used);
  EXPECT_NE(r->reason.find("not present"), std::string::npos);
}

TEST_F(RdmaTransportTest, gid_index_override_is_used_and_an_empty_entry_is_reported) {
  SoftVerbsEnv env("sv0");
  Config c;
  c.set("rdma.gid_index", "1");
  auto nics = rdma::probeNics(c);
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_TRUE(nics[0].used);
  EXPECT_EQ(nics[0].gid_index, 1);
  EXPECT_EQ(nics[0].gid.substr(0, 4), "fe80");
  c.set("rdma.gid_index", "6");
  nics = rdma::probeNics(c);
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_FALSE(nics[0].used);
  EXPECT_NE(nics[0].reason.find("rdma.gid_index 6"), std::string::npos) << nics[0].reason;
}

TEST_F(RdmaTransportTest, missing_verbs_library_and_bad_tunables_are_reported) {
  SoftVerbsEnv env("sv0");
  Config c;
  c.set("rdma.verbs_lib", "/nonexistent/libibverbs.so.1");
  std::string err;
  EXPECT_TRUE(rdma::probeNics(c, &err).empty());
  EXPECT_NE(err.find("cannot be loaded"), std::string::npos) << err;
  Config d;
  d.set("rdma.qps_per_peer", "0");
  err.clear();
  EXPECT_TRUE(rdma::probeNics(d, &err).empty());
  EXPECT_NE(err.find("rdma.qps_per_peer"), std::string::npos) << err;
  d.set("rdma.qps_per_peer", "2");
  d.set("rdma.slice_size", "lots");
  err.clear();
  EXPECT_TRUE(rdma::probeNics(d, &err).empty());
  EXPECT_NE(err.find("rdma.slice_size"), std::string::npos) << err;
}

TEST_F(RdmaTransportTest, engine_without_a_nic_does_not_offer_rdma) {
  SoftVerbsEnv env("");
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "a", "127.0.0.1", 0).ok());
  EXPECT_FALSE(hasTransport(e, "rdma"));
  TransferEngine forced;
  EXPECT_EQ(forced.init("p2p", "b", "127.0.0.1", 0, forcedRdma()).code(), Code::kNoTransport);
  // Every NIC down: same.
  SoftVerbsEnv down("sv0:down,sv1:down");
  TransferEngine d;
  ASSERT_TRUE(d.init("p2p", "c", "127.0.0.1", 0).ok());
  EXPECT_FALSE(hasTransport(d, "rdma"));
}

const TransportDiagnosis* diagnosisOf(const std::vector<TransportDiagnosis>& v, const std::string& name) {
  for (auto& d : v)
    if (d.transport == name) return &d;
  return nullptr;
}

std::string factOf(const TransportDiagnosis& d, const std::string& key) {
  for (auto& [k, v] : d.facts)
    if (k == key) return v;
  return "";
}

TEST_F(RdmaTransportTest, diagnosis_names_every_nic_and_why_it_is_or_is_not_used) {
  SoftVerbsEnv env("sv0:numa=0,sv1:numa=1:down");
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "a", "127.0.0.1", 0).ok());
  auto diags = e.diagnose();
  const TransportDiagnosis* d = diagnosisOf(diags, "rdma");
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->installed) << d->reason;
  EXPECT_EQ(d->cost_rank, 30);
  const std::string sv0 = factOf(*d, "NIC sv0"), sv1 = factOf(*d, "NIC sv1");
  EXPECT_EQ(sv0.rfind("used as nic0 (port 1 ACTIVE, Ethernet, numa 0, gid[3] 0000:0000:0000:0000:0000:ffff", 0), 0u)
      << sv0;
  EXPECT_NE(sv0.find("RoCE v2"), std::string::npos) << sv0;
  EXPECT_EQ(sv1.rfind("not used: ", 0), 0u) << sv1;
  EXPECT_NE(sv1.find("no ACTIVE port"), std::string::npos) << sv1;
  EXPECT_NE(sv1.find("numa 1"), std::string::npos) << sv1;
  // The same as typed records, in the order found.
  ASSERT_EQ(d->devices.size(), 2u);
  const DeviceRecord& r0 = d->devices[0];
  EXPECT_EQ(r0.kind, DeviceRecord::Kind::kNic);
  EXPECT_EQ(r0.name, "sv0");
  EXPECT_TRUE(r0.used);
  EXPECT_EQ(r0.reason, "");
  EXPECT_EQ(r0.index, 0);
  EXPECT_EQ(r0.numa_node, 0);
  EXPECT_EQ(r0.port, 1);
  EXPECT_EQ(r0.mode, "Ethernet");
  EXPECT_EQ(r0.pci_bus_id, "");
  const DeviceRecord& r1 = d->devices[1];
  EXPECT_EQ(r1.kind, DeviceRecord::Kind::kNic);
  EXPECT_EQ(r1.name, "sv1");
  EXPECT_FALSE(r1.used);
  EXPECT_NE(r1.reason.find("no ACTIVE port"), std::string::npos) << r1.reason;
  EXPECT_EQ(r1.index, -1);
  EXPECT_EQ(r1.numa_node, 1);
  // Counters per NIC in use.
  bool per_nic = false;
  for (auto& t : e.stats().transports)
    if (t.transport == "rdma")
      for (auto& [k, v] : t.counters) per_nic |= k == "wrs_posted.nic0";
  EXPECT_TRUE(per_nic);

  // Nothing usable: not installed, and the diagnosis still says why per NIC.
  SoftVerbsEnv down("sv0:down");
  TransferEngine n;
  ASSERT_TRUE(n.init("p2p", "b", "127.0.0.1", 0).ok());
  diags = n.diagnose();
  d = diagnosisOf(diags, "rdma");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->installed);
  EXPECT_EQ(d->reason.rfind("no usable RDMA NIC (sv0: ", 0), 0u) << d->reason;
  EXPECT_NE(factOf(*d, "NIC sv0").find("no ACTIVE port"), std::string::npos);
  ASSERT_EQ(d->devices.size(), 1u);
  EXPECT_EQ(d->devices[0].name, "sv0");
  EXPECT_FALSE(d->devices[0].used);
  EXPECT_NE(d->devices[0].reason.find("no ACTIVE port"), std::string::npos) << d->devices[0].reason;
}

TEST_F(RdmaTransportTest, registration_publishes_lkey_and_rkey_for_every_nic) {
  SoftVerbsEnv env("sv0,sv1");
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "a", "127.0.0.1", 0).ok());
  ASSERT_TRUE(hasTransport(e, "rdma"));
  {
    auto names = e.transports();  // cheapest first: rdma before tcp
    EXPECT_LT(std::find(names.begin(), names.end(), "rdma"), std::find(names.begin(), names.end(), "tcp"));
  }
  Buffer b(1 << 20);
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:0", true).ok());
  SegmentDesc d = EngineAccess::of(e).localDescriptor();
  const auto& nics = d.transports.at("rdma").at("nics");
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_EQ(nics[0].at("name"), "sv0");
  EXPECT_EQ(nics[1].at("name"), "sv1");
  ASSERT_EQ(d.buffers.size(), 1u);
  const auto& a = d.buffers[0].attrs.at("rdma");
  ASSERT_EQ(a.at("lkey").size(), 2u);
  ASSERT_EQ(a.at("rkey").size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(a.at("lkey")[i].get<uint32_t>(), 0u);
    EXPECT_NE(a.at("rkey")[i].get<uint32_t>(), 0u);
  }
  EXPECT_NE(a.at("rkey")[0], a.at("rkey")[1]);  // one MR per NIC
  ASSERT_TRUE(e.unregisterLocalMemory(b.p).ok());
  EXPECT_TRUE(EngineAccess::of(e).localDescriptor().buffers.empty());
  // The same range registers again (every NIC let go of it).
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:0", true).ok());
}

// Issue 30: a registration's identity, as peers see it, is its MR keys. The
// same range registered again gets other keys, so a task made for the first
// registration (its descriptor's rkeys) is refused by the NIC
// (IBV_WC_REM_ACCESS_ERR, kOutOfRange: remote_access_error_is_refused_...)
// instead of reading or writing the second one.
TEST_F(RdmaTransportTest, a_range_registered_again_gets_other_rkeys) {
  SoftVerbsEnv env("sv0,sv1");
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "a", "127.0.0.1", 0).ok());
  ASSERT_TRUE(hasTransport(e, "rdma"));
  Buffer b(1 << 20);
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:0", true).ok());
  const auto first = EngineAccess::of(e).localDescriptor().buffers.at(0).attrs.at("rdma").at("rkey");
  ASSERT_TRUE(e.unregisterLocalMemory(b.p).ok());
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:0", true).ok());
  const auto second = EngineAccess::of(e).localDescriptor().buffers.at(0).attrs.at("rdma").at("rkey");
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) EXPECT_NE(first[i], second[j]) << "NIC " << i << " / NIC " << j;
  ASSERT_TRUE(e.unregisterLocalMemory(b.p).ok());
}

TEST_F(RdmaTransportTest, transport_claims_only_what_it_can_serve) {
  LoneRdma lone;
  ASSERT_TRUE(lone.status.ok()) << lone.status.toString();
  Transport* t = lone.t.get();
  nlohmann::json attrs;
  t->describe(attrs);
  ASSERT_EQ(attrs.at("nics").size(), 2u);
  EXPECT_FALSE(attrs.at("instance").get<std::string>().empty());

  // Host memory at both ends only (GPU memory comes with its own issue).
  const TransportCaps caps = t->caps();
  EXPECT_TRUE(caps.memory_segments);
  EXPECT_FALSE(caps.file_segments);
  EXPECT_EQ(caps.local_memory, uint32_t(kHostMemory));
  EXPECT_EQ(caps.remote_memory, uint32_t(kHostMemory));
  EXPECT_EQ(caps.cost_rank, 30);

  auto refusal = [&](const SegmentDesc& s) {
    std::shared_ptr<PeerHandle> h;
    Status st = t->openPeer(s, h);
    EXPECT_EQ(h, nullptr);
    return st;
  };
  SegmentDesc seg;
  seg.kind = SegmentDesc::Kind::kMemory;
  seg.name = "127.0.0.1:1";
  Status st = refusal(seg);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1' publishes no rdma transport");
  seg.transports["rdma"] = attrs;
  {
    std::shared_ptr<PeerHandle> h;
    ASSERT_TRUE(t->openPeer(seg, h).ok());
    EXPECT_NE(h, nullptr);
  }
  SegmentDesc ib = seg;
  for (auto& n : ib.transports["rdma"]["nics"]) n["link_layer"] = "ib";
  st = refusal(ib);  // RoCE NICs cannot reach an IB fabric
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1': no usable NIC here (sv0 eth, sv1 eth) shares a link layer with an "
                          "up NIC there (sv0 ib, sv1 ib)");
  SegmentDesc down = seg;
  for (auto& n : down.transports["rdma"]["nics"]) n["up"] = false;
  st = refusal(down);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1': no usable NIC here (sv0 eth, sv1 eth) shares a link layer with an "
                          "up NIC there (sv0 eth down, sv1 eth down)");
  SegmentDesc bad = seg;
  for (auto& n : bad.transports["rdma"]["nics"]) n["link_layer"] = 5;
  st = refusal(bad);  // malformed: refused, no throw
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1': transports.rdma.nics[0]: [json.exception.type_error.302] type must "
                          "be string, but is number");
  SegmentDesc bad_gid = seg;
  bad_gid.transports["rdma"]["nics"][1]["gid"] = "fe80::1";
  st = refusal(bad_gid);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1': transports.rdma.nics[1].gid is malformed");
  SegmentDesc empty = seg;
  empty.transports["rdma"]["nics"] = nlohmann::json::array();
  st = refusal(empty);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "segment '127.0.0.1:1': transports.rdma.nics is missing or empty");
  SegmentDesc file;
  file.kind = SegmentDesc::Kind::kFile;
  file.transports["rdma"] = attrs;
  st = refusal(file);
  EXPECT_EQ(st.code(), Code::kNotSupported);
  EXPECT_EQ(st.message(), "not a memory segment");

  Buffer b(64 << 10);
  nlohmann::json a;
  std::shared_ptr<const Registration> kept;
  ASSERT_TRUE(t->registerRegion(hostRegion(b.p, b.n, false), a, kept).ok());
  EXPECT_NE(kept, nullptr);  // its MRs, kept with the region by the engine
  EXPECT_EQ(a.at("lkey").size(), 2u);
  EXPECT_FALSE(a.contains("rkey"));  // local-only memory: no remote key at all
  EXPECT_EQ(t->registerRegion(hostRegion(b.p + 4096, 4096, true), a, kept).code(), Code::kAddressOverlapped);
  EXPECT_EQ(t->unregisterMemory(b.p + 4096, 4096).code(), Code::kNotRegistered);
  EXPECT_TRUE(t->unregisterMemory(b.p, b.n).ok());
}

// The local region's MRs reach prepare with the task (Task::region()): no
// lookup of rdma's own. A task still holding a registration that was
// unregistered since it was submitted is refused, never posted with keys
// the NIC no longer knows.
TEST_F(RdmaTransportTest, prepare_takes_the_tasks_registration_and_refuses_one_torn_down) {
  LoneRdma lone;
  ASSERT_TRUE(lone.status.ok()) << lone.status.toString();
  Transport* t = lone.t.get();
  // This transport's own descriptor, with one remote-accessible buffer, as the peer.
  Buffer remote(64 << 10), local(64 << 10);
  nlohmann::json ra, la;
  std::shared_ptr<const Registration> rreg, lreg;
  ASSERT_TRUE(t->registerRegion(hostRegion(remote.p, remote.n, true), ra, rreg).ok());
  ASSERT_TRUE(t->registerRegion(hostRegion(local.p, local.n, false), la, lreg).ok());
  ASSERT_NE(lreg, nullptr);
  auto seg = std::make_shared<SegmentDesc>();
  seg->kind = SegmentDesc::Kind::kMemory;
  seg->name = "self";
  t->describe(seg->transports["rdma"]);
  BufferDesc bd;
  bd.addr = reinterpret_cast<uint64_t>(remote.p);
  bd.length = remote.n;
  bd.location = "cpu:0";
  bd.attrs["rdma"] = ra;
  seg->buffers.push_back(bd);
  std::shared_ptr<PeerHandle> peer;
  ASSERT_TRUE(t->openPeer(*seg, peer).ok());

  auto prepare = [&](const LocalRegion& region) {
    Task task;
    task.reset(TransferRequest{OpCode::kWrite, local.p, 0, bd.addr, 8192}, 0, seg, peer, 0);
    task.setRegion(&region);
    std::unique_ptr<SubBatch> sb;
    EXPECT_TRUE(t->newSubBatch(1, sb).ok());
    Task* tasks[] = {&task};
    std::unique_ptr<PreparedWork> work;
    Status s = sb->prepare(tasks, work);  // dropped unposted
    if (s.ok()) {
      EXPECT_EQ(task.sliceCount(), 1u);
    }
    return s;
  };
  LocalRegion region;
  region.addr = reinterpret_cast<uint64_t>(local.p);
  region.length = local.n;
  region.registrations = std::make_shared<Registrations>(Registrations{{t, lreg}});
  region.pick(t);
  ASSERT_EQ(region.registration, lreg.get());
  Status s = prepare(region);
  EXPECT_TRUE(s.ok()) << s.toString();
  // A region that reached rdma without its registration: refused, not looked up.
  LocalRegion bare = region;
  bare.registration = nullptr;
  s = prepare(bare);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  // Unregistered after the task found its region: refused.
  ASSERT_TRUE(t->unregisterMemory(local.p, local.n).ok());
  s = prepare(region);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  EXPECT_NE(s.message().find("unregistered since it was submitted"), std::string::npos) << s.message();
  EXPECT_TRUE(t->unregisterMemory(remote.p, remote.n).ok());
}

TEST_F(RdmaTransportTest, transfers_between_two_engines_are_byte_exact) {
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(16 << 20, 16 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  for (size_t len : {1ul, 4097ul, 65536ul, 65537ul, 3ul << 20, 16ul << 20}) {
    std::memset(p.lmem.p, 0, p.lmem.n);
    uint64_t off = len == (16ul << 20) ? 0 : 12345;
    auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base + off, len}});
    ASSERT_EQ(st.size(), 1u);
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << len << ": " << st[0].error.toString();
    EXPECT_EQ(st[0].transferred_bytes, len);
    EXPECT_EQ(test::checkPattern(p.lmem.p, len, 5, off), -1) << len;
  }
  test::fillPattern(p.lmem.p, 4 << 20, 77);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kWrite, p.lmem.p, p.seg, p.base + 7, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.tmem.p + 7, 4 << 20, 77), -1);
}

TEST_F(RdmaTransportTest, concurrent_first_use_makes_one_endpoint) {
  SoftVerbsEnv env("sv0");
  RdmaPair p(8 << 20, 8 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  constexpr int kThreads = 8;
  std::atomic<int> ready{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<TransferRequest> reqs;
      for (int i = 0; i < 4; ++i) {
        size_t off = (static_cast<size_t>(t) * 4 + i) * (256 << 10);
        reqs.push_back({OpCode::kRead, p.lmem.p + off, p.seg, p.base + off, 256 << 10});
      }
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (auto& st : test::runBatch(p.init, p.seg, reqs)) ok += st.s == TransferState::kCompleted;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), kThreads * 4);
  EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  EXPECT_EQ(rdmaStats(p.init).endpoints_created, 1u);
  EXPECT_EQ(rdmaStats(p.init).handshakes_sent, 1u);
  EXPECT_EQ(rdmaStats(p.target).handshakes_served, 1u);
}

TEST_F(RdmaTransportTest, two_engines_of_one_process_count_apart) {
  // Each engine's transport owns its counters: the initiator's posts and
  // handshakes are not the target's, and a second pair starts from zero.
  SoftVerbsEnv env("sv0");
  RdmaPair p(1 << 20, 1 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 1 << 20, 5), -1);
  const rdma::StatsSnapshot init = rdmaStats(p.init), target = rdmaStats(p.target);
  EXPECT_EQ(init.wrs_posted[0], 16u);  // 1 MiB / 64 KiB
  EXPECT_EQ(init.peer_nic_wrs[0], 16u);
  EXPECT_EQ(init.handshakes_sent, 1u);
  EXPECT_EQ(init.endpoints_created, 1u);
  EXPECT_EQ(init.handshakes_served, 0u);
  EXPECT_EQ(target.wrs_posted[0], 0u);
  EXPECT_EQ(target.peer_nic_wrs[0], 0u);
  EXPECT_EQ(target.handshakes_sent, 0u);
  EXPECT_EQ(target.endpoints_created, 0u);
  EXPECT_EQ(target.handshakes_served, 1u);
  EXPECT_EQ(target.passive_qp_sets, 1u);
  // A second pair in the same process: its initiator has counted only its own.
  RdmaPair q(1 << 20, 1 << 20);
  ASSERT_TRUE(q.status.ok()) << q.status.toString();
  st = test::runBatch(q.init, q.seg, {{OpCode::kRead, q.lmem.p, q.seg, q.base, 512 << 10}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(rdmaStats(q.init).wrs_posted[0], 8u);
  EXPECT_EQ(rdmaStats(q.init).handshakes_sent, 1u);
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0], 16u) << "the first initiator counted the second's posts";
}

TEST_F(RdmaTransportTest, large_task_is_spread_over_both_nics) {
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(8 << 20, 8 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 8 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  EXPECT_GT(rdmaStats(p.init).wrs_posted[0], 32u);
  EXPECT_GT(rdmaStats(p.init).wrs_posted[1], 32u);
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0] + rdmaStats(p.init).wrs_posted[1], 128u);  // 8 MiB / 64 KiB
}

TEST_F(RdmaTransportTest, nic_on_the_buffers_numa_node_is_chosen) {
  SoftVerbsEnv env("sv0:numa=0,sv1:numa=1");
  RdmaPair p(4 << 20, 4 << 20, {}, "cpu:1");
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0], 0u);
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[1], 64u);
  // A buffer on node 0 goes through sv0.
  Buffer other(1 << 20);
  ASSERT_TRUE(p.init.registerLocalMemory(other.p, other.n, "cpu:0", false).ok());
  st = test::runBatch(p.init, p.seg, {{OpCode::kRead, other.p, p.seg, p.base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0], 16u);
  EXPECT_EQ(test::checkPattern(other.p, 1 << 20, 5), -1);
}

TEST_F(RdmaTransportTest, error_completion_tears_down_and_reestablishes_the_endpoint) {
  SoftVerbsEnv env("sv0");
  RdmaPair p(4 << 20, 4 << 20, {{"rdma.retry_limit", "3"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(rdmaStats(p.init).handshakes_sent, 1u);
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 1 IBV_WC_GENERAL_ERR"), 0);
  test::fillPattern(p.lmem.p, 4 << 20, 31);
  st = test::runBatch(p.init, p.seg, {{OpCode::kWrite, p.lmem.p, p.seg, p.base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.tmem.p, 4 << 20, 31), -1);
  EXPECT_GE(rdmaStats(p.init).slice_retries, 1u);
  EXPECT_EQ(rdmaStats(p.init).handshakes_sent, 2u);  // the QPs in ERR were replaced once
  EXPECT_EQ(rdmaStats(p.target).handshakes_served, 2u);
}

TEST_F(RdmaTransportTest, failure_after_the_retry_limit_names_the_verbs_status) {
  SoftVerbsEnv env("sv0");
  RdmaPair p(1 << 20, 1 << 20, {{"rdma.retry_limit", "2"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 100000 IBV_WC_REM_OP_ERR"), 0);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4096}});
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].transferred_bytes, 0u);
  EXPECT_EQ(st[0].error.code(), Code::kIoError);
  EXPECT_NE(st[0].error.message().find("IBV_WC_REM_OP_ERR"), std::string::npos) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("3 attempt(s)"), std::string::npos) << st[0].error.toString();
  ASSERT_EQ(SoftVerbsEnv::control("clear sv0"), 0);
  st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4096}});
  EXPECT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
}

TEST_F(RdmaTransportTest, injected_error_completion_is_retried_on_the_second_nic) {
  // The buffer is on node 0: every first attempt goes through sv0, so what
  // sv1 carries is retries, counted exactly.
  SoftVerbsEnv env("sv0:numa=0,sv1:numa=1");
  RdmaPair p(4 << 20, 4 << 20, {{"rdma.retry_limit", "1"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  // sv0 fails everything: with one retry allowed, only the other NIC can help.
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 100000 IBV_WC_RETRY_EXC_ERR"), 0);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 4 << 20, 5), -1);
  const rdma::StatsSnapshot s = rdmaStats(p.init);
  // 64 slices: each failed on sv0 (or was flushed there, and failed on its
  // next try there), then was retried on sv1, where all of them landed.
  EXPECT_EQ(s.wc_errors[0], 64u);
  EXPECT_EQ(s.slice_retries, 64u);
  EXPECT_EQ(s.retries_to[1], 64u);
  EXPECT_EQ(s.retries_to[0], 0u);
  EXPECT_EQ(s.wrs_posted[1], 64u);
  EXPECT_EQ(s.wrs_posted[0], 64u + s.slice_requeues);
  EXPECT_EQ(s.wc_flushes[0], s.slice_requeues);
  EXPECT_EQ(s.wc_errors[1] + s.wc_flushes[1], 0u);
  ASSERT_EQ(SoftVerbsEnv::control("clear sv0"), 0);
}

TEST_F(RdmaTransportTest, nic_that_disappears_leaves_the_transfers_to_the_other_nic) {
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(8 << 20, 8 << 20, {{"rdma.retry_limit", "2"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(SoftVerbsEnv::control("down sv0"), 0);
  std::memset(p.lmem.p, 0, p.lmem.n);
  for (int round = 0; round < 3; ++round) {
    st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 8 << 20}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << round << ": " << st[0].error.toString();
    EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  }
  // Newly registered memory gets no MR on the dead NIC, and still moves.
  Buffer more(1 << 20);
  ASSERT_TRUE(p.init.registerLocalMemory(more.p, more.n, "cpu:0", false).ok());
  st = test::runBatch(p.init, p.seg, {{OpCode::kRead, more.p, p.seg, p.base, 1 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(more.p, 1 << 20, 5), -1);
}

TEST_F(RdmaTransportTest, outstanding_work_stays_within_qp_depth_and_cq_size) {
  SoftVerbsEnv env("sv0");
  // 512 slices in flight at once against QPs of 4 WRs and a CQ of 16
  // entries: posting must wait for room. Going past the SQ depth would fail
  // posts (ENOMEM -> retries), a CQ overrun would lose completions.
  // 8 QPs x 4 WRs = 32 could be posted at once: the CQ (16) is the bound,
  // so endpoints wait for CQ room (and are woken when it frees).
  RdmaPair p(8 << 20, 8 << 20,
             {{"rdma.cq_entries", "16"}, {"rdma.max_wr", "4"}, {"rdma.qps_per_peer", "8"},
              {"rdma.slice_size", "16K"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back({OpCode::kRead, p.lmem.p + i * (1 << 20), p.seg, p.base + i * (1 << 20), 1 << 20});
  for (auto& st : test::runBatch(p.init, p.seg, reqs, 60000))
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0], 512u);
  EXPECT_EQ(rdmaStats(p.init).slice_retries, 0u);  // no post was refused, no completion lost
  EXPECT_GT(rdmaStats(p.init).cq_waits, 0u) << "posting never waited for CQ room";
}

TEST_F(RdmaTransportTest, path_mtu_is_agreed_when_one_side_caps_it_lower) {
  // Both ends of every QP pair must program one path MTU: a host capped
  // with rdma.mtu pairs with a default one, both ways round (3000 is not a
  // verbs MTU: it bounds the path MTU to 2048).
  for (const char* mtu : {"1024", "3000"})
    for (bool capped_target : {false, true}) {
      SoftVerbsEnv env("sv0");
      std::vector<std::pair<std::string, std::string>> cap = {{"rdma.mtu", mtu}};
      SplitPair p(env, "sv0", "sv1", 1 << 20, capped_target ? cap : decltype(cap){},
                  capped_target ? decltype(cap){} : cap);
      ASSERT_TRUE(p.status.ok()) << p.status.toString();
      EXPECT_EQ(roundTrip(p, 1 << 20), "") << (capped_target ? "target" : "initiator") << " capped at " << mtu;
    }
}

TEST_F(RdmaTransportTest, read_depth_follows_the_initiator_limit_and_the_peers_resources) {
  // The initiator's NIC issues at most 4 READs per QP; the target's serves
  // 2: READ depth must come from the first and stay within the second.
  SoftVerbsEnv env("sv0");
  SplitPair p(env, "sv1:rd_atom=2", "sv0:init_rd_atom=4", 4 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  EXPECT_EQ(roundTrip(p, 4 << 20), "");
  EXPECT_EQ(rdmaStats(p.init).slice_retries, 0u);
}

TEST_F(RdmaTransportTest, roce_v1_only_peer_is_reached_with_gids_of_one_type_at_both_ends) {
  SoftVerbsEnv env("sv0");
  SplitPair p(env, "sv1:v1", "sv0", 1 << 20);  // the initiator prefers RoCE v2, the target has only v1
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  EXPECT_EQ(roundTrip(p, 1 << 20), "");
  EXPECT_EQ(rdmaStats(p.init).slice_retries, 0u);
}

TEST_F(RdmaTransportTest, ipv6_only_peer_is_reached_with_gids_of_one_family_at_both_ends) {
  SoftVerbsEnv env("sv0");
  SplitPair p(env, "sv1:v6", "sv0", 1 << 20);  // IPv4 RoCE v2 preferred here, IPv6 only there
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  EXPECT_EQ(roundTrip(p, 1 << 20), "");
  EXPECT_EQ(rdmaStats(p.init).slice_retries, 0u);
}

TEST_F(RdmaTransportTest, peers_without_a_common_gid_type_and_family_are_refused_with_the_reason) {
  SoftVerbsEnv env("sv0");
  // The initiator is pinned to its RoCE v2 IPv4 GID; the target has RoCE v1 only.
  SplitPair p(env, "sv1:v1", "sv0", 1 << 20, {}, {{"rdma.gid_index", "3"}, {"rdma.retry_limit", "0"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4096}});
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].error.code(), Code::kNotSupported) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("sv0 (RoCE v2 IPv4) and sv1 (RoCE v1 IPv4, RoCE v1 IPv6 link-local) share no "
                                       "RoCE GID type and address family"),
            std::string::npos)
      << st[0].error.message();
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[0], 0u) << "nothing was posted on QPs that could not reach each other";
}

TEST_F(RdmaTransportTest, concurrent_endpoints_never_overrun_the_nics_shared_cq) {
  // One local NIC with a 16-entry CQ, four endpoints on it (one per target
  // NIC), posted to from four threads while completions repost too; each
  // ibv_post_send takes 2 ms, so room checked and then posted would be
  // spent twice, and each poll takes 1 ms, so completions pile up in the CQ
  // between polls. An overrun loses completions: tasks would never end.
  SoftVerbsEnv env("sv0");
  SplitPair p(env, "sv1,sv2,sv3,sv4", "sv0:slowpost=2000:slowpoll=1000", 8 << 20, {},
              {{"rdma.cq_entries", "16"}, {"rdma.max_wr", "16"}, {"rdma.qps_per_peer", "1"},
               {"rdma.slice_size", "16K"}, {"rdma.retry_limit", "0"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  std::vector<std::thread> ts;
  std::atomic<int> done{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      const size_t off = static_cast<size_t>(t) * (2 << 20);
      auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p + off, p.seg, p.base + off, 2 << 20}}, 60000);
      done += st.size() == 1 && st[0].s == TransferState::kCompleted;
      EXPECT_EQ(st.size() == 1 ? st[0].s : TransferState::kInvalid, TransferState::kCompleted)
          << (st.empty() ? "" : st[0].error.toString());
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), 4);
  EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  const rdma::StatsSnapshot s = rdmaStats(p.init);
  EXPECT_EQ(s.wrs_posted[0], 512u);
  for (int n = 1; n <= 4; ++n) EXPECT_EQ(s.peer_nic_wrs[n - 1], 128u) << "target NIC " << n;
  EXPECT_GT(s.cq_waits, 0u) << "the CQ never filled: the test did not press on it";
  EXPECT_EQ(s.slices_abandoned, 0u);
  EXPECT_EQ(test::counter(p.init, "rdma", "wc_errors.nic0"), 0u);
}

// The gate of starved_endpoint_is_woken_when_room_frees_before_it_registers:
// the first poster that finds its NIC's CQ full is held there (under its
// endpoint's mutex, before it registers as starved) until the worker has
// drained that CQ empty and finished kicking the starved endpoints.
struct StarvedGate {
  std::mutex mu;
  std::condition_variable cv;
  rdma::RdmaContext* ctx = nullptr;  // the NIC whose CQ was full
  int64_t capacity = 0;
  bool entered = false;    // a poster found the CQ full and is held
  bool drained = false;    // then the worker drained that CQ empty and kicked the starved
  bool timed_out = false;  // the held poster gave up waiting for that

  void reset() {
    std::lock_guard<std::mutex> lk(mu);
    ctx = nullptr;
    capacity = 0;
    entered = drained = timed_out = false;
  }
};
StarvedGate starved_gate;  // static: a hook may still run while a test ends

void holdUntilDrained(rdma::RdmaContext& ctx) {
  StarvedGate& g = starved_gate;
  std::unique_lock<std::mutex> lk(g.mu);
  if (g.entered) return;  // one poster is held, once
  g.entered = true;
  g.ctx = &ctx;
  g.capacity = ctx.cqCapacity();
  g.cv.notify_all();
  g.timed_out = !g.cv.wait_for(lk, std::chrono::seconds(20), [&] { return g.drained; });
}

void noteDrain(rdma::RdmaContext& ctx) {
  StarvedGate& g = starved_gate;
  std::lock_guard<std::mutex> lk(g.mu);
  // The held poster posts nothing, so an empty CQ after its entry means the
  // work that filled the CQ was drained, and this drain's kicks are done.
  if (g.entered && &ctx == g.ctx && ctx.outstanding.load() == 0) {
    g.drained = true;
    g.cv.notify_all();
  }
}

TEST_F(RdmaTransportTest, starved_endpoint_is_woken_when_room_frees_before_it_registers) {
  // One local NIC (sv0) with a 16-entry CQ, shared by endpoint A (to target
  // A) and endpoint B (to target B). A fills the CQ while sv0 is stalled; B
  // finds no room and is held right there, before it registers as starved,
  // until the worker has drained A's completions (they need A's mutex, not
  // B's) and done the kicks that follow. Nothing else will complete on sv0,
  // so no later kick comes: B's slices move only if B, after registering,
  // looks at the room once more. An endpoint that registers after the kicks
  // and never looks again leaves B's task hanging.
  SoftVerbsEnv env("sv1");
  Buffer amem(1 << 20), bmem(1 << 20), lmem(2 << 20);  // outlive the engines
  TransferEngine ta, tb, init;
  ASSERT_TRUE(ta.init("p2p", "target-a", "127.0.0.1", 0, forcedRdma()).ok());
  ASSERT_TRUE(tb.init("p2p", "target-b", "127.0.0.1", 0, forcedRdma()).ok());
  env.set("HAWSER_SOFTVERBS_DEVICES", "sv0");
  ASSERT_TRUE(init.init("p2p", "init", "127.0.0.1", 0,
                        forcedRdma({{"rdma.cq_entries", "16"}, {"rdma.slice_size", "16K"},
                                    {"rdma.qps_per_peer", "1"}, {"rdma.retry_limit", "0"}}))
                  .ok());
  test::fillPattern(amem.p, amem.n, 5);
  test::fillPattern(bmem.p, bmem.n, 9);
  ASSERT_TRUE(ta.registerLocalMemory(amem.p, amem.n, "cpu:0", true).ok());
  ASSERT_TRUE(tb.registerLocalMemory(bmem.p, bmem.n, "cpu:0", true).ok());
  ASSERT_TRUE(init.registerLocalMemory(lmem.p, lmem.n, "cpu:0", false).ok());
  SegmentID sa = kInvalidSegment, sb = kInvalidSegment;
  ASSERT_TRUE(init.openSegment(ta.segmentName(), sa).ok());
  ASSERT_TRUE(init.openSegment(tb.segmentName(), sb).ok());
  const uint64_t abase = reinterpret_cast<uint64_t>(amem.p), bbase = reinterpret_cast<uint64_t>(bmem.p);

  // Stalled before sv0 executes anything: a stall takes effect at the start
  // of the provider's next burst of WRs, and no burst is under way yet.
  ASSERT_EQ(SoftVerbsEnv::control("stall sv0"), 0);
  BatchID ba, bb;
  ASSERT_TRUE(init.allocateBatchID(1, ba).ok());
  ASSERT_TRUE(init.allocateBatchID(1, bb).ok());
  constexpr size_t kALen = 256 << 10, kBLen = 64 << 10;  // 16 slices of 16K (the whole CQ), then 4
  ASSERT_TRUE(init.submitTransfer(ba, {{OpCode::kRead, lmem.p, sa, abase, kALen}}).ok());
  ASSERT_TRUE(test::eventually([&] { return rdmaStats(init).wrs_posted[0] == 16; }));

  starved_gate.reset();
  struct Hooks {
    Hooks() {
      rdma::testing::on_cq_full.store(holdUntilDrained);
      rdma::testing::after_drain.store(noteDrain);
    }
    ~Hooks() {
      rdma::testing::on_cq_full.store(nullptr);
      rdma::testing::after_drain.store(nullptr);
    }
  } hooks;
  // B posts from its connector thread (or, were it connected, from the
  // submitting one): never from this thread, which must resume sv0.
  Status submitted;
  std::thread poster([&] { submitted = init.submitTransfer(bb, {{OpCode::kRead, lmem.p + kALen, sb, bbase, kBLen}}); });
  bool entered;
  {
    std::unique_lock<std::mutex> lk(starved_gate.mu);
    entered = starved_gate.cv.wait_for(lk, std::chrono::seconds(20), [] { return starved_gate.entered; });
  }
  EXPECT_EQ(SoftVerbsEnv::control("resume sv0"), 0);  // A's WRs run, their completions free the CQ
  poster.join();
  ASSERT_TRUE(entered) << "B never found the CQ full: the starved path was not reached (WRs posted on sv0: "
                       << rdmaStats(init).wrs_posted[0] << ", CQ waits: " << rdmaStats(init).cq_waits
                       << ")";
  ASSERT_TRUE(submitted.ok()) << submitted.toString();

  ASSERT_TRUE(init.waitTransfer(ba, std::chrono::seconds(10)).ok());
  TransferStatus t;
  ASSERT_TRUE(init.getTransferStatus(ba, 0, t).ok());
  ASSERT_EQ(t.s, TransferState::kCompleted) << t.error.toString();
  EXPECT_EQ(test::checkPattern(lmem.p, kALen, 5), -1);
  const Status waited = init.waitTransfer(bb, std::chrono::seconds(10));
  bool drained;
  {
    std::lock_guard<std::mutex> lk(starved_gate.mu);
    drained = starved_gate.drained;
  }
  ASSERT_TRUE(waited.ok()) << "B's slices never moved: the starved endpoint missed its wake-up (" << waited.toString()
                           << "; WRs posted on sv0 after A's: " << rdmaStats(init).wrs_posted[0] - 16
                           << "; the CQ was drained empty while B was held: " << drained << ")";
  {
    // B's slices moved, so the held poster has left the hook.
    std::lock_guard<std::mutex> lk(starved_gate.mu);
    EXPECT_EQ(starved_gate.capacity, 16);
    EXPECT_TRUE(starved_gate.drained);
    EXPECT_FALSE(starved_gate.timed_out) << "B was let go before the worker drained the CQ empty";
  }
  EXPECT_GE(rdmaStats(init).cq_waits, 1u);
  ASSERT_TRUE(init.getTransferStatus(bb, 0, t).ok());
  ASSERT_EQ(t.s, TransferState::kCompleted) << t.error.toString();
  EXPECT_EQ(t.transferred_bytes, kBLen);
  EXPECT_EQ(test::checkPattern(lmem.p + kALen, kBLen, 9), -1);
  EXPECT_EQ(rdmaStats(init).wrs_posted[0], 20u);
  EXPECT_EQ(rdmaStats(init).endpoints_created, 2u);  // A and B on sv0
  EXPECT_TRUE(init.freeBatchID(ba).ok());
  EXPECT_TRUE(init.freeBatchID(bb).ok());
}

TEST_F(RdmaTransportTest, flushed_slices_use_no_attempt) {
  // No retries allowed: one injected error fails its own slice's task; the
  // slices flushed behind it (on the QP that went to ERR) are posted again
  // and their tasks complete.
  SoftVerbsEnv env("sv0");
  RdmaPair p(4 << 20, 4 << 20, {{"rdma.retry_limit", "0"}, {"rdma.qps_per_peer", "1"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  ASSERT_EQ(SoftVerbsEnv::control("stall sv0"), 0);  // everything queues on the QP first
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 1 IBV_WC_RETRY_EXC_ERR"), 0);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(64, b).ok());
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 64; ++i)
    reqs.push_back({OpCode::kRead, p.lmem.p + i * 65536, p.seg, p.base + i * 65536, 65536});
  ASSERT_TRUE(p.init.submitTransfer(b, reqs).ok());
  ASSERT_TRUE(test::eventually([&] { return rdmaStats(p.init).wrs_posted[0] == 64; }));
  ASSERT_EQ(SoftVerbsEnv::control("resume sv0"), 0);
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(30)).ok());
  int failed = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus t;
    ASSERT_TRUE(p.init.getTransferStatus(b, i, t).ok());
    if (t.s == TransferState::kFailed) {
      ++failed;
      EXPECT_NE(t.error.message().find("IBV_WC_RETRY_EXC_ERR"), std::string::npos) << t.error.toString();
    } else {
      EXPECT_EQ(t.s, TransferState::kCompleted) << i << ": " << t.error.toString();
      EXPECT_EQ(test::checkPattern(p.lmem.p + i * 65536, 65536, 5, i * 65536), -1) << i;
    }
  }
  EXPECT_EQ(failed, 1) << "only the slice that met the error may fail";
  EXPECT_EQ(rdmaStats(p.init).wc_flushes[0], 63u);
  EXPECT_EQ(rdmaStats(p.init).slice_requeues, 63u);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(RdmaTransportTest, remote_access_error_is_refused_at_once_without_retries) {
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(1 << 20, 1 << 20, {{"rdma.retry_limit", "8"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  // One WR presents a wrong rkey: no other path makes the target accept it.
  ASSERT_EQ(SoftVerbsEnv::control("badkey sv0 1"), 0);
  ASSERT_EQ(SoftVerbsEnv::control("badkey sv1 1"), 0);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kWrite, p.lmem.p, p.seg, p.base, 4096}});
  ASSERT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].error.code(), Code::kOutOfRange) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("IBV_WC_REM_ACCESS_ERR"), std::string::npos) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find("not retried"), std::string::npos) << st[0].error.toString();
  EXPECT_EQ(rdmaStats(p.init).slice_retries, 0u);
  EXPECT_EQ(rdmaStats(p.init).slices_refused, 1u);
  EXPECT_EQ(test::checkPattern(p.tmem.p, 4096, 5), -1) << "the refused WRITE landed";
}

TEST_F(RdmaTransportTest, post_failure_with_nothing_outstanding_does_not_strand_queued_slices) {
  // The first ibv_post_send on sv0 fails with nothing posted yet: the
  // endpoint must not stay draining with slices queued behind the failure.
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(8 << 20, 8 << 20, {{"rdma.retry_limit", "2"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  ASSERT_EQ(SoftVerbsEnv::control("postfail sv0 1"), 0);
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 8 << 20}}, 20000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 8 << 20, 5), -1);
  EXPECT_EQ(rdmaStats(p.init).handshakes_sent, 3u) << "the sv0 endpoint reconnected once";
}

// Slices posted on sv0 (the buffer's NUMA node) wait on the stalled NIC;
// then `kill` happens to it. They must end on sv1, byte-exact.
void failOverFromStalledNic(const char* kill, const char* then = nullptr) {
  SoftVerbsEnv env("sv0:numa=0,sv1:numa=1");
  RdmaPair p(4 << 20, 4 << 20, {{"rdma.flush_timeout_ms", "300"}, {"rdma.retry_limit", "2"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  ASSERT_EQ(SoftVerbsEnv::control("stall sv0"), 0);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4 << 20}}).ok());
  ASSERT_TRUE(test::eventually([&] { return rdmaStats(p.init).wrs_posted[0] == 64; }));
  ASSERT_EQ(SoftVerbsEnv::control(kill), 0);
  // Both engines' contexts on sv0 (the target's too) report it.
  ASSERT_TRUE(test::eventually([&] { return rdmaStats(p.init, p.target).nic_failures == 2; }));
  if (then) {
    ASSERT_EQ(SoftVerbsEnv::control(then), 0);
  }
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(20)).ok()) << "slices posted on the dead NIC never ended";
  TransferStatus t;
  ASSERT_TRUE(p.init.getTransferStatus(b, 0, t).ok());
  ASSERT_EQ(t.s, TransferState::kCompleted) << t.error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 4 << 20, 5), -1);
  EXPECT_EQ(rdmaStats(p.init).slices_abandoned, 64u);
  EXPECT_EQ(rdmaStats(p.init).wrs_posted[1], 64u);
  EXPECT_TRUE(p.init.freeBatchID(b).ok());
}

TEST_F(RdmaTransportTest, slices_on_a_nic_that_died_without_flushing_are_failed_over) {
  // DEVICE_FATAL, and the dead device never completes what it held.
  failOverFromStalledNic("fatal sv0");
}

TEST_F(RdmaTransportTest, cq_overrun_fails_the_nics_work_over_to_another_nic) {
  // The NIC's CQ overruns (IBV_EVENT_CQ_ERR): the completions of what runs
  // next are lost. The NIC carries nothing more; its work moves to sv1.
  failOverFromStalledNic("cqerr sv0", "resume sv0");
}

TEST_F(RdmaTransportTest, passive_qps_are_released_when_the_requester_lets_go) {
  SoftVerbsEnv env("sv0,sv1");
  RdmaPair p(4 << 20, 4 << 20);
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::counter(p.target, "rdma", "passive_qp_sets"), 2u) << "one per NIC pair used";
  // Closing the segment lets the endpoints' QPs go: the target's too.
  ASSERT_TRUE(p.init.closeSegment(p.seg).ok());
  EXPECT_TRUE(test::eventually([&] { return test::counter(p.target, "rdma", "passive_qp_sets") == 0; }))
      << test::counter(p.target, "rdma", "passive_qp_sets") << " passive QP set(s) left";
  // And a requester that shuts down releases its peers' QPs as well.
  ASSERT_TRUE(p.init.openSegment(p.target.segmentName(), p.seg).ok());
  st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 4 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::counter(p.target, "rdma", "passive_qp_sets"), 2u);
  EngineAccess::of(p.init).shutdown();
  EXPECT_EQ(test::counter(p.target, "rdma", "passive_qp_sets"), 0u);
}

// Pages of [p, p + n) resident in memory (mincore).
size_t residentPages(void* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((n + page - 1) / page);
  if (mincore(p, n, v.data()) != 0) return 0;
  size_t r = 0;
  for (unsigned char c : v) r += c & 1;
  return r;
}

// Anonymous memory never touched by this process (no page resident yet).
struct Untouched {
  explicit Untouched(size_t n) : len(n) {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p = m == MAP_FAILED ? nullptr : static_cast<char*>(m);
    if (p) ::madvise(p, n, MADV_NOHUGEPAGE);  // residency is counted per 4 KiB page
  }
  ~Untouched() {
    if (p) ::munmap(p, len);
  }
  char* p = nullptr;
  size_t len;
};

TEST_F(RdmaTransportTest, large_region_is_pretouched_and_keeps_its_contents) {
  {
    Untouched probe(1 << 20);  // the pre-touch is MADV_POPULATE_WRITE (Linux 5.14)
    ASSERT_NE(probe.p, nullptr);
    if (::madvise(probe.p, probe.len, MADV_POPULATE_WRITE) != 0)
      GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE: " << std::strerror(errno);
  }
  SoftVerbsEnv env("sv0,sv1");
  // (file.fixed_buffers off: io_uring would pin, and so touch, every region.)
  RdmaPair p(16 << 20, 16 << 20,
             {{"rdma.pretouch_threshold", "1M"}, {"rdma.pretouch_threads", "2"}, {"file.fixed_buffers", "0"}});
  ASSERT_TRUE(p.status.ok()) << p.status.toString();
  EXPECT_EQ(test::checkPattern(p.tmem.p, p.tmem.n, 5), -1);  // registration did not disturb it
  auto st = test::runBatch(p.init, p.seg, {{OpCode::kRead, p.lmem.p, p.seg, p.base, 16 << 20}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(test::checkPattern(p.lmem.p, 16 << 20, 5), -1);

  // The pre-touch itself: a region at the threshold is resident once
  // registered; one below it is left alone (the software provider's
  // ibv_reg_mr touches nothing, so residency comes from the pre-touch).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Untouched big(4 << 20), small(512 << 10);
  ASSERT_TRUE(big.p && small.p);
  ASSERT_EQ(residentPages(big.p, big.len), 0u);
  ASSERT_EQ(residentPages(small.p, small.len), 0u);
  ASSERT_TRUE(p.target.registerLocalMemory(big.p, big.len, "cpu:0", true).ok());
  ASSERT_TRUE(p.target.registerLocalMemory(small.p, small.len, "cpu:0", true).ok());
  EXPECT_EQ(residentPages(big.p, big.len), big.len / page);
  EXPECT_EQ(residentPages(small.p, small.len), 0u);
  ASSERT_TRUE(p.target.unregisterLocalMemory(big.p).ok());
  ASSERT_TRUE(p.target.unregisterLocalMemory(small.p).ok());
}

TEST_F(RdmaTransportTest, host_memory_claimed_as_gpu_memory_is_refused_before_rdma_sees_it) {
  SoftVerbsEnv env("sv0");
  // No CUDA driver here: the engine knows this is host memory and refuses
  // the "cuda:0" claim itself (rdma never registers a lie).
  RdmaPair p(1 << 20, 1 << 20, {}, "cuda:0");
  EXPECT_EQ(p.status.code(), Code::kInvalidArgument) << p.status.toString();
  EXPECT_NE(p.status.message().find("cuda:0"), std::string::npos) << p.status.message();
}

TEST_F(RdmaTransportTest, shutdown_with_transfers_in_flight_finishes_every_slice) {
  SoftVerbsEnv env("sv0,sv1");
  // Small slices and shallow queues: 2048 slices that take many rounds of
  // posting, so the batch is still running when the initiator shuts down.
  auto p = std::make_unique<RdmaPair>(32 << 20, 32 << 20,
                                      std::vector<std::pair<std::string, std::string>>{
                                          {"rdma.slice_size", "16K"}, {"rdma.max_wr", "4"}});
  ASSERT_TRUE(p->status.ok()) << p->status.toString();
  BatchID b;
  ASSERT_TRUE(p->init.allocateBatchID(32, b).ok());
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 32; ++i) reqs.push_back({OpCode::kRead, p->lmem.p + i * (1 << 20), p->seg,
                                               p->base + i * (1 << 20), 1 << 20});
  ASSERT_TRUE(p->init.submitTransfer(b, reqs).ok());
  TransferStatus agg;
  ASSERT_TRUE(p->init.getBatchTransferStatus(b, agg).ok());
  ASSERT_EQ(agg.s, TransferState::kPending) << "the batch ended before the shutdown began";
  ASSERT_LT(agg.transferred_bytes, 32u << 20);
  // The initiator shuts down with the batch in flight: it waits (bounded)
  // for the batch, so every slice lands and none fails.
  // The engine lets go of its transports at shutdown: their last counters
  // come through the test seam.
  static std::mutex final_mu;
  static rdma::StatsSnapshot final_counts;
  static bool final_seen = false;
  rdma::testing::after_shutdown = [](const Counters& c) {
    std::lock_guard lk(final_mu);
    final_counts = rdma::statsOf(c);
    final_seen = true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  detail::EngineAccess::of(p->init).shutdown();
  rdma::testing::after_shutdown = nullptr;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(test::checkPattern(p->lmem.p, 32 << 20, 5), -1) << "a slice in flight at shutdown did not land";
  std::lock_guard lk(final_mu);
  ASSERT_TRUE(final_seen) << "the initiator's rdma transport was not shut down";
  const rdma::StatsSnapshot& s = final_counts;
  EXPECT_EQ(s.slices_failed, 0u);
  EXPECT_EQ(s.slice_retries, 0u);
  EXPECT_EQ(s.slice_requeues, 0u);
  // Every one of the 2048 slices was posted exactly once, nothing abandoned.
  EXPECT_EQ(s.wrs_posted[0] + s.wrs_posted[1], 2048u);
  EXPECT_EQ(s.slices_abandoned, 0u);
  p.reset();  // then both engines are destroyed
}

// The handshake's integers must be JSON integers within their field's range
// (a float out of range is undefined behaviour to convert; found by
// tests/fuzz/rdma_handshake_fuzz.cpp).
TEST(RdmaHandshake, integers_out_of_range_or_not_integers_are_refused) {
  rdma::HandshakeReply ok;
  ok.nic = "rxe0";
  ok.qps.qpn = {17};
  ok.qps.psn = {5};
  ok.qps.lid = 3;
  ok.qps.mtu = 1024;
  const nlohmann::json good = nlohmann::json::parse(rdma::encode(ok));
  rdma::HandshakeReply out;
  ASSERT_TRUE(rdma::decode(good.dump(), out).ok());
  EXPECT_EQ(out.qps.qpn, std::vector<uint32_t>{17});
  EXPECT_EQ(out.qps.lid, 3);
  for (auto [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"lid", 70000}, {"lid", -1}, {"mtu", 1e300}, {"mtu", 4096.5}, {"qpn", {1e20}}, {"psn", {-3}},
           {"qpn", {{"a", 1}}}, {"psn", "x"}}) {
    nlohmann::json bad = good;
    bad[key] = value;
    Status s = rdma::decode(bad.dump(), out);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << key << "=" << value.dump();
  }
}

}  // namespace

#else
TEST(RdmaTransportTest, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
