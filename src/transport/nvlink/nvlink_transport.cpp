// The nvlink transport: install, what the owner exports and publishes, peers,
// stats. Owners and opened handles: nvlink_peer.cpp; the data path:
// nvlink_sub_batch.cpp and nvlink_stream_worker.cpp.
#include "transport/nvlink/nvlink_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <random>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/json_integer.h"
#include "base/log.h"
#include "base/peer_entry.h"
#include "transport/nvlink/nvlink_config.h"
#include "gpu/copy_kernel.h"
#include "gpu/cuda_driver.h"
#include "base/segment_desc.h"
#include "gpu/vmm.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/nvlink/nvlink_socket.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace hawser {

namespace {

bool parseHex(const std::string& hex, std::string& out) {
  if (hex.size() != 2 * gpu::cu::kIpcHandleSize) return false;
  out.resize(gpu::cu::kIpcHandleSize);
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned v = 0;
    auto r = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
    if (r.ec != std::errc() || r.ptr != hex.data() + 2 * i + 2) return false;
    out[i] = static_cast<char>(v);
  }
  return true;
}

}  // namespace

namespace nvlink {

bool decodeBufferAttrs(const BufferDesc& bd, BufferInfo& b, std::string& bus) {
  bus.clear();
  if (memoryKindOf(bd.location) != kGpuMemory) {
    b.why = fmt::format("it is {} memory", bd.location);
    return false;
  }
  auto a = bd.attrs.find("nvlink");
  if (a == bd.attrs.end() || !a->is_object()) {
    b.why = "its owner published no IPC handle for it";
    b.no_handle = true;
    return false;
  }
  if (auto e = a->find("error"); e != a->end() && e->is_string()) {
    b.why = "its owner could not export it: " + e->get<std::string>();
    b.no_handle = true;
    return false;
  }
  // A VMM range (its allocations' fds come over the owner's socket), or a
  // legacy IPC handle.
  const bool vmm = a->contains("vmm");
  if (vmm ? !jsonIntegerField(*a, "attrs.nvlink", "vmm", b.vmm).ok() || b.vmm == 0
          : [&] {
              auto h = a->find("handle");
              return h == a->end() || !h->is_string() || !parseHex(h->get<std::string>(), b.handle);
            }()) {
    b.why = fmt::format("malformed attrs.nvlink {}", a->dump());
    return false;
  }
  if (vmm) b.handle = fmt::format("vmm:{}", b.vmm);
  if (!jsonIntegerField(*a, "attrs.nvlink", "base", b.base).ok() ||
      !jsonIntegerField(*a, "attrs.nvlink", "size", b.size).ok() ||
      !jsonIntegerField(*a, "attrs.nvlink", "slot", b.slot).ok() ||
      !jsonIntegerField(*a, "attrs.nvlink", "gen", b.gen).ok() || b.slot >= kTableSlots) {
    b.why = fmt::format("malformed attrs.nvlink {}", a->dump());
    return false;
  }
  if (auto bs = a->find("bus"); bs != a->end() && bs->is_string()) bus = bs->get<std::string>();
  // Inside [base, base+size), without wrapping around.
  if (bd.addr < b.base || bd.length > b.size || bd.addr - b.base > b.size - bd.length) {
    b.why = "its published allocation does not hold it";
    return false;
  }
  return true;
}

Status decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why) {
  const nlohmann::json* e = nullptr;
  Status s = memoryPeerEntry(seg, "nvlink", e, why, {true, "its engine has no CUDA driver"});
  if (!s.ok()) return s;
  auto malformed = [&](const std::string& what) {
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}': malformed transports.nvlink: {}", seg.name, what)});
  };
  PeerDesc d;
  if (!(s = jsonIntegerField(*e, "transports.nvlink", "pid", d.pid)).ok() ||
      !(s = jsonIntegerField(*e, "transports.nvlink", "start", d.start)).ok() ||
      !(s = jsonIntegerField(*e, "transports.nvlink", "pidns", d.pidns)).ok() ||
      !(s = jsonIntegerField(*e, "transports.nvlink", "table_fd", d.table_fd)).ok())
    return malformed(s.message());
  if (d.pid <= 0) return malformed(fmt::format("transports.nvlink.pid must be > 0, got {}", d.pid));
  if (d.table_fd < 0) return malformed(fmt::format("transports.nvlink.table_fd must be >= 0, got {}", d.table_fd));
  // An owner that publishes its local socket hands over its table and a
  // pidfd there; an owner of an earlier release publishes none.
  if (auto so = e->find("socket");
      so != e->end() && so->is_string() && jsonIntegerField(*e, "transports.nvlink", "nonce", d.nonce).ok())
    d.socket = so->get<std::string>();
  // The readers' area (an owner of an earlier release has none).
  uint32_t reader_slots = 0;
  d.readers = jsonIntegerField(*e, "transports.nvlink", "readers", reader_slots).ok() && reader_slots == kReaderSlots;
  d.buffers.resize(seg.buffers.size());
  for (size_t i = 0; i < seg.buffers.size(); ++i) {
    PeerDesc::Buffer& b = d.buffers[i];
    b.usable = decodeBufferAttrs(seg.buffers[i], b.info, b.bus);
  }
  out = std::move(d);
  return Status::OK();
}

}  // namespace nvlink

