// The rdma transport: ibverbs RC QPs, one-sided RDMA READ/WRITE per slice.
//
//   install      discover NICs (rdma_nic.cpp), open a context + PD + CQ on
//                each usable one, start the CQ workers, serve handshakes.
//   register     an MR on every NIC (in parallel; large regions pre-touched
//                in parallel first); per-NIC lkey[]/rkey[] go to the buffer's
//                attrs.rdma; regions kept in an ordered map (upper_bound).
//   prepare      per task: peer NICs + the remote buffer's rkey[] from the
//                descriptor, local lkey[] from the region map; cut slices.
//   submit       route each slice to a (local NIC, peer NIC) pair: local NIC
//                by the buffer's NUMA node, slices of a task spread over the
//                candidates; the pair's endpoint posts it (rdma_endpoint.cpp).
//   completion   a worker polls the NIC's CQ; an error completion retries the
//                slice on the next NIC pair, up to rdma.retry_limit, then the
//                slice is FAILED with the verbs status named.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/log.h"
#include "base/transport.h"
#include "metadata/descriptor.h"
#include "rpc/rpc.h"
#include "transport/rdma/cuda_dmabuf.h"
#include "transport/rdma/rdma_context.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/rdma_nic.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/verbs_api.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace hawser::rdma {

Stats& stats() {
  static Stats s;
  return s;
}

namespace {

using json = nlohmann::json;

int locationNode(const std::string& loc, const char* prefix) {
  size_t n = std::strlen(prefix);
  if (loc.compare(0, n, prefix) != 0) return -1;
  int v = -1;
  const char* b = loc.data() + n;
  const char* e = loc.data() + loc.size();
  auto [p, ec] = std::from_chars(b, e, v);
  return (ec == std::errc() && p == e && v >= 0) ? v : -1;
}

struct LocalRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  int numa = -1;
  bool remote = false;
  std::vector<ibv_mr*> mrs;  // per NIC; null where not registered
  std::vector<uint32_t> lkeys;
};

// Pre-faults [addr, addr+len) writable with `threads` threads so the
// following ibv_reg_mr (which pins every page) does not fault them one by one.
void preTouch(void* addr, size_t len, unsigned threads) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uint64_t start = reinterpret_cast<uint64_t>(addr) & ~uint64_t(page - 1);
  uint64_t end = reinterpret_cast<uint64_t>(addr) + len;
  uint64_t span = end - start;
  uint64_t chunk = ((span / threads) + page - 1) & ~uint64_t(page - 1);
  if (chunk == 0) chunk = page;
  std::vector<std::thread> ts;
  for (uint64_t p = start; p < end; p += chunk) {
    uint64_t n = std::min(chunk, end - p);
    ts.emplace_back([p, n] {
      if (madvise(reinterpret_cast<void*>(p), n, MADV_POPULATE_WRITE) != 0 && errno != EINVAL)
        HLOG_DEBUG("rdma pre-touch [{:#x}, +{}): {}", p, n, std::strerror(errno));
    });
  }
  for (auto& t : ts) t.join();
}

}  // namespace

class RdmaSubBatch : public SubBatch {
 public:
  explicit RdmaSubBatch(size_t cap) : capacity(cap) {}
  size_t capacity;
  std::deque<TaskCtx> tasks;
  std::deque<Slice> slices;
  size_t submitted_slices = 0;
  size_t committed_tasks = 0;
  std::atomic<int64_t> inflight{0};  // submitted slices not yet finished
  std::atomic<bool> canceled{false};
};

class RdmaTransport : public Transport, public EndpointHost {
 public:
  RdmaTransport() = default;
  ~RdmaTransport() override { shutdown(); }

  const char* name() const override { return "rdma"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.memory_segments = true;
    c.host_memory = true;
    c.gpu_memory = true;
    return c;
  }

  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  Status registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                        nlohmann::json& attrs) override;
  Status unregisterMemory(void* addr, size_t length) override;
  bool canServe(const SegmentDesc& seg, const std::string& local_location) const override;
  void closeSegment(const SegmentDesc& seg) override;
  Status allocateSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  Status prepare(SubBatch& sb, std::span<Task* const> tasks, size_t& slices) override;
  void submit(SubBatch& sb) override;
  void discard(SubBatch& sb) override;
  void cancel(SubBatch& sb) override;
  bool idle(SubBatch& sb) override;
  void freeSubBatch(std::unique_ptr<SubBatch> sb) override;

  // EndpointHost
  Status establish(Endpoint& ep, std::vector<ibv_qp*>& qps) override;
  void connectAsync(std::shared_ptr<Endpoint> ep) override;
  void sliceDone(Slice* s) override;
  void sliceFailed(Slice* s, const Status& why, int wc_status) override;
  void sliceCanceled(Slice* s) override;
  bool sliceCanceledFlag(const Slice* s) const override { return s->sb->canceled.load(std::memory_order_acquire); }
  uint32_t maxWrPerQp() const override { return max_wr_; }

 private:
  struct Gate {
    std::shared_mutex mu;
    RdmaTransport* target = nullptr;
  };
  struct Passive {
    int ctx = -1;
    std::string from, instance;
    std::vector<ibv_qp*> qps;
  };
  struct ConnectJob {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  Status handshake(const std::string& request, std::string& reply);
  Status peerFor(const SegmentDesc& seg, std::shared_ptr<const Peer>& out);
  std::shared_ptr<Endpoint> endpointFor(const std::shared_ptr<const Peer>& peer, int l, int p);
  bool pathUsable(const Slice* s, int l, int p) const;
  // First-choice pair for a fresh slice; false when no pair is usable.
  bool firstPath(Slice* s);
  // Sets s->local_nic/peer_nic for attempt s->attempts; false if none usable.
  bool pathFor(Slice* s);
  void route(std::vector<Slice*>& slices);
  void finish(Slice* s, TransferState st, const Status& err);
  void workerLoop(std::vector<RdmaContext*> ctxs);
  void handleAsync(RdmaContext* c);
  void destroyPassive(Passive& p);

  Tunables t_;
  const VerbsApi* v_ = nullptr;
  uint32_t max_wr_ = 256;
  std::string self_;      // "host:port" of this engine
  std::string instance_;  // nonce of this install
  std::vector<std::unique_ptr<RdmaContext>> ctxs_;
  std::atomic<bool> stopping_{false};
  bool installed_ = false;
  std::atomic<uint64_t> salt_{0};
  std::shared_ptr<Gate> gate_;

  mutable std::shared_mutex regions_mu_;
  std::map<uint64_t, LocalRegion> regions_;
  mutable std::mutex cuda_mu_;
  std::set<int> cuda_ok_;  // GPUs whose memory registered on the NICs

  std::mutex ep_mu_;
  std::map<std::string, std::shared_ptr<const Peer>> peers_;
  std::map<std::tuple<std::string, int, int>, std::shared_ptr<Endpoint>> endpoints_;

  std::mutex passive_mu_;
  std::map<std::string, Passive> passive_;  // "from|endpoint id" -> QPs

  std::mutex conn_mu_;
  std::list<std::unique_ptr<ConnectJob>> connectors_;

  int wake_fd_ = -1;
  std::atomic<bool> workers_stop_{false};
  std::vector<std::thread> workers_;
};

