// The file transport itself: counters, settings (file.* keys), install and
// shutdown, engine choice, memory registration, segments (file:// names and
// peer handles), diagnose and stats. Sub-batches: file_sub_batch.cpp;
// slices in flight: file_inflight.cpp; open files: file_handles.cpp.
#include "transport/file/file_transport.h"

#include <sys/mman.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/log.h"
#include "base/peer_entry.h"
#include "base/segment_desc.h"
#include "transport/file/file_config.h"
#include "transport/file/cufile_engine.h"
#include "transport/file/file_handles.h"
#include "transport/file/gpu_staging.h"
#include "transport/file/file_inflight.h"
#include "transport/file/file_plan.h"
#include "transport/file/file_registration.h"
#include "base/file_info.h"
#include "transport/file/file_sub_batch.h"

// ThreadSanitizer: the discard buffer is written by many reads at once on
// purpose (nobody reads it); said once, where it is made.
#include "base/tsan.h"
#ifdef HAWSER_TSAN
extern "C" void AnnotateBenignRaceSized(const char* file, int line, const volatile void* mem, size_t size,
                                        const char* description);
#endif

namespace hawser {
namespace file {

// ---- counters ----------------------------------------------------------------------

namespace {

// Each counter once: its name in stats(), its FileStats field, its atomic.
struct CounterField {
  const char* name;
  uint64_t FileStats::*value;
  std::atomic<uint64_t> FileCounters::*live;
};
#define HAWSER_FILE_COUNTER(x) CounterField{#x, &FileStats::x, &FileCounters::x}
constexpr CounterField kCounterFields[] = {
    HAWSER_FILE_COUNTER(uring_ops),        HAWSER_FILE_COUNTER(posix_ops),
    HAWSER_FILE_COUNTER(direct_slices),    HAWSER_FILE_COUNTER(bounce_slices),
    HAWSER_FILE_COUNTER(buffered_slices),  HAWSER_FILE_COUNTER(fixed_buffer_ops),
    HAWSER_FILE_COUNTER(fixed_file_ops),   HAWSER_FILE_COUNTER(short_continuations),
    HAWSER_FILE_COUNTER(cancel_requests),  HAWSER_FILE_COUNTER(quarantined),
    HAWSER_FILE_COUNTER(quarantine_released), HAWSER_FILE_COUNTER(files_opened),
    HAWSER_FILE_COUNTER(files_open),
    HAWSER_FILE_COUNTER(direct_bytes),     HAWSER_FILE_COUNTER(bounce_bytes),
    HAWSER_FILE_COUNTER(buffered_bytes),   HAWSER_FILE_COUNTER(gpu_gds_slices),
    HAWSER_FILE_COUNTER(gpu_gds_bytes),    HAWSER_FILE_COUNTER(gpu_compat_slices),
    HAWSER_FILE_COUNTER(gpu_compat_bytes), HAWSER_FILE_COUNTER(gpu_staged_uring_slices),
    HAWSER_FILE_COUNTER(gpu_staged_uring_bytes), HAWSER_FILE_COUNTER(gpu_staged_posix_slices),
    HAWSER_FILE_COUNTER(gpu_staged_posix_bytes), HAWSER_FILE_COUNTER(cufile_ops),
    HAWSER_FILE_COUNTER(cufile_batches),   HAWSER_FILE_COUNTER(cufile_refused_files),
    HAWSER_FILE_COUNTER(coalesced_ios),    HAWSER_FILE_COUNTER(coalesced_runs),
    HAWSER_FILE_COUNTER(vectored_ios),
};
#undef HAWSER_FILE_COUNTER

}  // namespace

FileStats fileStatsOf(const Counters& named) {
  FileStats s;
  for (const auto& [name, v] : named)
    for (const auto& f : kCounterFields)
      if (name == f.name) s.*f.value = v;
  return s;
}

Counters FileTransport::stats() const {
  const FileCounters& c = *counters_;
  Counters out;
  for (const auto& f : kCounterFields) out.emplace_back(f.name, (c.*f.live).load());
  c.copy.appendTo(out);
  return out;
}

// ---- settings ----------------------------------------------------------------------

// Types, defaults and ranges: file_config.h (kFileKnobs); the
// one rule it cannot say (a multiple of the page) lives here.
Status FileTransport::loadSettings(const Config& config, FileSettings& out) {
  const FileConfig cfg(config);
  FileSettings st;
  uint32_t bufs = 0;
  Status s;
  if (!(s = cfg.getString("file.cufile", st.cufile)).ok() || !(s = cfg.getString("file.cufile_lib", st.cufile_lib)).ok() ||
      !(s = cfg.getInt("file.cufile_batch", st.cufile_batch)).ok() ||
      !(s = cfg.getInt("file.gpu_staging_buffers", st.gpu_staging_buffers)).ok())
    return s;
  if (!(s = cfg.getString("file.engine", st.engine)).ok() ||
      !(s = cfg.getInt("file.io_depth", st.io.io_depth)).ok() ||
      !(s = cfg.getSize("file.max_io_size", st.max_io_size)).ok() ||
      !(s = cfg.getBool("file.coalesce", st.coalesce)).ok() ||
      !(s = cfg.getSize("file.coalesce_gap", st.coalesce_gap)).ok() ||
      !(s = cfg.getInt("file.posix_threads", st.io.posix_threads)).ok() ||
      !(s = cfg.getInt("file.bounce_buffers", bufs)).ok() ||
      !(s = cfg.getDuration("file.cancel_grace_ms", st.cancel_grace)).ok() ||
      !(s = cfg.getBool("file.direct", st.direct)).ok() ||
      !(s = cfg.getBool("file.fixed_buffers", st.io.fixed_buffers)).ok() ||
      !(s = cfg.getBool("file.fixed_files", st.io.fixed_files)).ok() ||
      !(s = cfg.getBool("file.sqpoll", st.io.sqpoll)).ok())
    return s;
  if (st.max_io_size % kPage != 0)
    return {Code::kInvalidArgument,
            fmt::format("config file.max_io_size (env HAWSER_FILE_MAX_IO_SIZE) = {}: must be a multiple of 4096",
                        st.max_io_size)};
  st.bounce_buffers = bufs == 0 ? st.io.io_depth : bufs;  // 0: one per io_uring slot
  out = std::move(st);
  return Status::OK();
}

// ---- lifecycle -----------------------------------------------------------------------

FileTransport::FileTransport()
    : peers_(std::make_shared<PeerSet>(counters_)), inflight_(std::make_unique<Inflight>(counters_)) {}

TransportCaps FileTransport::caps() const {
  TransportCaps c;
  c.file_segments = true;
  c.local_memory = kHostMemory | kGpuMemory;  // GPU: cuFile, else pinned staging
  c.cost_rank = 50;
  c.segment_scheme = "file://";
  c.run_windows = true;  // block requests: windows of runs, no task per run (FileSubBatch::prepareRuns)
  // Local I/O. GPU memory: staging or cuFile's compat mode, so no_staging
  // is not promised; GPUDirect Storage is a route of its own, "gds"
  // (variant(), file_gpu.cpp).
  c.host_properties = kNoStaging | kSameHost;
  c.gpu_properties = kSameHost;
  return c;
}

Status FileTransport::install(const TransportContext& ctx) {
  server_name_ = ctx.server_name;
  static const Config empty;
  Status s = loadSettings(ctx.config ? *ctx.config : empty, settings_);
  if (!s.ok()) return s;
  if (!(s = gpu::CopySettings::fromConfig(ctx.config ? *ctx.config : empty, copy_settings_)).ok()) return s;
  if (settings_.coalesce && settings_.coalesce_gap > 0) {
    // Reserved, not touched: pages appear only where a gap is read (by DMA
    // or a page-cache copy), and their contents never matter.
    discard_len_ = alignUp(settings_.coalesce_gap, kPage);
    void* p = ::mmap(nullptr, discard_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return {Code::kInternal, fmt::format("file.coalesce_gap: cannot map {} bytes for the gaps reads pass through: {}",
                                           discard_len_, std::strerror(errno))};
    discard_ = p;
#ifdef HAWSER_TSAN
    AnnotateBenignRaceSized(__FILE__, __LINE__, p, discard_len_, "file: gaps read and dropped by concurrent reads");
#endif
  }
  if (settings_.engine == "posix") {
    uring_note_ = "not tried (file.engine=posix)";
  } else {
    s = makeUringEngine(settings_.io, counters_, uring_);
    if (!s.ok()) {
      if (settings_.engine == "uring")
        return {Code::kNotSupported, fmt::format("file.engine=uring but io_uring is unavailable: {}", s.message())};
      HLOG_INFO("file: io_uring unavailable ({}); using the POSIX engine", s.message());
      uring_note_ = "unavailable: " + s.message();
      uring_.reset();
    } else {
      s = uring_->start([this](std::span<const IoCompletion> cs) { inflight_->onComplete(cs); });
      if (!s.ok()) return s;
    }
  }
  inflight_->configure(uring_.get(), settings_.cancel_grace, settings_.max_io_size + 2 * kPage,
                       settings_.bounce_buffers);
  inflight_->startWatchdog();
  fallback_ = ctx.fallback;
  // What GPUDirect is to be expected of, without opening cuFile's driver.
  if (settings_.cufile != "off") setGdsState(forecastCufile(settings_.cufile_lib));
  installed_ = true;
  HLOG_INFO("file: engine={} io_depth={} max_io_size={} direct={} bounce_buffers={} coalesce={} coalesce_gap={}",
            uring_ ? "uring" : "posix", settings_.io.io_depth, settings_.max_io_size, settings_.direct,
            settings_.bounce_buffers, settings_.coalesce, settings_.coalesce_gap);
  return Status::OK();
}

IoEngine* FileTransport::posixEngine() {
  std::lock_guard lk(posix_mu_);
  if (!posix_) {
    posix_ = makePosixEngine(settings_.io);
    (void)posix_->start([this](std::span<const IoCompletion> cs) { inflight_->onComplete(cs); });
  }
  return posix_.get();
}

IoEngine* FileTransport::engineFor(bool direct) {
  if (settings_.engine == "posix" || !uring_) return posixEngine();
  if (settings_.engine == "uring") return uring_.get();
  return direct ? uring_.get() : posixEngine();  // auto: the page cache path goes to pread/pwrite
}

void FileTransport::shutdown() {
  if (!installed_ || down_.exchange(true)) return;
  {
    // What the engines set up goes with them (cuFile deregisters its
    // buffers as it stops): no registration is used from here on.
    std::lock_guard lk(regions_mu_);
    for (auto& [a, r] : regions_) r->deregistered.store(true, std::memory_order_release);
    regions_.clear();
  }
  inflight_->cancelAll("the engine is shutting down");
  inflight_->waitDrained(settings_.cancel_grace + std::chrono::seconds(2));
  size_t left = 0;
  if (uring_) left += uring_->stop(std::chrono::seconds(2));
  {
    std::lock_guard lk(posix_mu_);
    if (posix_) left += posix_->stop(std::chrono::seconds(2));
  }
  if (staging_) staging_->stop();  // after the drain: no copy is queued any more
  joinCufileOpener();  // cuFileDriverOpen cannot be interrupted: it ends first
  if (cufile_) left += cufile_->stop(std::chrono::seconds(2));
  inflight_->stopWatchdog();
  if (left > 0) {
    // The kernel may still write into bounce buffers, sub-batches and user
    // memory: keep everything (engines, buffers, descriptors) for good.
    leak_engines_ = true;
    inflight_->leak();
    peers_->closeAll(/*leak=*/true);
    HLOG_ERROR("file: {} I/O(s) never ended; engines, bounce buffers and open files are quarantined for the life "
               "of the process",
               left);
    return;
  }
  peers_->closeAll(/*leak=*/false);
}

FileTransport::~FileTransport() {
  shutdown();
  inflight_.reset();  // quarantined sub-batches and bounce buffers (or leaks them)
  peers_->closeAll(leak_engines_);  // descriptors of peers that outlive the transport
  if (leak_engines_) {
    (void)uring_.release();
    (void)posix_.release();
    (void)cufile_.release();
    (void)staging_.release();
    return;  // the discard buffer too: the kernel may still read gaps into it
  }
  if (discard_) ::munmap(discard_, discard_len_);
  staging_.reset();
  cufile_.reset();
  uring_.reset();
  posix_.reset();
}

void FileTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  attrs["engine"] = uring_ ? (settings_.engine == "auto" ? "uring+posix" : "uring") : "posix";
  attrs["io_depth"] = settings_.io.io_depth;
  attrs["max_io_size"] = settings_.max_io_size;
  attrs["coalesce"] = settings_.coalesce;
  attrs["coalesce_gap"] = settings_.coalesce_gap;
  attrs["cufile"] = settings_.cufile;
  attrs["aliases"] = nlohmann::json::array({"nvmeof"});
}

// ---- memory --------------------------------------------------------------------------

Status FileTransport::registerRegion(const Region& region, nlohmann::json&, std::shared_ptr<const Registration>& out) {
  auto reg = std::make_shared<FileRegistration>();
  reg->addr = region.addr;
  reg->length = region.length;
  reg->gpu = region.gpu;
  // Host memory may get io_uring fixed buffers (nothing is pinned now);
  // whatever the kernel refuses just goes through plain reads/writes.
  if (reg->gpu < 0 && uring_) reg->fixed = uring_->addMemory(reinterpret_cast<void*>(region.addr), region.length, -1);
  {
    // Under the lock: a cuFile engine that opens meanwhile queues every GPU
    // region it finds here (openCufile), so each is queued exactly once.
    std::lock_guard lk(regions_mu_);
    if (reg->gpu >= 0)
      if (CufileEngine* cf = cufile_ptr_.load()) attachCufile(*reg, *cf);  // queued: returns at once
    regions_[region.addr] = reg;
  }
  out = std::move(reg);
  return Status::OK();
}

Status FileTransport::unregisterMemory(void* addr, size_t) {
  std::shared_ptr<FileRegistration> reg;
  CufileEngine* cf = nullptr;
  {
    std::lock_guard lk(regions_mu_);
    auto it = regions_.find(reinterpret_cast<uint64_t>(addr));
    if (it == regions_.end()) return Status::OK();
    reg = std::move(it->second);
    regions_.erase(it);
    cf = cufile_ptr_.load();
  }
  // Tasks and plans may still hold the registration: from here on prepare
  // refuses them.
  reg->deregistered.store(true, std::memory_order_release);
  if (reg->fixed && uring_) uring_->removeMemory(*reg->fixed);
  // Drops a cuFile registration still queued, or waits for one running and
  // deregisters it: the caller may free the memory once this returns.
  if (EngineMemory* m = reg->cufile.load(std::memory_order_acquire); m && cf) cf->removeMemory(*m);
  return Status::OK();
}

// ---- segments --------------------------------------------------------------------------

Status FileTransport::resolveSegment(const std::string& name, SegmentDesc& out) {
  const std::string scheme = caps().segment_scheme;
  if (name.rfind(scheme, 0) != 0)
    return {Code::kInvalidArgument, fmt::format("segment '{}' is not a {} name", name, scheme)};
  std::string path = name.substr(scheme.size());
  if (path.empty() || path[0] != '/')
    return {Code::kInvalidArgument, fmt::format("segment '{}': a file:// path must be absolute", name)};
  uint64_t bytes = 0;
  Status s = fileSize(path, bytes);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", name, s.message())};
  out = SegmentDesc{};
  out.kind = SegmentDesc::Kind::kFile;
  out.name = name;
  FileDesc f;
  f.file_path = path;
  f.length = bytes;
  out.files.push_back(std::move(f));
  return Status::OK();
}

Status decodePeerDesc(const SegmentDesc& seg, RouteDecline& why) {
  why = {};
  if (seg.kind != SegmentDesc::Kind::kFile)
    return declined(why, RouteReason::kRefused,
                    {Code::kNotSupported, fmt::format("segment '{}' is not a file segment", seg.name)});
  return Status::OK();
}

Status FileTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  if (!installed_ || down_.load()) return transportNotRunning("file", why);
  Status s = decodePeerDesc(seg, why);
  if (!s.ok()) return s;
  out = std::make_shared<FilePeer>(seg, server_name_, peers_);
  return Status::OK();
}

Status FileTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<FileSubBatch>(this);
  return Status::OK();
}