Status decodeNvlinkPeer(const SegmentDesc& seg, RouteDecline& why) {
  nvlink::PeerDesc desc;
  return nvlink::decodePeerDesc(seg, desc, why);
}

Status NvlinkTransport::loadSettings(const Config& config, NvlinkSettings& out) {
  const NvlinkConfig cfg(config);
  NvlinkSettings s;
  Status st;
  if (!(st = cfg.getInt("nvlink.streams", s.streams)).ok() ||
      !(st = cfg.getSize("nvlink.stripe_size", s.stripe_size)).ok() ||
      !(st = cfg.getInt("nvlink.stream_depth", s.stream_depth)).ok() ||
      !(st = cfg.getBool("nvlink.spin_wait", s.spin_wait)).ok() ||
      !(st = cfg.getBool("nvlink.issue_inline", s.issue_inline)).ok() ||
      !(st = cfg.getSize("nvlink.plan_cache", s.plan_cache)).ok() ||
      !(st = cfg.getString("nvlink.socket_dir", s.socket_dir)).ok() ||
      !(st = gpu::CopySettings::fromConfig(config, s.copy)).ok())
    return st;
  while (s.socket_dir.size() > 1 && s.socket_dir.back() == '/') s.socket_dir.pop_back();
  out = s;
  return Status::OK();
}

NvlinkTransport::NvlinkTransport() = default;

NvlinkTransport::~NvlinkTransport() { shutdown(); }

TransportCaps NvlinkTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  c.local_memory = kGpuMemory;
  c.remote_memory = kGpuMemory;
  c.same_host_only = true;
  c.cost_rank = 10;
  c.run_windows = true;
  c.gpu_properties = kZeroCopy | kNoStaging | kSameHost;  // the GPUs' copy engines, peer to peer
  c.buffer_declines = true;  // a buffer its owner could not export (declinesBuffer)
  return c;
}

RouteDecline NvlinkTransport::declinesBuffer(const PeerHandle& peer, int buffer) const {
  const auto& ref = static_cast<const nvlink::PeerRef&>(peer);
  if (buffer < 0 || static_cast<size_t>(buffer) >= ref.bufs.size()) return {};
  const nvlink::BufferInfo& b = ref.bufs[static_cast<size_t>(buffer)];
  if (b.exported) return {};
  // Not exported: no IPC handle published for it (or none this process can
  // use); a buffer of host memory is not nvlink's to decline (its caps say so).
  return {b.other_pidns                              ? RouteReason::kOtherPidNamespace
          : b.socket_reason != RouteReason::kNone ? b.socket_reason
          : b.no_handle                           ? RouteReason::kNoIpcHandle
                                                  : RouteReason::kRefused,
          fmt::format("buffer {} of segment '{}' cannot go over nvlink: {}", buffer, ref.segment, b.why)};
}

RouteReason NvlinkTransport::absentReason() const { return RouteReason::kNoDevice; }  // no CUDA driver or GPU