// ============================================================== install

Status RdmaTransport::install(const TransportContext& tc) {
  Status s = t_.load(*tc.config);
  if (!s.ok()) return s;
  s = loadVerbs(t_.verbs_lib, v_);
  if (!s.ok()) return s;
  int n = 0;
  ibv_device** list = v_->get_device_list(&n);
  if (!list) return Status(Code::kNotSupported, fmt::format("ibv_get_device_list: {}", std::strerror(errno)));
  std::vector<std::string> reasons;
  for (int i = 0; i < n; ++i) {
    const char* dn = v_->get_device_name(list[i]);
    std::string name = dn ? dn : "?";
    if (!t_.devices.empty() && std::find(t_.devices.begin(), t_.devices.end(), name) == t_.devices.end()) {
      HLOG_INFO("rdma: {} not used: not listed in rdma.devices", name);
      reasons.push_back(name + ": not listed in rdma.devices");
      continue;
    }
    ibv_context* ctx = nullptr;
    NicInfo info;
    NicReport rep;
    s = inspectNic(*v_, list[i], t_, ctx, info, rep);
    if (!s.ok()) {
      HLOG_WARN("rdma: {} not used: {}", name, rep.reason);
      reasons.push_back(name + ": " + rep.reason);
      continue;
    }
    auto c = std::make_unique<RdmaContext>(v_, static_cast<int>(ctxs_.size()), info, ctx);
    s = c->init(t_.cq_entries);
    if (!s.ok()) {
      HLOG_WARN("rdma: {} not used: {}", name, s.message());
      reasons.push_back(name + ": " + s.message());
      continue;
    }
    HLOG_INFO("rdma: using {} port {} ({}, numa {}, gid[{}] {} {}, lid {}, mtu {})", name, info.port,
              info.ib() ? "InfiniBand" : "Ethernet", info.numa, info.gid_index, gidToString(info.gid), info.gid_type,
              info.lid, mtuBytes(info.active_mtu));
    ctxs_.push_back(std::move(c));
  }
  v_->free_device_list(list);
  if (ctxs_.empty()) {
    std::string why = n == 0 ? "no RDMA devices found" : fmt::format("no usable RDMA NIC ({})", fmt::join(reasons, "; "));
    return Status(Code::kNotSupported, why);
  }
  max_wr_ = t_.max_wr;
  for (auto& c : ctxs_)
    if (c->info().dev_attr.max_qp_wr > 0) max_wr_ = std::min<uint32_t>(max_wr_, c->info().dev_attr.max_qp_wr);

  std::random_device rd;
  instance_ = fmt::format("{:016x}", (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid()));
  self_ = fmt::format("{}:{}", tc.host, tc.rpc_port);

  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  uint32_t w = t_.workers ? t_.workers : std::min<uint32_t>(static_cast<uint32_t>(ctxs_.size()), 4);
  w = std::max<uint32_t>(1, std::min<uint32_t>(w, static_cast<uint32_t>(ctxs_.size())));
  for (uint32_t i = 0; i < w; ++i) {
    std::vector<RdmaContext*> mine;
    for (size_t c = i; c < ctxs_.size(); c += w) mine.push_back(ctxs_[c].get());
    workers_.emplace_back([this, mine] { workerLoop(mine); });
  }

  gate_ = std::make_shared<Gate>();
  gate_->target = this;
  if (tc.rpc) {
    std::shared_ptr<Gate> gate = gate_;
    tc.rpc->onCall(rpc::kRdmaHandshake, [gate](const std::string& req, std::string& reply) {
      std::shared_lock lock(gate->mu);
      if (!gate->target) return Status(Code::kUnavailable, "rdma transport is not running");
      return gate->target->handshake(req, reply);
    });
  }
  installed_ = true;
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
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    for (auto& [k, ep] : endpoints_) eps.push_back(ep);
  }
  for (auto& ep : eps) ep->close();
  // Connectors finish (each at most rdma.connect_timeout_ms).
  {
    std::unique_lock<std::mutex> lock(conn_mu_);
    auto jobs = std::move(connectors_);
    lock.unlock();
    for (auto& j : jobs)
      if (j->thread.joinable()) j->thread.join();
  }
  // Workers drain the flush completions (bounded).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    int64_t left = 0;
    for (auto& c : ctxs_) left += c->outstanding.load();
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      HLOG_ERROR("rdma shutdown: {} work request(s) never completed; destroying their QPs anyway", left);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  workers_stop_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof(one));
    (void)r;
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    endpoints_.clear();  // destroys their QPs
    peers_.clear();
  }
  eps.clear();
  {
    std::lock_guard<std::mutex> lock(passive_mu_);
    for (auto& [k, p] : passive_) destroyPassive(p);
    passive_.clear();
  }
  {
    std::unique_lock lock(regions_mu_);
    for (auto& [a, r] : regions_)
      for (ibv_mr* mr : r.mrs)
        if (mr) v_->dereg_mr(mr);
    regions_.clear();
  }
  for (auto& c : ctxs_) c->takeStarved();  // endpoints must go before their NIC
  ctxs_.clear();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

