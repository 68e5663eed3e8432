// The file transport ("file", alias "nvmeof"): file segments (backing files
// concatenated into one logical space) read and written through an I/O
// engine (io_uring or POSIX), and for GPU memory through cuFile or pinned
// staging buffers (file_gpu.cpp).
// The engine reaches the transport through makeFileTransport().
//
// This header: the transport class and its settings. Its counters are its
// own (file_counters.h), shared with the parts that count.
//
// Files, one concept each:
//   file_transport.cpp  install, settings, peers (openPeer, file:// names), stats, diagnose
//   file_counters.h     the transport's counters, shared with its parts
//   file_sub_batch.*    the sub-batch verbs: prepare (validate, open, group runs into I/Os), post, cancel, idle
//   file_inflight.*     I/Os in flight and their slices: one-based cookies, completions, cancel, quarantine
//   file_coalesce.*     pure: a window's runs into I/Os sized by the disk, and their iovecs
//   file_handles.*      a segment's files as this host sees them, and their cached open descriptors
//   bounce_pool.*       aligned bounce buffers for O_DIRECT I/O of unaligned memory
//   file_plan.*         pure slicing (no I/O); io_engine.h + uring/posix_engine.cpp: the I/O engines
//   file_registration.h what registering a region set up (GPU, fixed buffers, cuFile), carried by its tasks
//   file_gpu.cpp        GPU memory: cuFile or staging per file (the fallback rule), doctor facts
//   cufile_library.*    libcufile loaded at run time, its driver opened, its mode (cufile_api.h: its ABI)
//   cufile_engine.*     the cuFile batch engine over a loaded library
//   cufile_buffers.*    GPU buffers registered with cuFile in the background
//   gpu_staging.*       pinned staging slots and the pipelined GPU copy lanes
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/transport.h"
#include "gpu/batch_copy.h"
#include "transport/file/file_counters.h"
#include "transport/file/io_engine.h"

namespace hawser {
// file::decodePeerDesc as the engine's list of transports names it (beside
// the factory, makeFileTransport; engine/transport_list.h).
Status decodeFilePeer(const SegmentDesc& seg, RouteDecline& why);
}  // namespace hawser

namespace hawser::file {

// The descriptor decoder: a file segment is all the file transport needs
// (each file's path is resolved for this host by FilePeer); kNotSupported
// "segment '<seg>' is not a file segment" (reason kRefused) otherwise.
Status decodePeerDesc(const SegmentDesc& seg, RouteDecline& why);

class Inflight;
class PeerSet;
struct FileRegistration;
class FileSubBatch;
class CufileEngine;
class FilePeer;
class GpuStaging;
struct OpenFile;
enum class Route : uint8_t;

// The file counters among `named` (a file transport's stats(), or its
// entry in an engine's stats), by name; those not there read 0.
FileStats fileStatsOf(const Counters& named);

// Every file.* key (docs/file.md has the table).
struct FileSettings {
  std::string engine = "auto";                   // file.engine: auto | uring | posix
  bool direct = true;                            // file.direct: O_DIRECT where the file system does it
  uint64_t max_io_size = 1 << 20;                // file.max_io_size (a multiple of 4096)
  bool coalesce = true;                          // file.coalesce: runs of one window share large I/Os
  uint64_t coalesce_gap = 16 << 10;              // file.coalesce_gap: reads read through gaps up to this
  uint32_t bounce_buffers = 32;                  // file.bounce_buffers (default: file.io_depth)
  std::chrono::milliseconds cancel_grace{1000};  // file.cancel_grace_ms
  std::string cufile = "auto";                   // file.cufile: auto | on | off
  std::string cufile_lib = "libcufile.so.0";     // file.cufile_lib
  uint32_t cufile_batch = 128;                   // file.cufile_batch
  uint32_t gpu_staging_buffers = 16;             // file.gpu_staging_buffers
  // file.io_depth, file.posix_threads, file.fixed_buffers, file.fixed_files, file.sqpoll
  IoEngineOptions io;
};

class FileTransport final : public Transport {
 public:
  FileTransport();
  ~FileTransport() override;

  const char* name() const override { return "file"; }
  TransportCaps caps() const override;
  // kNotSupported only when file.engine=uring and io_uring is unusable here;
  // a bad file.* value is kInvalidArgument naming the key and the value.
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;

  // Returns a FileRegistration (file_registration.h), which the engine
  // hands back with every task and window of runs in the region. Host
  // memory gets io_uring fixed buffers (registered piece by piece as I/O
  // first touches them) when it can; GPU memory (Region::gpu) is
  // registered with cuFile (cuFileBufRegister) in the background once cuFile
  // is open, which the first GPU <-> file transfer starts (file.cufile
  // auto/on): neither blocks the caller (file_gpu.cpp).
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override;
  // Marks the region's registration torn down (tasks still holding it are
  // refused at prepare), then drops its fixed buffers and cuFile registration.
  Status unregisterMemory(void* addr, size_t length) override;

  // "file://ABS_PATH": one backing file, its length the file's (or block
  // device's) size now.
  Status resolveSegment(const std::string& name, SegmentDesc& out) override;
  // Resolves each backing file's path for this host once; the handle caches
  // the files' open descriptors and closes them when it goes.
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;