Status NvlinkTransport::install(const TransportContext& ctx) {
  if (installed_) return {Code::kInvalidArgument, "nvlink transport is already installed"};
  if (!ctx.config || !ctx.registry) return {Code::kInvalidArgument, "nvlink transport: install needs config and registry"};
  Status s = loadSettings(*ctx.config, settings_);
  if (!s.ok()) return s;
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  if (!d) {
    std::string why = gpu::CudaDriver::reason();
    return {Code::kNotSupported, "no CUDA driver loaded" + (why.empty() ? std::string(" (gpu.cuda_driver is empty)")
                                                                          : ": " + why)};
  }
  for (int i = 0; i < d->deviceCount(); ++i) {
    gpu::cu::Device dev = 0;
    char bus[64] = {0};
    std::string b;
    if (d->api().DeviceGet(&dev, i) == gpu::cu::kSuccess &&
        d->api().DeviceGetPCIBusId(bus, sizeof(bus), dev) == gpu::cu::kSuccess)
      b = bus;
    for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    buses_.push_back(b);
  }
  start_time_ = nvlink::processStartTime(::getpid());
  pidns_ = nvlink::pidNamespace();
  counters_ = std::make_shared<nvlink::Counters>();
  cache_ = std::make_unique<nvlink::WindowCache>();
  if (!(s = nvlink::Exports::create(counters_, exports_)).ok()) return s;
  watcher_ = std::make_shared<local::PeerDeathWatcher>();
  if (!(s = watcher_->start()).ok()) return {Code::kNotSupported, "nvlink watcher: " + s.message()};
  // The local socket: the table, a pidfd and VMM memory's fds for peers.
  {
    std::random_device rd;
    nonce_ = ((static_cast<uint64_t>(rd()) << 32) ^ rd()) | 1;
  }
  nvlink::Exports* ex = exports_.get();
  server_ = std::make_unique<nvlink::Server>(
      ex->tableFd(), nonce_,
      [ex](uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out) { return ex->pieces(id, size, out); },
      [ex](uint64_t token) { ex->readerLeft(token); });
  if (!(s = server_->start(settings_.socket_dir)).ok()) {
    if (s.code() != Code::kNotSupported) return s;  // a bad nvlink.socket_dir fails init naming it
    // No socket (no pidfd_open, a directory not writable): legacy IPC handles
    // by pid still work; VMM memory and other pid namespaces do not.
    HLOG_WARN("nvlink: no local socket ({}): CUDA virtual memory is not shared, peers in other pid namespaces are "
              "not served",
              s.message());
    server_.reset();
  }
  installed_ = true;
  HLOG_INFO("nvlink transport: {} GPU(s), {} stream(s) per GPU, stripe {} B", buses_.size(), settings_.streams,
            settings_.stripe_size);
  return Status::OK();
}

void NvlinkTransport::shutdown() {
  if (!installed_ || stopping_.exchange(true)) return;
  // Peers stop copying from and to this engine's memory, and the copies they
  // issued before end first (this engine's own workers among them: still running).
  if (exports_) exports_->close();
  if (server_) server_->stop();  // peers get no more fds (their mappings stay until they drop them)
  std::lock_guard lk(workers_mu_);
  for (auto& [dev, ws] : workers_)
    for (auto& w : ws) w->stop();
  if (cache_) cache_->clear();  // no launch is in flight any more
  if (watcher_) watcher_->stop();
}

void NvlinkTransport::poll() {
  std::unique_lock lk(workers_mu_, std::try_to_lock);  // never waits (shutdown holds it while stopping)
  if (!lk.owns_lock() || stopping_.load(std::memory_order_acquire)) return;
  for (auto& [dev, ws] : workers_)
    for (auto& w : ws) w->pollHere();
}

void NvlinkTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  if (!installed_) return;
  attrs["pid"] = static_cast<int64_t>(::getpid());
  attrs["start"] = start_time_;
  attrs["pidns"] = pidns_;
  attrs["table_fd"] = exports_->tableFd();
  attrs["table_slots"] = nvlink::kTableSlots;
  // Peers announce their copies in the table's readers' area, and a
  // withdrawal waits for them (nvlink_readers.h).
  attrs["readers"] = nvlink::kReaderSlots;
  // Its local socket (nvlink_socket.h): the table and a pidfd across pid
  // namespaces, and the fds of its CUDA virtual memory.
  attrs["socket"] = server_ ? server_->name() : "";
  attrs["nonce"] = nonce_;
}

Status NvlinkTransport::registerRegion(const Region& r, nlohmann::json& attrs, std::shared_ptr<const Registration>& out) {
  attrs = nlohmann::json::object();
  out.reset();
  // Host memory never goes to nvlink; memory peers may not reach is not exported.
  if (!installed_ || r.gpu < 0 || !r.remote_accessible) return Status::OK();
  void* const addr = reinterpret_cast<void*>(r.addr);
  const std::string bus = static_cast<size_t>(r.gpu) < buses_.size() ? buses_[static_cast<size_t>(r.gpu)] : "";
  Status s = exports_->add(addr, r.length, r.gpu, bus, attrs);
  if (!s.ok()) {
    // Registration still succeeds (another transport may move it); peers
    // read why nvlink cannot.
    HLOG_WARN("nvlink: {} bytes at {} ({}) not exported: {}", r.length, addr, r.location, s.message());
    attrs = nlohmann::json::object();
    attrs["error"] = s.message();
  }
  return Status::OK();
}

Status NvlinkTransport::unregisterMemory(void* addr, size_t) {
  if (exports_) exports_->remove(reinterpret_cast<uint64_t>(addr));
  return Status::OK();
}

int NvlinkTransport::ordinalOfBus(const std::string& bus) const {
  if (bus.empty()) return -1;
  for (size_t i = 0; i < buses_.size(); ++i)
    if (buses_[i] == bus) return static_cast<int>(i);
  return -1;
}

Status NvlinkTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  return openRoute(seg, out, why);
}