void RdmaTransport::destroyPassive(Passive& p) {
  for (ibv_qp* q : p.qps) {
    int rc = v_->destroy_qp(q);
    if (rc != 0) HLOG_WARN("rdma: ibv_destroy_qp (passive, from {}): {}", p.from, std::strerror(rc));
  }
  p.qps.clear();
}

void RdmaTransport::describe(nlohmann::json& attrs) const {
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

// ============================================================== memory

Status RdmaTransport::registerMemory(void* addr, size_t length, const std::string& location, bool remote,
                                     nlohmann::json& attrs) {
  if (ctxs_.empty()) return Status::OK();
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  {
    std::shared_lock lock(regions_mu_);
    auto it = regions_.upper_bound(a);
    if (it != regions_.begin()) {
      auto prev = std::prev(it);
      if (a < prev->first + prev->second.length)
        return Status(Code::kAddressOverlapped, fmt::format("[{:#x}, +{}) overlaps the rdma region at {:#x}", a,
                                                            length, prev->first));
    }
    if (it != regions_.end() && it->first < a + length)
      return Status(Code::kAddressOverlapped,
                    fmt::format("[{:#x}, +{}) overlaps the rdma region at {:#x}", a, length, it->first));
  }
  const int gpu = locationNode(location, "cuda:");
  const CudaDriver* cuda = gpu >= 0 ? CudaDriver::get() : nullptr;
  LocalRegion r;
  r.addr = a;
  r.length = length;
  r.location = location;
  r.remote = remote;
  r.numa = gpu >= 0 ? (cuda ? cuda->numaNode(gpu) : -1) : locationNode(location, "cpu:");

  unsigned access = IBV_ACCESS_LOCAL_WRITE;
  if (remote) access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (t_.relaxed_ordering && v_->reg_mr_iova2) access |= IBV_ACCESS_RELAXED_ORDERING;

  // GPU memory: a dma-buf of the allocation when the driver exports one.
  bool device_ptr = cuda && cuda->isDevicePointer(addr);
  int dmabuf_fd = -1;
  uint64_t dmabuf_off = 0;
  if (device_ptr && v_->reg_dmabuf_mr) {
    Status ds = cuda->dmabuf(addr, length, dmabuf_fd, dmabuf_off);
    if (!ds.ok()) HLOG_INFO("rdma: GPU buffer {:#x}: no dma-buf ({}); trying peer-memory ibv_reg_mr", a, ds.message());
  }
  if (!device_ptr && length >= t_.pretouch_threshold) {
    unsigned threads = std::max(1u, std::min<unsigned>(t_.pretouch_threads, std::thread::hardware_concurrency()));
    preTouch(addr, length, threads);
  }

  r.mrs.assign(ctxs_.size(), nullptr);
  std::vector<int> errs(ctxs_.size(), 0);
  std::vector<bool> via_dmabuf(ctxs_.size(), false);
  auto reg = [&](size_t i) {
    RdmaContext& c = *ctxs_[i];
    if (!c.usable()) return;  // a dead NIC gets no MR; peers see rkey 0 there
    ibv_mr* mr = nullptr;
    if (dmabuf_fd >= 0) {
      mr = v_->reg_dmabuf_mr(c.pd(), dmabuf_off, length, a, dmabuf_fd, static_cast<int>(access));
      via_dmabuf[i] = mr != nullptr;
    }
    if (!mr) mr = v_->regMr(c.pd(), addr, length, access);
    if (!mr) errs[i] = errno ? errno : EIO;
    r.mrs[i] = mr;
  };
  // In parallel across NICs: pinning dominates for large regions.
  std::vector<std::thread> threads;
  for (size_t i = 1; i < ctxs_.size(); ++i) threads.emplace_back(reg, i);
  reg(0);
  for (auto& t : threads) t.join();
  if (dmabuf_fd >= 0) ::close(dmabuf_fd);
  for (size_t i = 0; i < ctxs_.size(); ++i) {
    if (errs[i] == EIO || errs[i] == ENODEV) {
      // The NIC died under us (fatal event not yet seen): leave it out.
      HLOG_WARN("rdma: {} refused [{:#x}, +{}) ({}); NIC marked unusable", ctxs_[i]->info().name, a, length,
                std::strerror(errs[i]));
      ctxs_[i]->markFatal();
      errs[i] = 0;
    }
  }
  for (size_t i = 0; i < ctxs_.size(); ++i) {
    if (errs[i] == 0) continue;
    for (ibv_mr* mr : r.mrs)
      if (mr) v_->dereg_mr(mr);
    return Status(Code::kIoError, fmt::format("ibv_reg_mr on {} for [{:#x}, +{}) ({}): {}", ctxs_[i]->info().name, a,
                                              length, location, std::strerror(errs[i])));
  }
  json lk = json::array(), rk = json::array();
  for (ibv_mr* mr : r.mrs) {
    r.lkeys.push_back(mr ? mr->lkey : 0);
    lk.push_back(mr ? mr->lkey : 0);
    rk.push_back(mr && remote ? mr->rkey : 0);
  }
  attrs = json::object();
  attrs["lkey"] = std::move(lk);
  if (remote) attrs["rkey"] = std::move(rk);
  if (gpu >= 0 && device_ptr) {
    bool all_dmabuf = std::all_of(via_dmabuf.begin(), via_dmabuf.end(), [](bool b) { return b; });
    HLOG_INFO("rdma: GPU {} buffer {:#x} registered via {}", gpu, a, all_dmabuf ? "dma-buf" : "peer-memory");
    std::lock_guard<std::mutex> lock(cuda_mu_);
    cuda_ok_.insert(gpu);
  }
  std::unique_lock lock(regions_mu_);
  regions_.emplace(a, std::move(r));
  return Status::OK();
}

Status RdmaTransport::unregisterMemory(void* addr, size_t) {
  if (ctxs_.empty()) return Status::OK();
  LocalRegion r;
  {
    std::unique_lock lock(regions_mu_);
    auto it = regions_.find(reinterpret_cast<uint64_t>(addr));
    if (it == regions_.end())
      return Status(Code::kNotRegistered, fmt::format("{} is not the start of an rdma-registered region", addr));
    r = std::move(it->second);
    regions_.erase(it);
  }
  Status out;
  for (size_t i = 0; i < r.mrs.size(); ++i) {
    if (!r.mrs[i]) continue;
    int rc = v_->dereg_mr(r.mrs[i]);
    if (rc != 0 && out.ok())
      out = Status(Code::kIoError, fmt::format("ibv_dereg_mr on {} for {}: {}", ctxs_[i]->info().name, addr,
                                               std::strerror(rc)));
  }
  return out;
}

// ============================================================== selection

bool RdmaTransport::canServe(const SegmentDesc& seg, const std::string& local_location) const {
  if (ctxs_.empty() || stopping_.load() || seg.kind != SegmentDesc::Kind::kMemory) return false;
  const int gpu = locationNode(local_location, "cuda:");
  if (gpu >= 0) {
    std::lock_guard<std::mutex> lock(cuda_mu_);
    if (!cuda_ok_.count(gpu)) return false;
  } else if (!(local_location.empty() || local_location == "*" || local_location.rfind("cpu", 0) == 0)) {
    return false;
  }
  auto it = seg.transports.find("rdma");
  if (it == seg.transports.end() || !it->is_object()) return false;
  auto nics = it->find("nics");
  if (nics == it->end() || !nics->is_array() || nics->empty()) return false;
  // Some pair must share a link layer (IB and RoCE do not talk).
  try {
    for (auto& c : ctxs_) {
      if (!c->usable()) continue;
      for (auto& n : *nics) {
        if (!n.is_object()) continue;
        bool ib = n.value("link_layer", std::string()) == "ib";
        if (ib == c->info().ib() && n.value("up", true)) return true;
      }
    }
  } catch (const std::exception&) {
    return false;  // a malformed peer descriptor: not for rdma
  }
  return false;
}

Status RdmaTransport::peerFor(const SegmentDesc& seg, std::shared_ptr<const Peer>& out) {
  auto it = seg.transports.find("rdma");
  if (it == seg.transports.end() || !it->is_object())
    return Status(Code::kNoTransport, fmt::format("segment '{}' publishes no rdma NICs", seg.name));
  const json& a = *it;
  std::string instance = a.value("instance", std::string());
  std::string key = seg.name + "#" + instance;
  std::lock_guard<std::mutex> lock(ep_mu_);
  auto pit = peers_.find(key);
  if (pit != peers_.end()) {
    out = pit->second;
    return Status::OK();
  }
  auto p = std::make_shared<Peer>();
  p->key = key;
  p->segment = seg.name;
  p->host = seg.host;
  p->port = seg.rpc_port;
  p->instance = instance;
  auto nics = a.find("nics");
  if (nics == a.end() || !nics->is_array() || nics->empty())
    return Status(Code::kMetadataError, fmt::format("segment '{}': transports.rdma.nics is missing or empty", seg.name));
  for (size_t i = 0; i < nics->size(); ++i) {
    const json& n = (*nics)[i];
    PeerNic pn;
    try {
      pn.name = n.at("name").get<std::string>();
      pn.ib = n.at("link_layer").get<std::string>() == "ib";
      if (!gidFromString(n.at("gid").get<std::string>(), pn.gid))
        return Status(Code::kMetadataError, fmt::format("segment '{}': transports.rdma.nics[{}].gid is malformed",
                                                        seg.name, i));
      pn.lid = n.at("lid").get<uint16_t>();
      pn.numa = n.value("numa", -1);
      pn.mtu = n.value("mtu", 4096);
      pn.up = n.value("up", true);
    } catch (const std::exception& e) {
      return Status(Code::kMetadataError,
                    fmt::format("segment '{}': transports.rdma.nics[{}]: {}", seg.name, i, e.what()));
    }
    p->nics.push_back(std::move(pn));
  }
  peers_[key] = p;
  out = p;
  return Status::OK();
}

std::shared_ptr<Endpoint> RdmaTransport::endpointFor(const std::shared_ptr<const Peer>& peer, int l, int p) {
  std::lock_guard<std::mutex> lock(ep_mu_);
  auto key = std::make_tuple(peer->key, l, p);
  auto it = endpoints_.find(key);
  if (it != endpoints_.end()) return it->second;
  std::string id = fmt::format("{}/{}:{}>{}@{}", instance_, l, ctxs_[l]->info().name, peer->nics[p].name, peer->key);
  auto ep = std::make_shared<Endpoint>(this, ctxs_[l].get(), peer, p, id);
  stats().endpoints_created++;
  endpoints_[key] = ep;
  return ep;
}

void RdmaTransport::closeSegment(const SegmentDesc& seg) {
  // Idle endpoints to this peer give their QPs back. The Endpoint objects
  // stay (slices in flight point at them; a later use reconnects); they are
  // freed with the transport.
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    const std::string prefix = seg.name + "#";
    for (auto& [k, ep] : endpoints_)
      if (std::get<0>(k).rfind(prefix, 0) == 0) eps.push_back(ep);
  }
  for (auto& ep : eps) ep->destroyIfIdle();
}

