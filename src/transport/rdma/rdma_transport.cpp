// The rdma transport: install, shutdown, describe, stats, diagnose. The other
// concepts live in their own files (rdma_transport.h lists them).
#include "transport/rdma/rdma_transport.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_sub_batch.h"
#include "transport/rdma/rdma_testing.h"

namespace hawser::rdma {

TransportCaps RdmaTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  // The NIC reaches GPU memory itself (dma-buf or peer memory) once the
  // CUDA driver is loaded: no staging.
  const uint32_t kinds = gpu::CudaDriver::get() ? (kHostMemory | kGpuMemory) : kHostMemory;
  c.local_memory = kinds;
  c.remote_memory = kinds;
  c.cost_rank = 30;
  c.host_properties = kZeroCopy | kNoStaging;  // the NICs' DMA, at both ends
  c.gpu_properties = kZeroCopy | kNoStaging;
  return c;
}

RouteReason RdmaTransport::absentReason() const { return RouteReason::kNoDevice; }  // no usable RDMA NIC

// Opens a context on every usable NIC; kNotSupported when there is none.
Status RdmaTransport::openNics() {
  std::vector<OpenNic> open;
  reports_ = scanNics(*v_, t_, &open, &scan_error_);
  for (const NicReport& r : reports_)
    if (!r.used) HLOG_INFO("rdma: {} not used: {}", r.name, r.reason);
  for (OpenNic& o : open) {
    NicReport& rep = reports_[o.report];
    const NicInfo& info = o.info;
    auto c = std::make_unique<RdmaContext>(v_, static_cast<int>(ctxs_.size()), info, o.ctx);
    Status s = c->init(t_.cq_entries);
    if (!s.ok()) {
      HLOG_WARN("rdma: {} not used: {}", rep.name, s.message());
      rep.used = false;
      rep.reason = s.message();
      continue;
    }
    HLOG_INFO("rdma: using {} port {} ({}, numa {}, gid[{}] {} {}, lid {}, mtu {})", info.name, info.port,
              info.ib() ? "InfiniBand" : "Ethernet", info.numa, info.gid_index, gidToString(info.gid), info.gid_type,
              info.lid, mtuBytes(info.active_mtu));
    ctxs_.push_back(std::move(c));
  }
  if (!ctxs_.empty()) return Status::OK();
  if (!scan_error_.empty()) return Status(Code::kNotSupported, scan_error_);
  std::vector<std::string> reasons;
  for (const NicReport& r : reports_) reasons.push_back(r.name + ": " + r.reason);
  return Status(Code::kNotSupported, fmt::format("no usable RDMA NIC ({})", fmt::join(reasons, "; ")));
}

Status RdmaTransport::install(const TransportContext& tc) {
  if (installed_) return Status(Code::kInvalidArgument, "rdma transport is already installed");
  if (!tc.config) return Status(Code::kInvalidArgument, "rdma transport: install needs a config");
  Status s = t_.load(*tc.config);  // kInvalidArgument naming the key
  if (!s.ok()) return s;
  if (tc.metrics) metrics_ = tc.metrics;
  s = loadVerbs(t_.verbs_lib, v_);  // kNotSupported: no verbs library here
  if (!s.ok()) {
    scan_error_ = s.message();
    return s;
  }
  s = openNics();
  if (!s.ok()) return s;
  nics_counted_ = ctxs_.size();
  max_wr_ = t_.max_wr;
  for (auto& c : ctxs_)
    if (c->info().dev_attr.max_qp_wr > 0) max_wr_ = std::min<uint32_t>(max_wr_, c->info().dev_attr.max_qp_wr);

  std::random_device rd;
  instance_ = fmt::format("{:016x}", (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid()));
  self_ = fmt::format("{}:{}", tc.host, tc.rpc_port);
  installed_ = true;
  startWorkers();
  if (tc.rpc) {
    s = serveHandshakes(*tc.rpc);
    if (!s.ok()) {
      shutdown();
      return s;
    }
  }
  return Status::OK();
}