Status NvlinkTransport::openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) {
  why = {};  // every refusal says why, in the words of base/route.h
  if (!installed_ || stopping_.load()) return transportNotRunning("nvlink", why);
  nvlink::PeerDesc desc;
  Status ds = nvlink::decodePeerDesc(seg, desc, why);
  if (!ds.ok()) return ds;
  const int64_t pid = desc.pid;
  const uint64_t start = desc.start, pidns = desc.pidns, nonce = desc.nonce;
  const int fd = desc.table_fd;
  const std::string& socket = desc.socket;
  const bool other_ns = pidns != pidns_;
  if (other_ns && socket.empty())
    return declined(why, RouteReason::kOtherPidNamespace,
                   {Code::kNotSupported, fmt::format("segment '{}' runs in another pid namespace and publishes no nvlink "
                                                     "socket (an earlier release): its owner cannot be reached from "
                                                     "here", seg.name)});

  std::shared_ptr<nvlink::Owner> owner;
  {
    std::lock_guard lk(owners_mu_);
    for (auto o = owners_.begin(); o != owners_.end();) o = o->second.expired() ? owners_.erase(o) : std::next(o);
    const std::string key = fmt::format("{}:{}:{}:{}", pidns, pid, start, fd);
    auto f = owners_.find(key);
    if (f != owners_.end()) owner = f->second.lock();
    if (!owner) {
      auto o = std::make_shared<nvlink::Owner>();
      o->pid = pid;
      o->start = start;
      o->other_pidns = other_ns;
      o->name = other_ns ? fmt::format("process {} of another pid namespace (segment '{}')", pid, seg.name)
                         : fmt::format("process {} (segment '{}')", pid, seg.name);
      o->watcher = watcher_;
      o->counters = counters_;
      // An owner in this process (another engine, or this one) is addressed
      // directly; its table is still its own.
      o->self = !other_ns && pid == ::getpid() && start == start_time_;
      // The readers' area (an owner of an earlier release has none) is
      // written here: the file is opened read-write, the table mapped read-only.
      const bool readers = desc.readers;
      int tfd = -1;
      if (!o->self && !socket.empty()) {
        nvlink::Welcome w;
        RouteReason r = RouteReason::kNone;
        Status cs = nvlink::connectOwner(socket, nonce, seg.name, w, r);
        if (!cs.ok()) {
          if (w.sock >= 0) ::close(w.sock);
          if (other_ns) return declined(why, r, cs);
          HLOG_DEBUG("nvlink: {}; finding the owner by pid instead", cs.message());
          o->socket_reason = r;
          o->socket_why = cs.message();
        } else {
          o->sock = w.sock;
          o->pidfd = w.pidfd;
          o->token = w.token;
          o->socket = socket;
          tfd = w.table_fd;
        }
      }
      if (tfd < 0) {
        if (!o->self) {
          if (nvlink::processStartTime(pid) != start)
            return declined(why, RouteReason::kPeerGone, {Code::kUnavailable, fmt::format("the owner of segment '{}', "
                                                                                    "process {}, has exited",
                                                                                    seg.name, pid)});
          o->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
          if (o->pidfd < 0 && errno == ESRCH)
            return declined(why, RouteReason::kPeerGone, {Code::kUnavailable, fmt::format("the owner of segment '{}', "
                                                                                    "process {}, has exited",
                                                                                    seg.name, pid)});
        }
        const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
        char link[256] = {0};
        ssize_t ln = ::readlink(path.c_str(), link, sizeof(link) - 1);
        if (ln < 0 || std::strstr(link, nvlink::kTableName) == nullptr)
          return declined(why, RouteReason::kPermissionDenied,
                         {Code::kNotSupported,
                          fmt::format("segment '{}': cannot see the owner's region table {}: {} (nvlink needs both "
                                      "processes under one user)", seg.name, path,
                                      ln < 0 ? std::strerror(errno) : "not the table")});
        tfd = ::open(path.c_str(), (readers ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (tfd < 0)
          return declined(why, RouteReason::kPermissionDenied,
                         {Code::kNotSupported, fmt::format("segment '{}': cannot open the owner's region table {}: {}",
                                                           seg.name, path, std::strerror(errno))});
      }
      struct stat st {};
      const size_t bytes = nvlink::kTableBytes;
      const size_t need = readers ? nvlink::kTableFileBytes : bytes;
      void* m = MAP_FAILED;
      void* r = MAP_FAILED;
      if (::fstat(tfd, &st) == 0 && static_cast<size_t>(st.st_size) >= need) {
        m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, tfd, 0);
        if (readers && m != MAP_FAILED) {
          r = ::mmap(nullptr, nvlink::kReadersBytes, PROT_READ | PROT_WRITE, MAP_SHARED, tfd,
                     static_cast<off_t>(nvlink::kReadersOffset));
          if (r == MAP_FAILED) {
            ::munmap(m, bytes);
            m = MAP_FAILED;
          }
        }
      }
      ::close(tfd);
      if (m == MAP_FAILED)
        return declined(why, RouteReason::kRefused,
                       {Code::kNotSupported,
                        fmt::format("segment '{}': cannot map the owner's region table", seg.name)});
      o->table = static_cast<const std::atomic<uint64_t>*>(m);
      o->table_bytes = bytes;
      if (readers) o->readers = r;
      if (!o->self) {
        // The owner is still the one the descriptor named (its pid not reused).
        if (o->exited() || (!other_ns && nvlink::processStartTime(pid) != start))
          return declined(why, RouteReason::kPeerGone, {Code::kUnavailable, fmt::format("the owner of segment '{}', "
                                                                                  "process {}, has exited",
                                                                                  seg.name, pid)});
        nvlink::watchOwner(*watcher_, o);
      }
      owners_[key] = o;
      owner = std::move(o);
    }
  }

  auto ref = std::make_shared<nvlink::PeerRef>();
  ref->owner = owner;
  ref->segment = seg.name;
  ref->bufs.resize(seg.buffers.size());
  for (size_t i = 0; i < seg.buffers.size(); ++i) {
    nvlink::BufferInfo& b = ref->bufs[i];
    b = std::move(desc.buffers[i].info);
    const std::string bus = std::move(desc.buffers[i].bus);
    if (!desc.buffers[i].usable) continue;
    if (!b.vmm && owner->other_pidns) {
      // Legacy CUDA IPC handles do not open across pid namespaces (the driver
      // checks the exporting process; UCX refuses them likewise): VMM memory
      // shared by fd does.
      b.why = "a legacy CUDA IPC handle (cudaMalloc memory) of an owner in another pid namespace cannot be opened "
              "here; memory from cuMemCreate with the POSIX fd handle type (PyTorch's expandable_segments:True) can";
      b.other_pidns = true;
      continue;
    }
    if (b.vmm && owner->sock < 0 && !owner->self) {
      // The fds of VMM memory come over the owner's socket only.
      b.why = owner->socket_why.empty() ? "its owner publishes no socket to pass VMM memory's fds over"
                                        : "its owner's socket passes VMM memory's fds: " + owner->socket_why;
      b.socket_reason = owner->socket_why.empty() ? RouteReason::kNoIpcHandle : owner->socket_reason;
      continue;
    }
    b.device = ordinalOfBus(bus);
    if (b.device < 0) {
      b.why = fmt::format("its GPU (PCI {}) is not visible to this process", bus.empty() ? "unknown" : bus);
      continue;
    }
    b.exported = true;
    if (auto m = owner->cached(b.handle)) ref->adopt(i, std::move(m));  // opened once, kept across descriptors
  }
  out = std::move(ref);
  return Status::OK();
}

Status NvlinkTransport::workers(int device, std::vector<nvlink::StreamWorker*>& out) {
  std::lock_guard lk(workers_mu_);
  if (stopping_.load()) return {Code::kUnavailable, "nvlink transport is shutting down"};
  auto it = workers_.find(device);
  if (it == workers_.end()) {
    std::vector<std::unique_ptr<nvlink::StreamWorker>> ws;
    for (uint32_t i = 0; i < settings_.streams; ++i) {
      auto w = std::make_unique<nvlink::StreamWorker>(next_worker_++, device, settings_.stream_depth, counters_,
                                                      settings_.copy, settings_.spin_wait, settings_.issue_inline, cache_.get(),
                                                      settings_.plan_cache);
      Status s = w->start();
      if (!s.ok()) {
        for (auto& o : ws) o->stop();
        return s;
      }
      ws.push_back(std::move(w));
    }
    it = workers_.emplace(device, std::move(ws)).first;
  }
  out.clear();
  for (auto& w : it->second) out.push_back(w.get());
  return Status::OK();
}

Status NvlinkTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<nvlink::SubBatchImpl>(this);
  return Status::OK();
}