// ============================================================== batches

Status RdmaTransport::allocateSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<RdmaSubBatch>(task_capacity);
  return Status::OK();
}

Status RdmaTransport::prepare(SubBatch& base, std::span<Task* const> tasks, size_t& slices) {
  auto& sb = static_cast<RdmaSubBatch&>(base);
  const size_t t0 = sb.tasks.size(), s0 = sb.slices.size();
  auto rollback = [&](Status s) {
    sb.tasks.resize(t0);
    sb.slices.resize(s0);
    return s;
  };
  if (stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  for (Task* task : tasks) {
    const TransferRequest& rq = task->request();
    const SegmentDesc& seg = task->segment();
    std::shared_ptr<const Peer> peer;
    Status s = peerFor(seg, peer);
    if (!s.ok()) return rollback(s);
    int bi = seg.findBuffer(rq.target_offset, rq.length);
    if (bi < 0)
      return rollback(Status(Code::kOutOfRange, fmt::format("remote range [{:#x}, +{}) is not inside one buffer of "
                                                            "segment '{}'",
                                                            rq.target_offset, rq.length, seg.name)));
    const BufferDesc& buf = seg.buffers[static_cast<size_t>(bi)];
    TaskCtx tc;
    tc.task = task;
    tc.peer = peer;
    tc.remote_numa = locationNode(buf.location, "cpu:");
    auto at = buf.attrs.find("rdma");
    const json* rk = nullptr;
    if (at != buf.attrs.end() && at->is_object()) {
      auto f = at->find("rkey");
      if (f != at->end()) rk = &*f;
    }
    if (!rk)
      return rollback(Status(Code::kOutOfRange, fmt::format("buffer {:#x} of segment '{}' has no rdma rkey (not "
                                                            "remote-accessible over rdma)",
                                                            buf.addr, seg.name)));
    if (!rk->is_array() || rk->size() != peer->nics.size())
      return rollback(Status(Code::kMetadataError,
                             fmt::format("buffer {:#x} of segment '{}': attrs.rdma.rkey must list {} keys", buf.addr,
                                         seg.name, peer->nics.size())));
    for (const json& k : *rk) {
      if (!k.is_number_unsigned() || k.get<uint64_t>() > 0xffffffffull)
        return rollback(Status(Code::kMetadataError, fmt::format("buffer {:#x} of segment '{}': attrs.rdma.rkey "
                                                                 "holds a non-key value",
                                                                 buf.addr, seg.name)));
      tc.rkeys.push_back(k.get<uint32_t>());
    }
    const uint64_t la = task->localAddr();
    {
      std::shared_lock lock(regions_mu_);
      auto it = regions_.upper_bound(la);
      if (it == regions_.begin() || la - std::prev(it)->first + rq.length > std::prev(it)->second.length)
        return rollback(Status(Code::kNotRegistered,
                               fmt::format("local range [{:#x}, +{}) is not inside one rdma-registered region", la,
                                           rq.length)));
      const LocalRegion& r = std::prev(it)->second;
      tc.lkeys = r.lkeys;
      tc.local_numa = r.numa;
    }
    tc.salt = salt_.fetch_add(1, std::memory_order_relaxed);
    sb.tasks.push_back(std::move(tc));
    TaskCtx* tcp = &sb.tasks.back();
    const uint64_t n = std::max<uint64_t>(1, (rq.length + t_.slice_size - 1) / t_.slice_size);
    if (n > 0xffffffffull) return rollback(Status(Code::kInvalidArgument, "too many slices for one task"));
    task->setSliceCount(static_cast<uint32_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      Slice& s = sb.slices.emplace_back();
      s.tc = tcp;
      s.sb = &sb;
      s.index = static_cast<uint32_t>(i);
      s.local_addr = la + i * t_.slice_size;
      s.remote_addr = rq.target_offset + i * t_.slice_size;
      s.length = static_cast<uint32_t>(std::min<uint64_t>(t_.slice_size, rq.length - i * t_.slice_size));
      s.is_read = rq.opcode == OpCode::kRead;
    }
  }
  slices = sb.slices.size() - s0;
  return Status::OK();
}

void RdmaTransport::discard(SubBatch& base) {
  auto& sb = static_cast<RdmaSubBatch&>(base);
  sb.slices.resize(sb.submitted_slices);
  sb.tasks.resize(sb.committed_tasks);
}

void RdmaTransport::submit(SubBatch& base) {
  auto& sb = static_cast<RdmaSubBatch&>(base);
  const size_t from = sb.submitted_slices, to = sb.slices.size();
  sb.submitted_slices = to;
  sb.committed_tasks = sb.tasks.size();
  if (from == to) return;
  sb.inflight.fetch_add(static_cast<int64_t>(to - from), std::memory_order_acq_rel);
  std::vector<Slice*> batch;
  batch.reserve(to - from);
  for (size_t i = from; i < to; ++i) batch.push_back(&sb.slices[i]);
  route(batch);
}

void RdmaTransport::cancel(SubBatch& base) {
  auto& sb = static_cast<RdmaSubBatch&>(base);
  sb.canceled.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<Endpoint>> eps;
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    for (auto& [k, ep] : endpoints_) eps.push_back(ep);
  }
  for (auto& ep : eps) ep->purgeCanceled();
}

