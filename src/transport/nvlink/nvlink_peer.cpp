// The nvlink transport's two ends of a handle: what the owner exports (IPC
// handles, the region table) and what a peer opens (owners, mappings), with
// the watcher that notices an owner's exit and closes mappings.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/nvlink/nvlink_socket.h"

namespace hawser::nvlink {

uint64_t processStartTime(int64_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(f, line)) return 0;
  // Field 2 (comm) may hold spaces and parentheses: count from the last ')'.
  auto rp = line.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream in(line.substr(rp + 2));
  std::string v;
  for (int field = 3; field <= 22 && (in >> v); ++field) {
    if (field == 3 && (v == "Z" || v == "X")) return 0;  // exited, not yet reaped: its copies ended with it
    if (field == 22) return std::strtoull(v.c_str(), nullptr, 10);
  }
  return 0;
}

uint64_t pidNamespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

Status onOwnThread(const std::function<Status()>& fn) {
  Status s;
  std::thread t([&] { s = fn(); });
  t.join();
  return s;
}

// ---- Exports ----------------------------------------------------------------

Status Exports::create(std::shared_ptr<Counters> counters, std::unique_ptr<Exports>& out) {
  std::unique_ptr<Exports> e(new Exports());
  e->counters_ = std::move(counters);
  // The table and the readers' area (sparse: pages appear as they are used).
  const size_t bytes = kTableFileBytes;
  e->fd_ = ::memfd_create(kTableName, MFD_CLOEXEC);
  if (e->fd_ < 0) return {Code::kNotSupported, fmt::format("nvlink: memfd_create: {}", std::strerror(errno))};
  void* m = MAP_FAILED;
  if (::ftruncate(e->fd_, static_cast<off_t>(bytes)) == 0)
    m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, e->fd_, 0);
  if (m == MAP_FAILED) return {Code::kNotSupported, fmt::format("nvlink: region table: {}", std::strerror(errno))};
  e->table_ = static_cast<std::atomic<uint64_t>*>(m);
  e->readers_ = static_cast<char*>(m) + kReadersOffset;
  out = std::move(e);
  return Status::OK();
}

Exports::~Exports() {
  if (table_) ::munmap(table_, kTableFileBytes);
  if (fd_ >= 0) ::close(fd_);
  for (auto& [key, al] : allocs_)
    for (auto& p : al.pieces) ::close(p.fd);
}

Status Exports::addVmm(void* addr, size_t len, int device, uint64_t& base, uint64_t& size, uint64_t& id) {
  std::vector<gpu::vmm::Piece> pieces;
  Status s = gpu::vmm::exportRange(gpu::CudaDriver::get(), device, addr, len, base, size, pieces);
  if (!s.ok()) return s;
  std::lock_guard lk(mu_);
  Alloc& al = allocs_[{base, size}];
  if (al.vmm) {  // exported already (another region of the same range)
    for (auto& p : pieces) ::close(p.fd);
  } else {
    al.vmm = ++next_vmm_;
    al.size = size;
    al.pieces = std::move(pieces);
    vmm_ids_[al.vmm] = {base, size};
  }
  id = al.vmm;
  return Status::OK();
}

Status Exports::pieces(uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out) {
  out.clear();
  std::lock_guard lk(mu_);
  auto k = vmm_ids_.find(id);
  auto al = k == vmm_ids_.end() ? allocs_.end() : allocs_.find(k->second);
  if (al == allocs_.end() || al->second.refs == 0)
    return {Code::kOutOfRange, fmt::format("VMM range {} is not exported (unregistered by its owner)", id)};
  size = al->second.size;
  for (const auto& p : al->second.pieces) {
    const int fd = ::fcntl(p.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      for (auto& q : out) ::close(q.fd);
      out.clear();
      return {Code::kUnavailable, fmt::format("dup of a VMM allocation's fd: {}", std::strerror(errno))};
    }
    out.push_back({p.at, p.size, fd});
  }
  counters_->vmm_fds_passed.fetch_add(out.size(), std::memory_order_relaxed);
  return Status::OK();
}

