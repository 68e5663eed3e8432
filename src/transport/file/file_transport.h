// The file transport ("file", alias "nvmeof"): file segments (backing files
// concatenated into one logical space) read and written through an I/O
// engine (io_uring or POSIX; a cuFile engine can slot in behind IoEngine).
// The engine reaches the transport through makeFileTransport().
//
// This header: the transport class, its settings, and the process-wide
// counters (for tests, stats() and `hawser doctor`).
//
// Files, one concept each:
//   file_transport.cpp  install, settings, peers (openPeer, file:// names), stats, diagnose
//   file_sub_batch.*    the sub-batch verbs: prepare (validate, open, cut), post, cancel, idle
//   file_inflight.*     slices in flight: one-based cookies, completions, cancel, quarantine, watchdog
//   file_handles.*      a segment's files as this host sees them, and their cached open descriptors
//   bounce_pool.*       aligned bounce buffers for O_DIRECT I/O of unaligned memory
//   file_plan.*         pure slicing (no I/O); io_engine.h + uring/posix_engine.cpp: the I/O engines
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/transport.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

struct FileStats {
  uint64_t uring_ops = 0;          // ops issued through an io_uring engine
  uint64_t posix_ops = 0;          // ops issued through a POSIX engine
  uint64_t direct_slices = 0;      // slices straight between user memory and an O_DIRECT fd
  uint64_t bounce_slices = 0;      // slices through a bounce buffer (unaligned address/offset/length)
  uint64_t buffered_slices = 0;    // slices through the page cache (no O_DIRECT on that fs, or write head/tail)
  uint64_t fixed_buffer_ops = 0;   // io_uring ops that used a registered buffer
  uint64_t fixed_file_ops = 0;     // io_uring ops that used a registered file
  uint64_t short_continuations = 0;  // short reads/writes resumed for the remainder
  uint64_t cancel_requests = 0;    // in-flight slices asked to cancel
  uint64_t quarantined = 0;        // slices reported CANCELED while their I/O had not stopped
  uint64_t quarantine_released = 0;  // of those, I/O that has since ended
  uint64_t files_opened = 0;       // open() calls that succeeded
  uint64_t files_open = 0;         // descriptors open now
};

FileStats globalStats();

namespace detail {
struct Counters {
  std::atomic<uint64_t> uring_ops{0}, posix_ops{0}, direct_slices{0}, bounce_slices{0}, buffered_slices{0},
      fixed_buffer_ops{0}, fixed_file_ops{0}, short_continuations{0}, cancel_requests{0}, quarantined{0},
      quarantine_released{0}, files_opened{0}, files_open{0};
};
Counters& counters();
}  // namespace detail

class Inflight;
class PeerSet;
class FileSubBatch;

// Every file.* key (docs/file.md has the table).
struct FileSettings {
  std::string engine = "auto";                   // file.engine: auto | uring | posix
  bool direct = true;                            // file.direct: O_DIRECT where the file system does it
  uint64_t max_io_size = 1 << 20;                // file.max_io_size (a multiple of 4096)
  uint32_t bounce_buffers = 32;                  // file.bounce_buffers (default: file.io_depth)
  std::chrono::milliseconds cancel_grace{1000};  // file.cancel_grace_ms
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

  // Host memory is pre-registered with io_uring (fixed buffers) when it can be.
  Status registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                        nlohmann::json& attrs) override;
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

  const FileSettings& settings() const { return settings_; }
  // Reads and validates every file.* key of `config`.
  static Status loadSettings(const Config& config, FileSettings& out);

 private:
  friend class FileSubBatch;
  // The engine for a descriptor opened with (or without) O_DIRECT.
  IoEngine* engineFor(bool direct);
  IoEngine* posixEngine();  // started on first use

  FileSettings settings_;
  std::string server_name_;
  std::string uring_note_;  // why io_uring is not in use ("" when it is)
  bool installed_ = false;
  std::atomic<bool> down_{false};

  // Engines outlive everything below them (descriptors unregister from them).
  std::unique_ptr<IoEngine> uring_;
  std::unique_ptr<IoEngine> posix_;
  std::mutex posix_mu_;
  bool leak_engines_ = false;

  std::shared_ptr<PeerSet> peers_;
  std::unique_ptr<Inflight> inflight_;
};

}  // namespace hawser::file