bool RdmaTransport::idle(SubBatch& base) {
  return static_cast<RdmaSubBatch&>(base).inflight.load(std::memory_order_acquire) == 0;
}

void RdmaTransport::freeSubBatch(std::unique_ptr<SubBatch> base) {
  auto* sb = static_cast<RdmaSubBatch*>(base.get());
  if (sb && sb->inflight.load() != 0) {
    // Work requests may still reference its slices: never free under the NIC.
    HLOG_ERROR("rdma: sub-batch freed with {} slice(s) in flight; keeping it", sb->inflight.load());
    base.release();
  }
}

// ============================================================== routing

bool RdmaTransport::pathUsable(const Slice* s, int l, int p) const {
  const TaskCtx& tc = *s->tc;
  const RdmaContext& c = *ctxs_[static_cast<size_t>(l)];
  const PeerNic& pn = tc.peer->nics[static_cast<size_t>(p)];
  return c.usable() && tc.lkeys[static_cast<size_t>(l)] != 0 && pn.up && tc.rkeys[static_cast<size_t>(p)] != 0 &&
         pn.ib == c.info().ib();
}

bool RdmaTransport::firstPath(Slice* s) {
  const TaskCtx& tc = *s->tc;
  const int L = static_cast<int>(ctxs_.size()), P = static_cast<int>(tc.peer->nics.size());
  const uint64_t spread = tc.salt + s->index;
  // Local NICs on the buffer's NUMA node first.
  std::vector<int> local;
  for (int l = 0; l < L; ++l)
    if (ctxs_[l]->usable() && tc.lkeys[l] != 0 && tc.local_numa >= 0 && ctxs_[l]->info().numa == tc.local_numa)
      local.push_back(l);
  if (local.empty())
    for (int l = 0; l < L; ++l)
      if (ctxs_[l]->usable() && tc.lkeys[l] != 0) local.push_back(l);
  if (local.empty()) return false;
  const int l0 = local[spread % local.size()];
  // Peer NICs near the remote buffer first; among them, the same rail.
  std::vector<int> peer;
  for (int p = 0; p < P; ++p)
    if (pathUsable(s, l0, p) && tc.remote_numa >= 0 && tc.peer->nics[p].numa == tc.remote_numa) peer.push_back(p);
  if (peer.empty())
    for (int p = 0; p < P; ++p)
      if (pathUsable(s, l0, p)) peer.push_back(p);
  if (peer.empty()) {
    // This local NIC reaches none: any usable pair.
    for (int l = 0; l < L && peer.empty(); ++l)
      for (int p = 0; p < P; ++p)
        if (pathUsable(s, l, p)) {
          s->l0 = l;
          s->p0 = p;
          return true;
        }
    return false;
  }
  int p0 = peer[spread % peer.size()];
  for (int p : peer)
    if (p == l0) p0 = p;  // rail-aligned (NIC i talks to NIC i) when possible
  s->l0 = l0;
  s->p0 = p0;
  return true;
}

