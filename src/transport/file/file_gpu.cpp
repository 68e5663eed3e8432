// The file transport's GPU side: cuFile (library, engine, file handles, the
// fallback rule, GPU regions' buffer registration), staging, and what the
// doctor says of them. Which memory is GPU memory comes with each task and
// window (FileRegistration::gpu, file_registration.h).
// Slices themselves: file_sub_batch.cpp (which path) and file_inflight.cpp.
//
// The rule, per descriptor a GPU I/O needs:
//   file.cufile=off  -> staged (io_uring/POSIX into pinned slots + GPU copies);
//   file.cufile=on   -> cuFile, or the request is refused (kNotSupported) when
//                       the library is absent or refuses the file;
//   file.cufile=auto -> cuFile when the library loads, runs GPUDirect (not
//                       compat mode) and registers the file
//                       (cuFileHandleRegister), else staged, logged once per file.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/file/cufile_engine.h"
#include "transport/file/file_handles.h"
#include "transport/file/file_inflight.h"
#include "transport/file/file_plan.h"
#include "transport/file/file_registration.h"
#include "transport/file/file_transport.h"
#include "transport/file/gpu_staging.h"

namespace hawser::file {

namespace {

// For a refusal: what the doctor would say of the file's device.
std::string udevHint(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "";
  const unsigned maj = major(st.st_dev), min = minor(st.st_dev);
  if (maj == 0) return fmt::format(" (device {}:{} is not a block device: tmpfs or similar)", maj, min);
  return fmt::format(" (cuFile needs a udev record /run/udev/data/b{}:{} with E:ID_FS_USAGE=filesystem for this "
                     "file's device; `hawser doctor` explains)",
                     maj, min);
}

}  // namespace

// Nothing of cuFile runs at registration: the library opens at the first
// transfer that needs it (cufileEngine()), and buffers register in the
// background (cufile_buffers.h).
void FileTransport::attachCufile(FileRegistration& r, CufileEngine& cf) {
  r.setCufile(cf.addMemory(reinterpret_cast<void*>(r.addr), r.length, r.gpu));
}

void FileTransport::startCufile() {
  std::lock_guard lk(gpu_mu_);
  if (cufile_tried_ || !installed_ || down_.load()) return;
  cufile_tried_ = true;
  if (settings_.cufile == "off") {
    cufile_note_ = "not used (file.cufile=off)";
    return;
  }
  // cuFileDriverOpen takes half a second to a second, and while it runs (and
  // while cuFileBufRegister runs) the CUDA driver holds back other GPU
  // copies of the process: opened only when a transfer needs cuFile, on a
  // thread of its own; that transfer waits for it (cufileEngine()).
  cufile_opening_ = true;
  cufile_opener_ = std::thread([this] { openCufile(); });
}

void FileTransport::openCufile() {
  std::string why;
  std::unique_ptr<CufileEngine> engine;
  if (const CufileLibrary* lib = CufileLibrary::load(settings_.cufile_lib, why)) {
    engine = makeCufileEngine(*lib, settings_.io.io_depth, settings_.cufile_batch, counters_);
    Status s = engine->start([this](std::span<const IoCompletion> cs) { inflight_->onComplete(cs); });
    if (s.ok()) {
      inflight_->setCufileMode(lib->gds());
    } else {
      why = "cuFile engine did not start: " + s.message();
      engine.reset();
    }
  } else if (settings_.cufile == "on") {
    HLOG_ERROR("file: file.cufile=on but {}: GPU memory <-> file requests will be refused", why);
  } else {
    HLOG_INFO("file: {}; GPU memory <-> files goes through pinned staging buffers", why);
  }
  RouteDecline gds;
  if (engine) {
    gds = engine->library().decline();
    // Every GPU region registered so far, queued for cuFileBufRegister
    // before the engine is published (registerRegion queues later ones).
    std::lock_guard lk(regions_mu_);
    for (const auto& [a, r] : regions_)
      if (r->gpu >= 0) attachCufile(*r, *engine);
    cufile_ = std::move(engine);
    cufile_ptr_.store(cufile_.get());
  } else {
    gds = {RouteReason::kNotInstalled, why};
  }
  {
    std::lock_guard lk(gpu_mu_);
    cufile_note_ = why;
    cufile_opening_ = false;
    setGdsState(std::move(gds));  // the forecast replaced by what the open found
  }
  cufile_cv_.notify_all();
}

void FileTransport::joinCufileOpener() {
  std::thread opener;
  {
    std::lock_guard lk(gpu_mu_);
    opener = std::move(cufile_opener_);
  }
  if (opener.joinable()) opener.join();
}

CufileEngine* FileTransport::cufileEngine(std::string* why) {
  if (CufileEngine* cf = cufile_ptr_.load()) return cf;
  startCufile();
  std::unique_lock lk(gpu_mu_);
  cufile_cv_.wait(lk, [&] { return !cufile_opening_; });
  CufileEngine* cf = cufile_ptr_.load();
  if (!cf && why) *why = cufile_note_;
  return cf;
}

Status FileTransport::ensureStaging() {
  if (staging_ready_.load()) return Status::OK();
  std::lock_guard lk(gpu_mu_);
  if (staging_) return Status::OK();
  auto st = std::make_unique<GpuStaging>(counters_);
  Status s = st->init(settings_.gpu_staging_buffers, settings_.max_io_size + 2 * kPage, uring_.get(), copy_settings_,
                      [this](uint64_t cookie, const Status& r) { inflight_->onCopyDone(cookie, r); });
  if (!s.ok()) return {s.code(), "GPU staging buffers (file.gpu_staging_buffers): " + s.message()};
  inflight_->setStaging(st.get());
  staging_ = std::move(st);
  staging_ready_.store(true);
  return Status::OK();
}

size_t FileTransport::stagingSlotSize() const { return settings_.max_io_size + 2 * kPage; }

void FileTransport::noteFallback(const std::string& path, const std::string& why, bool warn) {
  {
    std::lock_guard lk(fallback_mu_);
    if (!fallback_logged_.insert(path).second) return;
  }
  if (warn)
    HLOG_WARN("file: GPU I/O of '{}' goes through pinned staging buffers: {}", path, why);
  else
    HLOG_INFO("file: GPU I/O of '{}' goes through pinned staging buffers: {}", path, why);
}

void FileTransport::setGdsState(RouteDecline d) {
  gds_states_.push_back(std::make_unique<RouteDecline>(std::move(d)));
  gds_state_.store(gds_states_.back().get(), std::memory_order_release);
}

bool FileTransport::variant(TransportVariant& out) const {
  if (!installed_ || settings_.cufile == "off") return false;
  out.name = "gds";
  TransportCaps& c = out.caps;
  c.file_segments = true;
  c.local_memory = kGpuMemory;
  c.cost_rank = caps().cost_rank - 5;  // cheaper than staging, the same transport
  c.run_windows = true;
  // The NVMe's DMA moves the bytes between the disk and GPU memory.
  c.gpu_properties = kZeroCopy | kNoStaging | kSameHost;
  return true;
}

RouteDecline FileTransport::variantDeclines(const PeerHandle& peer) const {
  // The process first (the library absent or in compat mode), then the segment's files.
  if (const RouteDecline* d = gds_state_.load(std::memory_order_acquire); d && d->declined()) return *d;
  return static_cast<const FilePeer&>(peer).gdsDecline();
}

RouteDecline FileTransport::lacks(uint32_t property, uint32_t kinds) const {
  if ((kinds & kGpuMemory) && (property == kNoStaging || property == kZeroCopy))
    return {RouteReason::kNone,
            settings_.cufile == "off"
                ? "file.cufile=off: GPU memory <-> files goes through pinned staging buffers (file.cufile=auto takes "
                  "GPUDirect Storage, route gds, where it can)"
                : "file moves GPU memory through host buffers (staging, or cuFile's compatibility mode)"};
  return Transport::lacks(property, kinds);
}

void FileTransport::gdsFellBack(const FilePeer& peer, const RouteDecline& why) {
  if (fallback_) fallback_(peer.segment(), "gds", name(), why);
}

Status FileTransport::gpuRoute(FilePeer& peer, OpenFile& f, CufileEngine* cf, Route& out) {
  out = Route::kStaged;
  if (settings_.cufile == "off") return Status::OK();
  if (!cf) {
    std::string why;
    (void)cufileEngine(&why);
    if (settings_.cufile == "on")
      return {Code::kNotSupported, fmt::format("file.cufile=on but cuFile is unavailable: {}", why)};
    noteFallback(f.path, why, false);
    return Status::OK();
  }
  std::lock_guard lk(f.cufile_mu);
  if (!f.cufile_tried) {
    f.cufile_tried = true;
    int token = -1;
    Status s = static_cast<CufileEngine*>(cf)->registerFile(f.fd, token);
    if (s.ok()) {
      f.cufile = cf;
      f.cufile_token = token;
    } else {
      f.cufile_refusal = Status(s.code(), s.message() + udevHint(f.fd));
      counters_->cufile_refused_files++;
      // Found only now: no GPUDirect for this segment from here on.
      peer.refuseGds({RouteReason::kUnsupportedFile,
                      fmt::format("cuFile refuses '{}': {}", f.path, f.cufile_refusal.message())});
    }
  }
  if (f.cufile_token >= 0) {
    // In compat mode the library does POSIX I/O into its own bounce buffers
    // and copies to the GPU, one entry (one run) at a time: staging does
    // the same with I/Os sized by the disk and one batched copy per I/O.
    if (settings_.cufile == "auto" && !cf->library().gds()) {
      noteFallback(f.path,
                   "cuFile's mode is " + cf->library().mode() +
                       ": staging moves the same bytes in large I/Os with one batched GPU copy each (file.cufile=on "
                       "keeps cuFile)",
                   false);
      return Status::OK();
    }
    out = Route::kCufile;
    return Status::OK();
  }
  if (settings_.cufile == "on")
    return {Code::kNotSupported,
            fmt::format("file.cufile=on but cuFile refuses '{}': {}", f.path, f.cufile_refusal.message())};
  noteFallback(f.path, "cuFile refuses it: " + f.cufile_refusal.message(), true);
  return Status::OK();
}

DeviceRecord FileTransport::cufileRecord() const {
  DeviceRecord rec;
  rec.kind = DeviceRecord::Kind::kCuFile;
  rec.name = settings_.cufile_lib;
  if (settings_.cufile == "off") {
    rec.mode = "off";
    rec.reason = "file.cufile=off";
    return rec;
  }
  // What the driver's open found, else the forecast (install's, or now).
  const RouteDecline* state = gds_state_.load(std::memory_order_acquire);
  const RouteDecline d = state ? *state : forecastCufile(settings_.cufile_lib);
  if (!d.declined())
    rec.mode = "gds";
  else if (d.reason == RouteReason::kCompatMode)
    rec.mode = "compat";
  else
    rec.mode = "absent";
  // Compat mode serves GPU memory only where file.cufile=on asks for cuFile.
  rec.used = installed_ && (rec.mode == "gds" || (rec.mode == "compat" && settings_.cufile == "on"));
  if (!rec.used)
    rec.reason = !installed_ ? std::string("the file transport is not installed")
                 : rec.mode == "compat" ? d.text + " (file.cufile=auto stages GPU I/O instead)"
                                        : d.text;
  return rec;
}

void FileTransport::diagnoseGpu(TransportDiagnosis& out, const std::string& dir) const {
  out.devices.push_back(cufileRecord());
  out.facts.emplace_back("file.cufile", settings_.cufile);
  const CufileProbe p = probeCufile(settings_.cufile_lib, dir);
  out.facts.emplace_back("cuFile library", settings_.cufile == "off" ? "not used (file.cufile=off)" : p.library);
  out.facts.emplace_back("nvidia-fs", p.nvidia_fs);
  out.facts.emplace_back("cuFile udev record", p.udev);
  out.facts.emplace_back("GPU paths",
                         "GPU memory <-> files: cuFile where the library loads, runs GPUDirect (nvidia-fs) and "
                         "registers the file (one batch entry per run); otherwise io_uring/POSIX into pinned staging "
                         "slots, one large I/O and one batched GPU copy per slot (file.cufile=on: cuFile in compat "
                         "mode too, and refuses where cuFile cannot)");
  if (const RouteDecline* d = gds_state_.load(std::memory_order_acquire))
    out.facts.emplace_back("route gds", d->declined()
                                            ? fmt::format("unavailable: {}: {} (GPU requests to files are counted as "
                                                          "fallbacks gds -> file; docs/routes.md)",
                                                          routeReasonName(d->reason), d->text)
                                            : "GPUDirect Storage expected (confirmed when cuFile's driver opens at "
                                              "the first GPU <-> file transfer; per file at its first GPU I/O)");
  else
    out.facts.emplace_back("route gds", settings_.cufile == "off" ? "not offered (file.cufile=off)" : "not set up");
  out.facts.emplace_back("GPU staging", fmt::format("{} slots of {} bytes (file.gpu_staging_buffers)",
                                                    settings_.gpu_staging_buffers, stagingSlotSize()));
  out.facts.emplace_back("cuFile batch", fmt::format("at most {} entries (file.cufile_batch; clamped to the "
                                                     "library's max_batch_io_size), {} in flight (file.io_depth)",
                                                     settings_.cufile_batch, settings_.io.io_depth));
}

}  // namespace hawser::file