// ---- doctor ----------------------------------------------------------------------------

void FileTransport::diagnose(TransportDiagnosis& out) const {
  out.facts.emplace_back("file.engine", settings_.engine);
  if (installed_) {
    out.facts.emplace_back("engine in use", uring_ ? (settings_.engine == "auto" ? "uring (page-cache files: posix)"
                                                                                 : "uring")
                                                   : "posix");
    out.facts.emplace_back("io_uring", uring_ ? "usable" : uring_note_);
  } else {
    out.facts.emplace_back("io_uring", uringCompiledIn() ? "not set up" : "not in this build");
  }
  DeviceRecord uring;
  uring.kind = DeviceRecord::Kind::kIoUring;
  uring.name = "io_uring";
  uring.used = installed_ && uring_;
  if (!uringCompiledIn()) {
    uring.mode = "absent";
    uring.reason = "not in this build";
  } else if (uring.used) {
    uring.mode = "usable";
  } else if (settings_.engine == "posix") {
    uring.mode = "off";
    uring.reason = "file.engine=posix";
  } else {
    uring.mode = "unavailable";
    uring.reason = installed_ ? uring_note_ : std::string("the file transport is not installed");
  }
  out.devices.push_back(std::move(uring));
  const char* tmp = std::getenv("TMPDIR");
  out.facts.emplace_back("O_DIRECT", settings_.direct ? probeDirectIo(tmp && *tmp ? tmp : "/tmp")
                                                      : "off (file.direct=false)");
  out.facts.emplace_back("max I/O size", std::to_string(settings_.max_io_size));
  out.facts.emplace_back("coalescing", settings_.coalesce
                                           ? fmt::format("on: runs of one window share I/Os up to the max I/O size; "
                                                         "reads pass through gaps of up to {} bytes (file.coalesce_gap)",
                                                         settings_.coalesce_gap)
                                           : "off (file.coalesce=false): one I/O per run");
  out.facts.emplace_back("io depth", std::to_string(settings_.io.io_depth));
  out.facts.emplace_back("bounce buffers", std::to_string(settings_.bounce_buffers));
  out.facts.emplace_back("posix threads", std::to_string(settings_.io.posix_threads));
  out.facts.emplace_back("cancel grace ms", std::to_string(settings_.cancel_grace.count()));
  diagnoseGpu(out, tmp && *tmp ? tmp : "/tmp");
}

}  // namespace file

std::unique_ptr<Transport> makeFileTransport() { return std::make_unique<file::FileTransport>(); }

Status decodeFilePeer(const SegmentDesc& seg, RouteDecline& why) { return file::decodePeerDesc(seg, why); }

}  // namespace hawser