bool RdmaTransport::pathFor(Slice* s) {
  const int L = static_cast<int>(ctxs_.size()), P = static_cast<int>(s->tc->peer->nics.size());
  const int pairs = L * P;
  // Attempt k walks every pair, changing both NICs between consecutive
  // attempts when it can: (l0,p0), (l0+1,p0+1), (l0,p0+1), (l0+1,p0), ...
  for (int probe = 0; probe < pairs; ++probe) {
    int idx = static_cast<int>((s->attempts + static_cast<uint32_t>(probe)) % static_cast<uint32_t>(pairs));
    int l = (s->l0 + idx % L) % L;
    int p = (s->p0 + idx / L + idx % L) % P;
    if (pathUsable(s, l, p)) {
      s->local_nic = l;
      s->peer_nic = p;
      return true;
    }
  }
  return false;
}

void RdmaTransport::route(std::vector<Slice*>& slices) {
  std::map<std::tuple<const Peer*, int, int>, std::pair<std::shared_ptr<Endpoint>, std::vector<Slice*>>> groups;
  for (Slice* s : slices) {
    if (stopping_.load()) {
      finish(s, TransferState::kFailed, Status(Code::kUnavailable, "rdma transport is shutting down"));
      continue;
    }
    if (s->sb->canceled.load(std::memory_order_acquire)) {
      sliceCanceled(s);
      continue;
    }
    if (s->l0 < 0 && !firstPath(s)) {
      finish(s, TransferState::kFailed,
             Status(Code::kUnavailable, fmt::format("no usable NIC pair towards segment '{}'", s->tc->peer->segment)));
      continue;
    }
    if (!pathFor(s)) {
      Status why = s->first_error.ok() ? Status(Code::kUnavailable, "no usable NIC pair left") : s->first_error;
      finish(s, TransferState::kFailed,
             Status(why.code(), fmt::format("rdma {} of {} bytes to segment '{}' failed: no usable NIC pair left "
                                            "after {} attempt(s); first error: {}",
                                            s->is_read ? "READ" : "WRITE", s->length, s->tc->peer->segment,
                                            s->attempts, why.message())));
      continue;
    }
    s->lkey = s->tc->lkeys[static_cast<size_t>(s->local_nic)];
    s->rkey = s->tc->rkeys[static_cast<size_t>(s->peer_nic)];
    auto& g = groups[std::make_tuple(s->tc->peer.get(), s->local_nic, s->peer_nic)];
    if (!g.first) g.first = endpointFor(s->tc->peer, s->local_nic, s->peer_nic);
    g.second.push_back(s);
  }
  slices.clear();
  for (auto& [k, g] : groups) g.first->submit(g.second);
}

void RdmaTransport::finish(Slice* s, TransferState st, const Status& err) {
  Task* task = s->tc->task;
  const uint64_t bytes = st == TransferState::kCompleted ? s->length : 0;
  RdmaSubBatch* sb = s->sb;
  // Not in flight any more before the engine can see the task finish, so a
  // freeBatchID right after the wait never finds it busy.
  sb->inflight.fetch_sub(1, std::memory_order_acq_rel);
  task->completeSlice(st, bytes, err);
}

void RdmaTransport::sliceDone(Slice* s) { finish(s, TransferState::kCompleted, Status::OK()); }

void RdmaTransport::sliceCanceled(Slice* s) {
  finish(s, TransferState::kCanceled, Status(Code::kUnavailable, "canceled before it was posted"));
}

void RdmaTransport::sliceFailed(Slice* s, const Status& why, int wc_status) {
  const bool flush = wc_status == IBV_WC_WR_FLUSH_ERR;
  if (s->first_error.ok() || (s->first_is_flush && !flush)) {
    s->first_error = why;
    s->first_is_flush = flush;
  }
  s->last_error = why;
  s->attempts++;
  if (sliceCanceledFlag(s)) {
    sliceCanceled(s);
    return;
  }
  if (stopping_.load() || s->attempts > t_.retry_limit) {
    std::string msg = fmt::format("rdma {} of {} bytes [{:#x} -> {:#x}] on segment '{}' failed after {} attempt(s): {}",
                                  s->is_read ? "READ" : "WRITE", s->length, s->local_addr, s->remote_addr,
                                  s->tc->peer->segment, s->attempts, s->first_error.message());
    if (s->attempts > 1 && s->last_error.message() != s->first_error.message())
      msg += fmt::format("; last: {}", s->last_error.message());
    if (stopping_.load()) msg += " (transport shutting down)";
    stats().slices_failed++;
    finish(s, TransferState::kFailed, Status(s->first_error.code(), msg));
    return;
  }
  stats().slice_retries++;
  HLOG_DEBUG("rdma: retrying slice ({} attempt(s)): {}", s->attempts, why.message());
  std::vector<Slice*> one{s};
  route(one);
}

// ============================================================== connections

void RdmaTransport::connectAsync(std::shared_ptr<Endpoint> ep) {
  std::unique_lock<std::mutex> lock(conn_mu_);
  if (stopping_.load()) {
    // No new threads once shutdown collected them: establish() refuses at
    // once and the endpoint fails what waits.
    lock.unlock();
    ep->connect();
    return;
  }
  for (auto it = connectors_.begin(); it != connectors_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = connectors_.erase(it);
    } else {
      ++it;
    }
  }
  auto job = std::make_unique<ConnectJob>();
  ConnectJob* j = job.get();
  j->thread = std::thread([ep, j] {
    ep->connect();
    j->done.store(true);
  });
  connectors_.push_back(std::move(job));
}

