// A file segment as this host sees it: FilePeer is the transport's
// PeerHandle, made once per segment descriptor by openPeer(). It holds each
// backing file's path for this host (resolved once), declared lengths, and
// the cache of open descriptors, which it closes when it goes (the engine
// drops it when the segment is closed or its descriptor changes). OpenFile
// is one descriptor; slices hold it while their I/O runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/transport.h"
#include "hawser/status.h"

namespace hawser {
struct SegmentDesc;
}

namespace hawser::file {

class IoEngine;
struct FileCounters;

// One open descriptor. Slices hold it (shared) while their I/O runs, so it is
// closed only after the last I/O that uses it has ended.
struct OpenFile {
  int fd = -1;
  bool direct = false;     // opened with O_DIRECT and the fs honours it
  uint64_t mem_align = 1;  // O_DIRECT constraints (1: none)
  uint64_t off_align = 1;
  IoEngine* engine = nullptr;
  int token = -1;
  std::string path;
  // Its cuFile handle, for slices of GPU memory: registered on first need
  // (FileTransport::gpuRoute), deregistered before the descriptor closes.
  std::mutex cufile_mu;
  bool cufile_tried = false;
  IoEngine* cufile = nullptr;
  int cufile_token = -1;
  Status cufile_refusal;  // why cuFile refused it
  std::shared_ptr<FileCounters> counters;  // its transport's: files_open

  OpenFile() = default;
  OpenFile(const OpenFile&) = delete;
  ~OpenFile();
};

enum class OpenMode {
  kRead,           // O_RDONLY (+O_DIRECT when possible)
  kWrite,          // O_WRONLY (+O_DIRECT when possible)
  kWriteBuffered,  // O_WRONLY through the page cache (unaligned write heads/tails)
};

// Whether a descriptor opened with O_DIRECT really does direct I/O, and
// with what alignment (statx STATX_DIOALIGN; else tmpfs/ramfs: no; else the
// block size of a block device, 4096 for a file).
struct DirectAlign {
  bool direct = false;
  uint64_t mem_align = 1;
  uint64_t off_align = 1;
};
DirectAlign directAlignment(int fd, bool is_block);
// For `hawser doctor`: what O_DIRECT gives on a scratch file in `dir`.
std::string probeDirectIo(const std::string& dir);

// How files are opened: whether to try O_DIRECT (file.direct), and which
// engine serves a descriptor opened with or without it.
struct OpenPolicy {
  bool direct = true;
  std::function<IoEngine*(bool direct)> engine_for;
};

class PeerSet;

class FilePeer final : public PeerHandle {
 public:
  // Resolves each file's path for `server_name`: local_path_map[server_name]
  // when non-empty, else file_path. A file without a usable path fails only
  // the requests that touch it.
  FilePeer(const SegmentDesc& seg, const std::string& server_name, std::shared_ptr<PeerSet> set);
  ~FilePeer() override;

  const std::string& segment() const { return segment_; }
  std::span<const uint64_t> lengths() const { return lengths_; }

  // A descriptor of file `idx` for `mode`, opened on first use and cached.
  // Checks the file against its declared length every time (a file
  // truncated since it was opened is caught too). Errors name the segment,
  // the file index and the path.
  Status acquire(uint32_t idx, OpenMode mode, const OpenPolicy& how, std::shared_ptr<OpenFile>& out);

  // Moves the cached descriptors out (they close when the caller drops them).
  void takeCache(std::vector<std::shared_ptr<OpenFile>>& out);

  // GPUDirect Storage for this segment's files (FileTransport::variantDeclines):
  // why one of them cannot take it (unsupported_file), as found when the
  // peer was made (a file on tmpfs or ramfs) or at its first GPU I/O (cuFile
  // refused it); kNone while nothing is known against it. A lookup.
  RouteDecline gdsDecline() const;
  // Records `why` (the first one found is kept).
  void refuseGds(RouteDecline why);

 private:
  struct Backing {
    std::string path;     // for this host
    bool mapped = false;  // from local_path_map
    uint64_t length = 0;  // declared
    Status unusable;      // no usable path here (why)
    std::string map_keys;  // the servers local_path_map names, ", "-joined
    std::shared_ptr<OpenFile> rd, wr, wr_plain;  // cached, under mu_
  };
  Status open(uint32_t idx, OpenMode mode, bool direct, const OpenPolicy& how, std::shared_ptr<OpenFile>& out) const;
  Status checkLength(uint32_t idx, const OpenFile& f) const;

  std::string segment_;
  std::string server_;
  std::vector<uint64_t> lengths_;
  std::vector<Backing> files_;
  std::mutex mu_;
  std::shared_ptr<PeerSet> set_;
  std::atomic<bool> gds_refused_{false};  // set once gds_why_ is
  mutable std::mutex gds_mu_;
  RouteDecline gds_why_;
};

// Every live FilePeer of one transport: the transport's shutdown closes
// their descriptors (before its engines go), though the peers may live on.
class PeerSet {
 public:
  explicit PeerSet(std::shared_ptr<FileCounters> counters) : counters_(std::move(counters)) {}
  // The transport's counters (files_opened, files_open).
  const std::shared_ptr<FileCounters>& counters() const { return counters_; }
  void add(FilePeer* p);
  void remove(FilePeer* p);
  // Closes every peer's cached descriptors; with `leak`, keeps them open for
  // good (registered with an engine that could not be stopped).
  void closeAll(bool leak);

 private:
  std::shared_ptr<FileCounters> counters_;
  std::mutex mu_;
  std::set<FilePeer*> peers_;
};

}  // namespace hawser::file