void RdmaTransport::shutdown() {
  if (!installed_) return;
  installed_ = false;
  stopping_.store(true);
  if (gate_) {
    std::unique_lock lock(gate_->mu);
    gate_->target = nullptr;
  }
  // Nothing new gets posted; what waits fails; what is posted flushes.
  std::vector<std::shared_ptr<Endpoint>> eps = endpointsOf();
  for (auto& ep : eps) ep->close();
  joinConnectors();  // each at most rdma.connect_timeout_ms
  stopWorkers();     // after they drained the flush completions (bounded)
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    endpoints_.clear();  // destroys their QPs
    peer_handles_.clear();
  }
  // Peers destroy the QPs they keep for us (in parallel, each bounded).
  {
    std::vector<std::thread> releases;
    for (auto& ep : eps)
      if (ep->takeHandshaken()) releases.emplace_back([this, ep] { sendRelease(*ep, true); });
    for (auto& t : releases) t.join();
  }
  eps.clear();
  {
    std::lock_guard<std::mutex> lock(passive_mu_);
    for (auto& [k, p] : passive_) destroyPassive(p);
    passive_.clear();
  }
  for (auto& r : regions_.takeAll()) {
    r->deregistered.store(true, std::memory_order_release);
    for (ibv_mr* mr : r->mrs)
      if (mr) v_->dereg_mr(mr);
  }
  for (auto& c : ctxs_) c->takeStarved();  // endpoints must go before their NIC
  ctxs_.clear();
  if (testing::CountersHook h = testing::after_shutdown.load(std::memory_order_relaxed)) h(stats());
}

void RdmaTransport::describe(nlohmann::json& attrs) const {
  using json = nlohmann::json;
  json nics = json::array();
  for (auto& c : ctxs_) {
    const NicInfo& i = c->info();
    nics.push_back({{"name", i.name},
                    {"link_layer", i.ib() ? "ib" : "eth"},
                    {"gid", gidToString(i.gid)},
                    {"lid", i.lid},
                    {"numa", i.numa},
                    {"mtu", mtuBytes(i.active_mtu)},
                    {"up", c->usable()}});
  }
  attrs = json{{"instance", instance_}, {"nics", std::move(nics)}};
}

void RdmaTransport::diagnose(TransportDiagnosis& out) const {
  out.facts.emplace_back("verbs library", t_.verbs_lib);
  for (const NicReport& n : reports_) {
    DeviceRecord rec;
    rec.kind = DeviceRecord::Kind::kNic;
    rec.name = n.name;
    rec.numa_node = n.numa_node;
    rec.port = n.port;
    rec.mode = n.link_layer;
    rec.used = n.used;
    rec.reason = n.used ? "" : n.reason;
    std::string use = n.used ? "used" : "not used: " + n.reason;
    for (auto& c : ctxs_)
      if (c->info().name == n.name) {
        use = fmt::format("used as nic{}", c->index());
        rec.index = c->index();
      }
    out.devices.push_back(std::move(rec));
    out.facts.emplace_back(
        fmt::format("NIC {}", n.name),
        fmt::format("{} (port {} {}, {}, numa {}, gid[{}] {} {}, lid {}, mtu {}, max_qp_wr {})", use, n.port,
                    n.port_state, n.link_layer, n.numa_node, n.gid_index, n.gid, n.gid_type, n.lid, n.active_mtu,
                    n.max_qp_wr));
  }
  if (!scan_error_.empty())
    out.facts.emplace_back("RDMA", scan_error_);
  else if (reports_.empty() && v_)
    out.facts.emplace_back("RDMA", "no RDMA device listed by ibverbs");
  if (ctxs_.empty()) return;
  out.facts.emplace_back("slice size", std::to_string(t_.slice_size));
  out.facts.emplace_back("QPs per peer NIC pair", std::to_string(t_.qps_per_peer));
  out.facts.emplace_back("WRs per QP", std::to_string(max_wr_));
  out.facts.emplace_back("CQ workers", std::to_string(workers_.size()));
  out.facts.emplace_back("retry limit", std::to_string(t_.retry_limit));
}

Counters RdmaTransport::stats() const { return countersOf(counts_, nics_counted_, passiveSets()); }

Status RdmaTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<RdmaSubBatch>(this);
  return Status::OK();
}

}  // namespace hawser::rdma

namespace hawser {
std::unique_ptr<Transport> makeRdmaTransport() { return std::make_unique<rdma::RdmaTransport>(); }
}  // namespace hawser