Status RdmaTransport::establish(Endpoint& ep, std::vector<ibv_qp*>& qps) {
  RdmaContext& c = ep.context();
  const Peer& peer = ep.peer();
  const PeerNic& pn = peer.nics[static_cast<size_t>(ep.peerNic())];
  if (stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  if (!c.usable()) return Status(Code::kUnavailable, fmt::format("local NIC {} is down", c.info().name));
  auto fail = [&](Status s) {
    for (ibv_qp* q : qps) v_->destroy_qp(q);
    qps.clear();
    return s;
  };
  std::mt19937 rng(std::random_device{}());
  std::vector<uint32_t> psn;
  json qpn = json::array(), jpsn = json::array();
  for (uint32_t i = 0; i < t_.qps_per_peer; ++i) {
    ibv_qp* q = nullptr;
    Status s = createQp(c, max_wr_, q);
    if (!s.ok()) return fail(s);
    qps.push_back(q);
    s = qpToInit(*v_, q, c.info());
    if (!s.ok()) return fail(s);
    psn.push_back(rng() & 0xffffff);
    qpn.push_back(q->qp_num);
    jpsn.push_back(psn.back());
  }
  json req = {{"v", 1},
              {"from", self_},
              {"instance", instance_},
              {"key", ep.id()},
              {"local_nic", c.info().name},
              {"peer_nic", pn.name},
              {"peer_instance", peer.instance},
              {"link_layer", c.info().ib() ? "ib" : "eth"},
              {"gid", gidToString(c.info().gid)},
              {"lid", c.info().lid},
              {"mtu", mtuBytes(c.info().active_mtu)},
              {"qpn", qpn},
              {"psn", jpsn}};
  std::string reply;
  stats().handshakes_sent++;
  Status s = rpc::call(peer.host, peer.port, rpc::kRdmaHandshake, req.dump(), reply,
                       std::chrono::milliseconds(t_.connect_timeout_ms));
  if (!s.ok())
    return fail(Status(s.code(), fmt::format("rdma handshake {} -> {}@{}: {}", c.info().name, pn.name, peer.segment,
                                             s.message())));
  RtrParams p;
  std::vector<uint32_t> rqpn, rpsn;
  try {
    json r = json::parse(reply);
    for (auto& x : r.at("qpn")) rqpn.push_back(x.get<uint32_t>());
    for (auto& x : r.at("psn")) rpsn.push_back(x.get<uint32_t>());
    if (!gidFromString(r.at("gid").get<std::string>(), p.remote_gid)) throw std::runtime_error("bad gid");
    p.remote_lid = r.at("lid").get<uint16_t>();
    int mtu = std::min({mtuBytes(c.info().active_mtu), r.at("mtu").get<int>(), t_.mtu});
    p.mtu = mtuFromBytes(mtu);
  } catch (const std::exception& e) {
    return fail(Status(Code::kRemoteError, fmt::format("rdma handshake {} -> {}@{}: malformed reply: {}",
                                                       c.info().name, pn.name, peer.segment, e.what())));
  }
  if (rqpn.size() != qps.size() || rpsn.size() != qps.size())
    return fail(Status(Code::kRemoteError, fmt::format("rdma handshake {} -> {}@{}: peer answered {} QPs for {}",
                                                       c.info().name, pn.name, peer.segment, rqpn.size(), qps.size())));
  p.min_rnr_timer = t_.min_rnr_timer;
  p.traffic_class = t_.traffic_class;
  p.service_level = t_.service_level;
  p.hop_limit = t_.hop_limit;
  for (size_t i = 0; i < qps.size(); ++i) {
    p.remote_qpn = rqpn[i];
    p.remote_psn = rpsn[i];
    s = qpToRtr(*v_, qps[i], c.info(), p);
    if (!s.ok()) return fail(s);
    s = qpToRts(*v_, qps[i], c.info(), psn[i], t_.timeout, t_.retry_cnt, t_.rnr_retry);
    if (!s.ok()) return fail(s);
  }
  HLOG_DEBUG("rdma endpoint {} connected ({} QPs, mtu {})", ep.id(), qps.size(), mtuBytes(p.mtu));
  return Status::OK();
}

Status RdmaTransport::handshake(const std::string& request, std::string& reply) {
  if (stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  std::string from, instance, key, peer_nic, peer_instance, link;
  std::vector<uint32_t> rqpn, rpsn;
  RtrParams p;
  int mtu = 0;
  try {
    json r = json::parse(request);
    if (r.at("v").get<int>() != 1) throw std::runtime_error("unsupported version");
    from = r.at("from").get<std::string>();
    instance = r.at("instance").get<std::string>();
    key = r.at("key").get<std::string>();
    peer_nic = r.at("peer_nic").get<std::string>();
    peer_instance = r.at("peer_instance").get<std::string>();
    link = r.at("link_layer").get<std::string>();
    for (auto& x : r.at("qpn")) rqpn.push_back(x.get<uint32_t>());
    for (auto& x : r.at("psn")) rpsn.push_back(x.get<uint32_t>());
    if (!gidFromString(r.at("gid").get<std::string>(), p.remote_gid)) throw std::runtime_error("bad gid");
    p.remote_lid = r.at("lid").get<uint16_t>();
    mtu = r.at("mtu").get<int>();
  } catch (const std::exception& e) {
    return Status(Code::kInvalidArgument, fmt::format("malformed rdma handshake: {}", e.what()));
  }
  if (peer_instance != instance_)
    return Status(Code::kUnavailable, fmt::format("rdma handshake for instance {}, but this engine is {} (the "
                                                  "requester's descriptor is stale)",
                                                  peer_instance, instance_));
  if (rqpn.empty() || rqpn.size() > 64 || rqpn.size() != rpsn.size())
    return Status(Code::kInvalidArgument, fmt::format("rdma handshake: {} QPNs and {} PSNs", rqpn.size(), rpsn.size()));
  RdmaContext* c = nullptr;
  for (auto& x : ctxs_)
    if (x->info().name == peer_nic) c = x.get();
  if (!c) return Status(Code::kInvalidArgument, fmt::format("rdma handshake names NIC '{}', not used here", peer_nic));
  if (!c->usable()) return Status(Code::kUnavailable, fmt::format("rdma NIC {} is down", peer_nic));
  if ((link == "ib") != c->info().ib())
    return Status(Code::kInvalidArgument, fmt::format("rdma handshake: link layer {} cannot reach {} ({})", link,
                                                      peer_nic, c->info().ib() ? "ib" : "eth"));
  p.mtu = mtuFromBytes(std::min({mtuBytes(c->info().active_mtu), mtu, t_.mtu}));
  p.min_rnr_timer = t_.min_rnr_timer;
  p.traffic_class = t_.traffic_class;
  p.service_level = t_.service_level;
  p.hop_limit = t_.hop_limit;
  Passive mine;
  mine.ctx = c->index();
  mine.from = from;
  mine.instance = instance;
  std::mt19937 rng(std::random_device{}());
  json qpn = json::array(), psn = json::array();
  Status s;
  for (size_t i = 0; i < rqpn.size() && s.ok(); ++i) {
    ibv_qp* q = nullptr;
    s = createQp(*c, max_wr_, q);
    if (!s.ok()) break;
    mine.qps.push_back(q);
    uint32_t my_psn = rng() & 0xffffff;
    p.remote_qpn = rqpn[i];
    p.remote_psn = rpsn[i];
    s = qpToInit(*v_, q, c->info());
    if (s.ok()) s = qpToRtr(*v_, q, c->info(), p);
    if (s.ok()) s = qpToRts(*v_, q, c->info(), my_psn, t_.timeout, t_.retry_cnt, t_.rnr_retry);
    qpn.push_back(q->qp_num);
    psn.push_back(my_psn);
  }
  if (!s.ok()) {
    destroyPassive(mine);
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(passive_mu_);
    // A re-established endpoint replaces its old QPs; a restarted peer
    // (new instance) leaves all of its old ones behind.
    for (auto it = passive_.begin(); it != passive_.end();) {
      if (it->second.from == from && (it->first == from + "|" + key || it->second.instance != instance)) {
        destroyPassive(it->second);
        it = passive_.erase(it);
      } else {
        ++it;
      }
    }
    passive_[from + "|" + key] = std::move(mine);
    stats().handshakes_served++;
  }
  json out = {{"nic", c->info().name},
              {"gid", gidToString(c->info().gid)},
              {"lid", c->info().lid},
              {"mtu", mtuBytes(c->info().active_mtu)},
              {"qpn", qpn},
              {"psn", psn}};
  reply = out.dump();
  return Status::OK();
}

// ============================================================== workers

void RdmaTransport::handleAsync(RdmaContext* c) {
  ibv_async_event ev;
  while (v_->get_async_event(c->ctx(), &ev) == 0) {
    const char* what = v_->event_type_str ? v_->event_type_str(ev.event_type) : "";
    switch (ev.event_type) {
      case IBV_EVENT_DEVICE_FATAL:
        HLOG_ERROR("rdma {}: async event DEVICE_FATAL ({}); NIC no longer used", c->info().name, what);
        c->markFatal();
        break;
      case IBV_EVENT_PORT_ERR:
        HLOG_WARN("rdma {}: port {} down ({})", c->info().name, ev.element.port_num, what);
        c->setPortDown(true);
        break;
      case IBV_EVENT_PORT_ACTIVE:
        HLOG_INFO("rdma {}: port {} active again", c->info().name, ev.element.port_num);
        c->setPortDown(false);
        break;
      default:
        HLOG_WARN("rdma {}: async event {} ({})", c->info().name, static_cast<int>(ev.event_type), what);
        break;
    }
    v_->ack_async_event(&ev);
  }
}

void RdmaTransport::workerLoop(std::vector<RdmaContext*> ctxs) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  auto drain = [&](RdmaContext* c) {
    int total = 0;
    for (;;) {
      int n = ibv_poll_cq(c->cq(), kBatch, wc);
      if (n < 0) {
        HLOG_ERROR("rdma {}: ibv_poll_cq failed ({})", c->info().name, n);
        break;
      }
      for (int i = 0; i < n; ++i) {
        auto* s = reinterpret_cast<Slice*>(wc[i].wr_id);
        s->ep->complete(s, wc[i]);
      }
      total += n;
      if (n < kBatch) break;
    }
    if (total > 0)
      for (auto& ep : c->takeStarved()) ep->kick();
    return total;
  };
  std::vector<pollfd> fds;
  for (RdmaContext* c : ctxs) {
    fds.push_back(pollfd{c->channel()->fd, POLLIN, 0});
    fds.push_back(pollfd{c->ctx()->async_fd, POLLIN, 0});
  }
  fds.push_back(pollfd{wake_fd_, POLLIN, 0});
  while (!workers_stop_.load()) {
    int got = 0;
    for (RdmaContext* c : ctxs) got += drain(c);
    if (got > 0) continue;
    // Spin briefly: completions of a busy NIC arrive microseconds apart.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(t_.poll_spin_us);
    while (got == 0 && std::chrono::steady_clock::now() < spin_until && !workers_stop_.load()) {
      for (RdmaContext* c : ctxs) got += drain(c);
      if (got == 0) std::this_thread::yield();
    }
    if (got > 0) continue;
    // Sleep on the completion channels: arm, re-poll (a completion may have
    // landed before the arm), then wait.
    for (RdmaContext* c : ctxs) ibv_req_notify_cq(c->cq(), 0);
    for (RdmaContext* c : ctxs) got += drain(c);
    if (got > 0) continue;
    for (auto& f : fds) f.revents = 0;
    int rc = ::poll(fds.data(), fds.size(), 200);
    if (rc <= 0) continue;
    for (size_t i = 0; i < ctxs.size(); ++i) {
      RdmaContext* c = ctxs[i];
      if (fds[2 * i].revents & POLLIN) {
        ibv_cq* cq = nullptr;
        void* cq_ctx = nullptr;
        unsigned events = 0;
        while (v_->get_cq_event(c->channel(), &cq, &cq_ctx) == 0) ++events;
        c->ackEvents(events);
      }
      if (fds[2 * i + 1].revents & POLLIN) handleAsync(c);
    }
    // wake_fd_ is only written at shutdown and left readable for every worker.
  }
}

}  // namespace hawser::rdma

namespace hawser {
std::unique_ptr<Transport> makeRdmaTransport() { return std::make_unique<rdma::RdmaTransport>(); }
}  // namespace hawser