  void diagnose(TransportDiagnosis& out) const override;
  Counters stats() const override;

  // GPUDirect Storage as a route of its own ("gds", file_gpu.cpp): GPU
  // memory <-> files without host staging. Offered unless file.cufile=off;
  // declined for a peer (a fallback to "file": staging or cuFile's compat
  // mode) where the library is absent or runs in compat mode, or one of the
  // segment's files cannot take it.
  bool variant(TransportVariant& out) const override;
  RouteDecline variantDeclines(const PeerHandle& peer) const override;
  RouteDecline lacks(uint32_t property, uint32_t kinds) const override;

  const FileSettings& settings() const { return settings_; }
  // Reads and validates every file.* key of `config`.
  static Status loadSettings(const Config& config, FileSettings& out);

 private:
  friend class FileSubBatch;
  // The engine for a descriptor opened with (or without) O_DIRECT.
  IoEngine* engineFor(bool direct);
  IoEngine* posixEngine();  // started on first use

  // ---- GPU memory (file_gpu.cpp) ----
  // Starts loading cuFile and its engine on cufile_opener_, once
  // (file.cufile auto/on), at the first transfer that needs it.
  void startCufile();
  void openCufile();  // on cufile_opener_
  void joinCufileOpener();  // at shutdown (down_ set): no opener starts after
  // The cuFile engine, or nullptr (then `why` says why); waits for the
  // library to open when that is under way.
  CufileEngine* cufileEngine(std::string* why = nullptr);
  // Pinned staging slots and copy lanes, made on first need.
  Status ensureStaging();
  size_t stagingSlotSize() const;
  // How GPU slices reach `f`: cuFile when its handle registers, else staged
  // (logged once per file) -- or, with file.cufile=on, an error.
  Status gpuRoute(FilePeer& peer, OpenFile& f, CufileEngine* cf, Route& out);
  // GPUDirect as a route: the library's state (a forecast until its driver
  // opens, then what it found), published for lock-free reads; every state
  // is kept until the transport goes (a few per process).
  void setGdsState(RouteDecline d);
  // A GPU I/O to `peer` found out, as it started, that GPUDirect is not to
  // be had (`why`): told to the engine as a fallback (ctx.fallback).
  void gdsFellBack(const FilePeer& peer, const RouteDecline& why);
  void noteFallback(const std::string& path, const std::string& why, bool warn);
  // Under regions_mu_: queues `r` (GPU memory) for cuFile's registration.
  static void attachCufile(FileRegistration& r, CufileEngine& cf);
  void diagnoseGpu(TransportDiagnosis& out, const std::string& dir) const;
  // cuFile's typed record: its mode (gds / compat / absent / off) and whether GPU I/O uses it.
  DeviceRecord cufileRecord() const;

  FileSettings settings_;
  std::string server_name_;
  std::string uring_note_;  // why io_uring is not in use ("" when it is)
  bool installed_ = false;
  std::atomic<bool> down_{false};
  // This transport's counters (stats()), shared with the parts that count;
  // made first, so every part below can take it.
  std::shared_ptr<FileCounters> counters_ = std::make_shared<FileCounters>();

  // Engines outlive everything below them (descriptors unregister from them).
  std::unique_ptr<IoEngine> uring_;
  std::unique_ptr<IoEngine> posix_;
  std::mutex posix_mu_;
  bool leak_engines_ = false;

  // GPU: cuFile (its engine outlives the descriptors too) and staging.
  std::mutex gpu_mu_;
  std::condition_variable cufile_cv_;  // cufile_opening_ ended
  bool cufile_tried_ = false;
  bool cufile_opening_ = false;
  std::thread cufile_opener_;
  std::string cufile_note_;  // why cuFile is not in use ("" when it is)
  std::unique_ptr<CufileEngine> cufile_;
  std::atomic<CufileEngine*> cufile_ptr_{nullptr};
  gpu::CopySettings copy_settings_;  // gpu.copy_*: how staging copies a window of runs
  std::unique_ptr<GpuStaging> staging_;
  std::atomic<bool> staging_ready_{false};
  // Every registration by start address, for teardown only (unregister,
  // cuFile opening, shutdown): the data path reads the task's.
  std::mutex regions_mu_;
  std::map<uint64_t, std::shared_ptr<FileRegistration>> regions_;
  std::mutex fallback_mu_;
  std::set<std::string> fallback_logged_;
  std::atomic<const RouteDecline*> gds_state_{nullptr};
  std::vector<std::unique_ptr<RouteDecline>> gds_states_;  // under gpu_mu_
  std::function<void(const std::string&, const std::string&, const std::string&, const RouteDecline&)> fallback_;

  // Where reads put the gaps they read through (file.coalesce_gap bytes,
  // page-aligned, never read): shared by every I/O, made at install.
  void* discard_ = nullptr;
  size_t discard_len_ = 0;

  std::shared_ptr<PeerSet> peers_;
  std::unique_ptr<Inflight> inflight_;
};

}  // namespace hawser::file