void NvlinkTransport::diagnose(TransportDiagnosis& out) const {
  if (!installed_) return;
  out.facts.emplace_back("GPUs", std::to_string(buses_.size()));
  const gpu::CudaDriver* driver = gpu::CudaDriver::get();
  for (size_t i = 0; i < buses_.size(); ++i) {
    DeviceRecord rec;
    rec.kind = DeviceRecord::Kind::kGpu;
    rec.name = fmt::format("cuda:{}", i);
    rec.index = static_cast<int>(i);
    rec.pci_bus_id = buses_[i];
    rec.numa_node = driver ? driver->numaNode(static_cast<int>(i)) : -1;
    rec.used = true;  // every GPU of the host: its memory moves over NVLink (or PCIe) copies
    out.devices.push_back(std::move(rec));
  }
  out.facts.emplace_back("streams per GPU", std::to_string(settings_.streams));
  out.facts.emplace_back("stripe size", std::to_string(settings_.stripe_size));
  out.facts.emplace_back("stream depth", std::to_string(settings_.stream_depth));
  if (const gpu::CudaDriver* d = gpu::CudaDriver::get(); d && !buses_.empty()) {
    // Whether the kernel loads here (once per process; it stays loaded).
    gpu::ContextScope scope(d, 0);
    gpu::cu::Function fn = nullptr;
    const Status k = scope.status().ok() ? gpu::copyKernel(d, 0, fn) : scope.status();
    out.facts.emplace_back("copy kernel", k.ok() ? std::string("loads on GPU 0 (windows of small runs: one launch each)")
                                                 : "not usable, windows copied run by run: " + k.message());
  }
  out.facts.emplace_back("waits", settings_.spin_wait ? "polling (nvlink.spin_wait)" : "sleeping in the driver");
  out.facts.emplace_back("issue", settings_.issue_inline ? "by the posting thread when the stream is idle (nvlink.issue_inline)"
                                                         : "by the stream's thread");
  out.facts.emplace_back("prepared plans' run lists kept on the GPU",
                         settings_.plan_cache ? fmt::format("up to {} bytes (nvlink.plan_cache)", settings_.plan_cache)
                                              : std::string("no (nvlink.plan_cache=0)"));
  out.facts.emplace_back("copy mechanism", fmt::format("{} (kernel for windows whose runs average under {} bytes, at "
                                                       "most {} CTAs a launch; gpu.copy_*)",
                                                       gpu::copyMechanismName(settings_.copy.mechanism),
                                                       settings_.copy.kernel_below,
                                                       settings_.copy.max_ctas ? std::to_string(settings_.copy.max_ctas)
                                                                               : std::string("all")));
  out.facts.emplace_back("peer liveness", "pidfd of the owner, passed over its socket (across pid namespaces); "
                                          "else by pid (kill(pid, 0) polled where pidfds are missing)");
  out.facts.emplace_back("socket", server_ ? server_->name() : "none");
  out.facts.emplace_back("socket scope", settings_.socket_dir.empty()
                                             ? "the abstract namespace: peers of this network namespace"
                                             : "the directory nvlink.socket_dir: peers that mount it");
  std::string vmm_why;
  const gpu::CudaDriver* drv = gpu::CudaDriver::get();
  out.facts.emplace_back("memory shared", drv && gpu::vmm::supported(drv, vmm_why)
                                              ? "cudaMalloc memory by legacy IPC handle (this pid namespace); CUDA "
                                                "virtual memory (cuMemCreate, POSIX fd handle type) by file "
                                                "descriptor over the socket (any pid namespace)"
                                              : "cudaMalloc memory by legacy IPC handle only: " + vmm_why);
}