void Exports::readerLeft(uint64_t token) { freeHolder(readers_, kHolderToken | token); }

Status Exports::add(void* addr, size_t len, int device, const std::string& bus, nlohmann::json& attrs) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  const auto a = reinterpret_cast<uint64_t>(addr);
  uint64_t base = 0;
  size_t size = 0;
  gpu::cu::IpcMemHandle handle{};
  bool fresh = false;
  // CUDA virtual memory (cuMemMap) has no legacy IPC handle: its physical
  // allocations are shared by fd over the socket (gpu/vmm.h).
  const bool mapped = d->pointer(addr).mapped;
  uint64_t vmm = 0, vmm_size = 0;
  // On a thread of its own: the driver calls need the GPU's context current,
  // and the caller's thread keeps the one it had.
  Status s = onOwnThread([&] {
    Status st = d->bindDevice(device);
    if (!st.ok()) return st;
    if (mapped) {
      uint64_t sz = 0;
      st = addVmm(addr, len, device, base, sz, vmm);
      size = vmm_size = sz;
      return st;
    }
    if (!(st = d->allocation(addr, base, size)).ok()) return st;
    if (a + len > base + size)
      return Status(Code::kInvalidArgument,
                    fmt::format("[{:#x}, +{}) runs past its allocation [{:#x}, +{})", a, len, base, size));
    std::lock_guard lk(mu_);
    auto it = allocs_.find({base, 0});
    if (it != allocs_.end() && it->second.size == size) {
      handle = it->second.handle;
      return Status::OK();
    }
    fresh = true;
    return d->check(d->api().IpcGetMemHandle(&handle, base), fmt::format("cuIpcGetMemHandle({:#x})", base),
                    Code::kNotSupported);
  });
  if (!s.ok()) return s;
  std::lock_guard lk(mu_);
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (next_slot_ < kTableSlots) {
    slot = next_slot_++;
  } else {
    return {Code::kCapacityExceeded, fmt::format("more than {} GPU regions exported", kTableSlots)};
  }
  Alloc& al = allocs_[{base, vmm_size}];
  if (vmm) {
    if (al.refs == 0) {
      counters_->exported_allocations.fetch_add(1, std::memory_order_relaxed);
      counters_->vmm_exported.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (fresh || al.refs == 0) {
    al.handle = handle;
    al.size = size;
    if (al.refs == 0) counters_->exported_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  al.refs++;
  const uint64_t gen = ++gen_;
  table_[slot].store(gen, std::memory_order_release);
  regions_[a] = Region{base, slot, vmm_size};
  counters_->exported_regions.fetch_add(1, std::memory_order_relaxed);
  attrs = {{"base", base}, {"size", size}, {"offset", a - base}, {"bus", bus}, {"slot", slot}, {"gen", gen}};
  if (vmm) {
    attrs["vmm"] = vmm;  // its allocations' fds: asked for over the socket (nvlink_socket.h)
    return Status::OK();
  }
  std::string hex;
  hex.reserve(2 * gpu::cu::kIpcHandleSize);
  for (char c : handle.reserved) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  attrs["handle"] = hex;
  return Status::OK();
}

bool Exports::withdrawLocked(uint64_t addr, uint32_t& slot, uint64_t& gen) {
  auto it = regions_.find(addr);
  if (it == regions_.end()) return false;
  slot = it->second.slot;
  gen = table_[slot].load(std::memory_order_relaxed);
  // Peers check this word before every group of copies: from here on they refuse it.
  table_[slot].store(0, std::memory_order_release);
  auto al = allocs_.find({it->second.base, it->second.vmm_size});
  if (al != allocs_.end() && --al->second.refs == 0) {
    if (al->second.vmm) {
      // Peers that imported the range keep their mappings until their
      // descriptor drops it (or this process exits); none gets it again.
      for (auto& p : al->second.pieces) ::close(p.fd);
      vmm_ids_.erase(al->second.vmm);
      counters_->vmm_exported.fetch_sub(1, std::memory_order_relaxed);
    }
    allocs_.erase(al);
    counters_->exported_allocations.fetch_sub(1, std::memory_order_relaxed);
  }
  regions_.erase(it);
  counters_->exported_regions.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void Exports::waitAndFree(const std::vector<std::pair<uint32_t, uint64_t>>& withdrawn) {
  if (withdrawn.empty()) return;
  // Pairs with the fence a peer's stream worker makes between announcing a
  // slot and checking its word (nvlink_readers.h).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (auto [slot, gen] : withdrawn) waitForReaders(readers_, slot, gen, counters_->withdrawals_waited);
  // Only now may a new registration take the slots.
  std::lock_guard lk(mu_);
  for (auto [slot, gen] : withdrawn) free_.push_back(slot);
}

void Exports::remove(uint64_t addr) {
  std::vector<std::pair<uint32_t, uint64_t>> withdrawn(1);
  {
    std::lock_guard lk(mu_);
    if (!withdrawLocked(addr, withdrawn[0].first, withdrawn[0].second)) return;
  }
  waitAndFree(withdrawn);
}

void Exports::close() {
  std::vector<std::pair<uint32_t, uint64_t>> withdrawn;
  {
    std::lock_guard lk(mu_);
    while (!regions_.empty()) {
      uint32_t slot = 0;
      uint64_t gen = 0;
      (void)withdrawLocked(regions_.begin()->first, slot, gen);
      withdrawn.emplace_back(slot, gen);
    }
  }
  waitAndFree(withdrawn);
}

// ---- Mapping ----------------------------------------------------------------

void closeMapping(uint64_t dptr, int device, uint64_t vmm_size, Counters* counters) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  Status s = d->bindDevice(device);
  if (s.ok() && vmm_size) s = gpu::vmm::releaseRange(d, device, dptr, vmm_size);
  else if (s.ok()) s = d->check(d->api().IpcCloseMemHandle(dptr), fmt::format("cuIpcCloseMemHandle({:#x})", dptr));
  if (!s.ok()) HLOG_WARN("nvlink: {}", s.message());
  if (counters) counters->handles_closed.fetch_add(1, std::memory_order_relaxed);
}

Mapping::~Mapping() {
  std::lock_guard lk(mu_);
  closeLocked();
}

bool Mapping::acquire(uint64_t& base) {
  std::lock_guard lk(mu_);
  if (closed_ || doomed_) return false;
  ++users_;
  base = dptr;
  return true;
}

void Mapping::release() {
  std::lock_guard lk(mu_);
  if (--users_ == 0 && doomed_) closeLocked();
}

void Mapping::doom() {
  std::lock_guard lk(mu_);
  doomed_ = true;
  if (users_ == 0) closeLocked();
}

void Mapping::closeLocked() {
  if (closed_) return;
  closed_ = true;
  if (direct) return;
  if (watcher)
    watcher->post([dptr = dptr, device = device, vmm_size = vmm_size, counters = counters] {
      closeMapping(dptr, device, vmm_size, counters.get());
    });
  else
    closeMapping(dptr, device, vmm_size, counters.get());
}

// ---- Owner ------------------------------------------------------------------

Owner::~Owner() {
  if (watcher && death_watch) watcher->remove(death_watch);
  if (pidfd >= 0) ::close(pidfd);
  if (sock >= 0) ::close(sock);  // the owner frees the reader slots named by our token
  // No group holds a view of this owner any more: its copies completed.
  for (auto& r : readers_)
    if (r) r->release();
  if (readers) ::munmap(readers, kReadersBytes);
  if (table_bytes) ::munmap(const_cast<std::atomic<uint64_t>*>(table), table_bytes);
}

bool Owner::exited() const {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;  // a pidfd is readable once its process exited
  }
  return processStartTime(pid) != start;
}

Status Owner::reader(size_t worker, Reader*& out) {
  out = nullptr;
  if (!readers) return Status::OK();
  std::lock_guard lk(readers_mu_);
  if (readers_.size() <= worker) readers_.resize(worker + 1);
  if (!readers_[worker]) {
    auto r = std::make_unique<Reader>();
    if (!r->claim(readers, other_pidns ? kHolderToken | token : 0))
      return {Code::kUnavailable, fmt::format("the region table of {} has no free reader slot ({} copy threads of "
                                              "live processes hold them all)",
                                              name, kReaderSlots)};
    readers_[worker] = std::move(r);
  }
  out = readers_[worker].get();
  return Status::OK();
}

std::shared_ptr<Mapping> Owner::cached(const std::string& h) {
  std::lock_guard lk(mu_);
  auto it = mappings_.find(h);
  return it == mappings_.end() ? nullptr : it->second.lock();
}

Status Owner::open(const BufferInfo& b, std::shared_ptr<Mapping>& out, bool& switched) {
  std::lock_guard lk(mu_);
  if (dead.load(std::memory_order_acquire))
    return {Code::kUnavailable, fmt::format("the owner, {}, has exited", name)};
  auto it = mappings_.find(b.handle);
  if (it != mappings_.end())
    if (auto m = it->second.lock()) {
      out = std::move(m);
      return Status::OK();
    }
  auto m = std::make_shared<Mapping>();
  m->watcher = watcher;
  m->counters = counters;
  m->device = b.device;
  if (self) {
    m->dptr = b.base;  // our own allocation
    m->direct = true;
  } else if (b.vmm) {
    // A VMM range: its allocations' fds from the owner's socket, imported and
    // mapped back to back in a reservation of our own.
    if (sock < 0) return {Code::kUnavailable, fmt::format("the owner, {}, has no socket to pass its memory", name)};
    uint64_t size = 0;
    std::vector<gpu::vmm::Piece> pieces;
    Status s = importPieces(sock, b.vmm, size, pieces);
    if (!s.ok()) {
      if (exited()) {
        dead.store(true, std::memory_order_release);
        return {Code::kUnavailable, fmt::format("the owner, {}, has exited", name)};
      }
      return Status(s.code(), fmt::format("VMM range {} of {}: {}", b.vmm, name, s.message()));
    }
    if (size != b.size) s = Status(Code::kRemoteError, fmt::format("VMM range {} of {} is {} bytes, its descriptor "
                                                                   "said {}", b.vmm, name, size, b.size));
    std::vector<int> all;
    for (int g = 0; g < gpu::CudaDriver::get()->deviceCount(); ++g) all.push_back(g);
    switched = true;
    uint64_t va = 0;
    if (s.ok()) s = gpu::vmm::importRange(gpu::CudaDriver::get(), b.device, pieces, size, all, va);
    for (auto& p : pieces) ::close(p.fd);  // the mappings hold the allocations
    if (!s.ok()) return s;
    m->dptr = va;
    m->vmm_size = size;
    counters->handles_opened.fetch_add(1, std::memory_order_relaxed);
    counters->vmm_imported.fetch_add(1, std::memory_order_relaxed);
  } else {
    const gpu::CudaDriver* d = gpu::CudaDriver::get();
    switched = true;
    Status s = d->bindDevice(b.device);
    if (!s.ok()) return s;
    gpu::cu::IpcMemHandle h{};
    std::memcpy(h.reserved, b.handle.data(), sizeof(h.reserved));
    gpu::cu::DevicePtr p = 0;
    gpu::cu::Result rc = d->api().IpcOpenMemHandle(&p, h, gpu::cu::kIpcLazyEnablePeerAccess);
    if (rc != gpu::cu::kSuccess) {
      if (exited()) {
        dead.store(true, std::memory_order_release);
        return {Code::kUnavailable, fmt::format("the owner, {}, has exited", name)};
      }
      return d->check(rc, fmt::format("cuIpcOpenMemHandle (allocation {:#x} of {})", b.base, name));
    }
    m->dptr = p;
    counters->handles_opened.fetch_add(1, std::memory_order_relaxed);
  }
  mappings_[b.handle] = m;
  for (auto i = mappings_.begin(); i != mappings_.end();) i = i->second.expired() ? mappings_.erase(i) : std::next(i);
  out = std::move(m);
  return Status::OK();
}

void Owner::died() {
  if (dead.exchange(true, std::memory_order_acq_rel)) return;
  counters->owner_deaths.fetch_add(1, std::memory_order_relaxed);
  HLOG_INFO("nvlink: the owner {} has exited; closing its handles", name);
  std::vector<std::shared_ptr<Mapping>> live;
  {
    std::lock_guard lk(mu_);
    for (auto& [h, w] : mappings_)
      if (auto m = w.lock()) live.push_back(std::move(m));
  }
  for (auto& m : live) m->doom();
}

// ---- PeerRef ----------------------------------------------------------------

void PeerRef::adopt(size_t i, std::shared_ptr<Mapping> m) {
  std::lock_guard lk(mu_);
  if (maps_.size() < bufs.size()) maps_.resize(bufs.size());
  maps_[i] = std::move(m);
}

Status PeerRef::mapping(size_t i, Mapping*& out, bool& switched) {
  std::lock_guard lk(mu_);
  if (maps_.size() < bufs.size()) maps_.resize(bufs.size());
  if (!maps_[i]) {
    Status s = owner->open(bufs[i], maps_[i], switched);
    if (!s.ok()) return s;
  }
  out = maps_[i].get();
  return Status::OK();
}

std::string PeerRef::mechanism() const {
  size_t legacy = 0, vmm = 0, none = 0, other_ns = 0, unreachable = 0;
  for (const BufferInfo& b : bufs) {
    if (b.exported) (b.vmm ? vmm : legacy)++;
    else if (b.other_pidns) other_ns++;
    else if (b.socket_reason != RouteReason::kNone) unreachable++;
    else if (b.no_handle) none++;
  }
  std::string out = fmt::format("legacy CUDA IPC handles for {} buffer(s), VMM by file descriptor for {}", legacy, vmm);
  if (other_ns) out += fmt::format(", {} legacy handle(s) refused (owner in another pid namespace)", other_ns);
  if (unreachable) out += fmt::format(", {} VMM buffer(s) refused (the owner's socket is out of reach)", unreachable);
  if (none) out += fmt::format(", {} without either (no_ipc_handle)", none);
  if (owner->self) return out + "; the owner is this process (addressed directly)";
  return out + (owner->sock >= 0 ? fmt::format("; owner reached over its socket {}{}", owner->socket,
                                               owner->other_pidns ? " from another pid namespace" : "")
                                 : fmt::format("; owner found by pid {} (no socket published)", owner->pid));
}

// ---- the owner's exit -------------------------------------------------------

void watchOwner(local::PeerDeathWatcher& watcher, const std::shared_ptr<Owner>& o) {
  std::weak_ptr<Owner> weak = o;
  std::function<bool()> exited;
  if (o->pidfd < 0) {
    // Polled; the owner's destructor removes the watch before it goes.
    const Owner* raw = o.get();
    exited = [raw] { return !raw->dead.load() && processStartTime(raw->pid) != raw->start; };
  }
  Status s = watcher.add(
      o->pidfd,
      [weak] {
        if (auto owner = weak.lock()) owner->died();
      },
      o->death_watch, std::move(exited));
  if (!s.ok()) HLOG_WARN("nvlink: the exit of the owner {} will not be noticed: {}", o->name, s.message());
}

}  // namespace hawser::nvlink
