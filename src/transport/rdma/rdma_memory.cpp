// Memory registration: an MR on every usable NIC (in parallel; large host
// regions pre-touched in parallel first; GPU memory through a dma-buf when the
// driver exports one), per-NIC lkey[]/rkey[] published in attrs.rdma.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_transport.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace hawser::rdma {

// ---------------------------------------------------------------- RegionMap

Status RegionMap::checkFree(uint64_t a, uint64_t length) const {
  std::shared_lock lock(mu_);
  auto it = map_.upper_bound(a);
  if (it != map_.begin()) {
    auto prev = std::prev(it);
    if (a < prev->first + prev->second->length)
      return Status(Code::kAddressOverlapped,
                    fmt::format("[{:#x}, +{}) overlaps the rdma region at {:#x}", a, length, prev->first));
  }
  if (it != map_.end() && it->first < a + length)
    return Status(Code::kAddressOverlapped,
                  fmt::format("[{:#x}, +{}) overlaps the rdma region at {:#x}", a, length, it->first));
  return Status::OK();
}

void RegionMap::insert(std::shared_ptr<MemoryRegistration> r) {
  std::unique_lock lock(mu_);
  const uint64_t a = r->addr;
  map_.emplace(a, std::move(r));
}

std::shared_ptr<MemoryRegistration> RegionMap::take(uint64_t addr) {
  std::unique_lock lock(mu_);
  auto it = map_.find(addr);
  if (it == map_.end()) return nullptr;
  auto out = std::move(it->second);
  map_.erase(it);
  return out;
}

std::vector<std::shared_ptr<MemoryRegistration>> RegionMap::takeAll() {
  std::unique_lock lock(mu_);
  std::vector<std::shared_ptr<MemoryRegistration>> out;
  for (auto& [a, r] : map_) out.push_back(std::move(r));
  map_.clear();
  return out;
}

// ---------------------------------------------------------------- registration

namespace {

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

Status RdmaTransport::registerRegion(const Region& region, nlohmann::json& attrs,
                                     std::shared_ptr<const Registration>& out) {
  using json = nlohmann::json;
  out.reset();
  if (ctxs_.empty()) return Status::OK();
  const uint64_t a = region.addr;
  const size_t length = region.length;
  const std::string& location = region.location;
  const bool remote = region.remote_accessible;
  void* const addr = reinterpret_cast<void*>(a);
  Status s = regions_.checkFree(a, length);
  if (!s.ok()) return s;
  const int gpu = region.gpu;
  const gpu::CudaDriver* cuda = gpu >= 0 ? gpu::CudaDriver::get() : nullptr;
  auto made = std::make_shared<MemoryRegistration>();
  MemoryRegistration& r = *made;
  r.addr = a;
  r.length = length;
  r.location = location;
  r.remote = remote;
  r.numa = gpu >= 0 ? (cuda ? cuda->numaNode(gpu) : -1) : hostNodeOf(location);

  unsigned access = IBV_ACCESS_LOCAL_WRITE;
  if (remote) access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (t_.relaxed_ordering && v_->reg_mr_iova2) access |= IBV_ACCESS_RELAXED_ORDERING;

  // GPU memory (registration found it so: location cuda:N): a dma-buf of
  // the allocation when the driver exports one, else plain ibv_reg_mr, which
  // only a peer-memory kernel module (nvidia-peermem) makes work.
  bool device_ptr = cuda && cuda->pointer(addr).device;
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
      ctxs_[i]->markFatal(fmt::format("ibv_reg_mr: {}", std::strerror(errs[i])));
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
    (all_dmabuf ? counts_.gpu_dmabuf_regs : counts_.gpu_peer_memory_regs).fetch_add(1);
  }
  regions_.insert(made);
  out = std::move(made);
  return Status::OK();
}

Status RdmaTransport::unregisterMemory(void* addr, size_t) {
  if (ctxs_.empty()) return Status::OK();
  std::shared_ptr<MemoryRegistration> r = regions_.take(reinterpret_cast<uint64_t>(addr));
  if (!r) return Status(Code::kNotRegistered, fmt::format("{} is not the start of an rdma-registered region", addr));
  // Tasks may still hold the registration (their region): from here on
  // prepare refuses them.
  r->deregistered.store(true, std::memory_order_release);
  Status out;
  for (size_t i = 0; i < r->mrs.size(); ++i) {
    if (!r->mrs[i]) continue;
    int rc = v_->dereg_mr(r->mrs[i]);
    if (rc != 0 && out.ok())
      out = Status(Code::kIoError, fmt::format("ibv_dereg_mr on {} for {}: {}", ctxs_[i]->info().name, addr,
                                               std::strerror(rc)));
  }
  return out;
}

}  // namespace hawser::rdma