Counters NvlinkTransport::stats() const {
  if (!counters_) return {};
  const nvlink::Counters& c = *counters_;
  Counters out = {{"exported_regions", c.exported_regions.load()},
          {"exported_allocations", c.exported_allocations.load()},
          {"vmm_exported", c.vmm_exported.load()},
          {"vmm_fds_passed", c.vmm_fds_passed.load()},
          {"vmm_imported", c.vmm_imported.load()},
          {"socket_peers", server_ ? server_->peers() : 0},
          {"socket_refused", server_ ? server_->refused() : 0},
          {"handles_opened", c.handles_opened.load()},
          {"handles_closed", c.handles_closed.load()},
          {"owner_deaths", c.owner_deaths.load()},
          {"slices_completed", c.slices_completed.load()},
          {"slices_failed", c.slices_failed.load()},
          {"bytes", c.bytes.load()},
          {"peer_copies", c.peer_copies.load()},
          {"withdrawn_refusals", c.withdrawn_refusals.load()},
          {"withdrawals_waited", c.withdrawals_waited.load()},
          {"plan_cache_hits", c.plan_cache_hits.load()},
          {"plan_cache_misses", c.plan_cache_misses.load()},
          {"plan_cache_bytes", c.plan_cache_bytes.load()},
          {"groups_issued", c.groups_issued.load()},
          {"groups_inline", c.groups_inline.load()},
          {"groups_polled", c.groups_polled.load()},
          {"group_queued_ns", c.group_queued_ns.load()},
          {"group_check_ns", c.group_check_ns.load()},
          {"group_launch_ns", c.group_launch_ns.load()},
          {"group_gpu_ns", c.group_gpu_ns.load()},
          {"group_end_ns", c.group_end_ns.load()}};
  c.copy.appendTo(out);
  return out;
}

std::unique_ptr<Transport> makeNvlinkTransport() { return std::make_unique<NvlinkTransport>(); }

}  // namespace hawser
