// A file segment as this host sees it (FilePeer), its cached open
// descriptors (OpenFile), and O_DIRECT detection. See file_handles.h.
#include "transport/file/file_handles.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/segment_desc.h"
#include "transport/file/file_plan.h"
#include "base/file_info.h"
#include "transport/file/file_counters.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

OpenFile::~OpenFile() {
  if (cufile && cufile_token >= 0) cufile->removeFile(cufile_token);
  if (engine && token >= 0) engine->removeFile(token);
  if (fd >= 0) {
    ::close(fd);
    counters->files_open--;
  }
}

DirectAlign directAlignment(int fd, bool is_block) {
  DirectAlign a;
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
    // Zero alignments: "no direct I/O on this file".
    a.direct = sx.stx_dio_mem_align != 0 && sx.stx_dio_offset_align != 0;
    if (a.direct) {
      a.mem_align = sx.stx_dio_mem_align;
      a.off_align = sx.stx_dio_offset_align;
    }
    return a;
  }
  struct statfs fs {};
  if (::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC))
    return a;  // accepts O_DIRECT (Linux >= 6.6) but serves it from the page cache
  a.direct = true;
  int ss = 0;
  uint64_t v = is_block && ::ioctl(fd, BLKSSZGET, &ss) == 0 && ss > 0 ? static_cast<uint64_t>(ss) : kPage;
  a.mem_align = a.off_align = is_block ? std::max<uint64_t>(v, 512) : kPage;
  return a;
}

std::string probeDirectIo(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EINVAL) return fmt::format("{}: the file system refuses O_DIRECT (page cache path)", dir);
    return fmt::format("{}: not probed ({})", dir, std::strerror(errno));
  }
  DirectAlign a = directAlignment(fd, false);
  ::close(fd);
  if (!a.direct) return fmt::format("{}: no direct I/O on this file system (page cache path)", dir);
  return fmt::format("{}: memory alignment {}, offset alignment {}", dir, a.mem_align, a.off_align);
}

// ---- FilePeer ------------------------------------------------------------------

FilePeer::FilePeer(const SegmentDesc& seg, const std::string& server_name, std::shared_ptr<PeerSet> set)
    : segment_(seg.name), server_(server_name), set_(std::move(set)) {
  files_.resize(seg.files.size());
  for (uint32_t idx = 0; idx < seg.files.size(); ++idx) {
    const FileDesc& f = seg.files[idx];
    Backing& b = files_[idx];
    b.length = f.length;
    lengths_.push_back(f.length);
    for (auto& [k, v] : f.local_path_map) b.map_keys += (b.map_keys.empty() ? "" : ", ") + k;
    auto it = f.local_path_map.find(server_name);
    b.mapped = it != f.local_path_map.end() && !it->second.empty();
    b.path = b.mapped ? it->second : f.file_path;
    if (b.path.empty()) {
      b.unusable = {Code::kPathNotMapped,
                    fmt::format("segment '{}' file #{}: local_path_map has no path for server '{}' (it maps: {}) and "
                                "the file has no file_path",
                                segment_, idx, server_, b.map_keys.empty() ? "nothing" : b.map_keys)};
    } else if (b.path[0] != '/') {
      b.unusable = {Code::kInvalidArgument,
                    fmt::format("segment '{}' file #{}: path '{}' is not absolute", segment_, idx, b.path)};
    } else if (struct statfs fs {}; !gds_refused_ && ::statfs(b.path.c_str(), &fs) == 0 &&
               (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
      // Known without touching cuFile: no block device under it.
      refuseGds({RouteReason::kUnsupportedFile,
                 fmt::format("segment '{}' file #{} '{}' lies on {}: no block device for GPUDirect Storage (cuFile "
                             "refuses such files)",
                             segment_, idx, b.path, fs.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs")});
    }
  }
  if (set_) set_->add(this);
}

RouteDecline FilePeer::gdsDecline() const {
  if (!gds_refused_.load(std::memory_order_acquire)) return {};
  std::lock_guard lk(gds_mu_);
  return gds_why_;
}

void FilePeer::refuseGds(RouteDecline why) {
  std::lock_guard lk(gds_mu_);
  if (gds_refused_.load(std::memory_order_relaxed)) return;
  gds_why_ = std::move(why);
  gds_refused_.store(true, std::memory_order_release);
}

FilePeer::~FilePeer() {
  if (set_) set_->remove(this);
}

Status FilePeer::open(uint32_t idx, OpenMode mode, bool direct, const OpenPolicy& how,
                      std::shared_ptr<OpenFile>& out) const {
  const Backing& b = files_[idx];
  const std::string& path = b.path;
  const bool write = mode != OpenMode::kRead;
  int flags = (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC;
  int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL) {  // the file system refuses O_DIRECT
    direct = false;
    fd = ::open(path.c_str(), flags);
  }
  if (fd < 0) {
    int e = errno;
    if ((e == ENOENT || e == ENOTDIR) && !b.mapped && !b.map_keys.empty())
      return {Code::kPathNotMapped,
              fmt::format("segment '{}' file #{}: local_path_map has no path for server '{}' (it maps: {}) and "
                          "file_path '{}' does not exist here",
                          segment_, idx, server_, b.map_keys, path)};
    Code c = (e == ENOENT || e == ENOTDIR)                ? Code::kFileNotFound
             : (e == EACCES || e == EPERM || e == EROFS) ? Code::kPermissionDenied
             : (e == EISDIR || e == ELOOP || e == ENXIO)  ? Code::kInvalidArgument
                                                           : Code::kIoError;
    return {c, fmt::format("segment '{}' file #{}: open '{}' for {}: {}", segment_, idx, path,
                           write ? "writing" : "reading", std::strerror(e))};
  }
  auto f = std::make_shared<OpenFile>();
  f->fd = fd;
  f->path = path;
  f->counters = set_->counters();
  f->counters->files_open++;
  f->counters->files_opened++;
  struct {
    uint64_t bytes = 0;
    bool block = false;
  } size;
  Status s = fileSize(fd, size.bytes, &size.block);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}' file #{} '{}': {}", segment_, idx, path, s.message())};

  if (direct) {
    // Does the file system really do direct I/O here, and with what alignment?
    const DirectAlign a = directAlignment(fd, size.block);
    direct = a.direct;
    f->mem_align = a.mem_align;
    f->off_align = a.off_align;
    if (!direct) {  // reopen through the page cache
      int fd2 = ::open(path.c_str(), flags);
      if (fd2 < 0)
        return {Code::kIoError, fmt::format("segment '{}' file #{}: reopen '{}' without O_DIRECT: {}", segment_, idx,
                                            path, std::strerror(errno))};
      ::close(fd);
      f->fd = fd2;
    }
  }
  f->direct = direct;
  f->engine = how.engine_for(direct);
  f->token = f->engine->addFile(f->fd);
  out = std::move(f);
  return Status::OK();
}

Status FilePeer::checkLength(uint32_t idx, const OpenFile& f) const {
  uint64_t bytes = 0;
  Status s = fileSize(f.fd, bytes);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}' file #{} '{}': {}", segment_, idx, f.path, s.message())};
  if (bytes < files_[idx].length)
    return {Code::kFileTooShort, fmt::format("segment '{}' file #{} '{}' has {} bytes, shorter than its declared "
                                             "length {}",
                                             segment_, idx, f.path, bytes, files_[idx].length)};
  return Status::OK();
}

Status FilePeer::acquire(uint32_t idx, OpenMode mode, const OpenPolicy& how, std::shared_ptr<OpenFile>& out) {
  Backing& b = files_[idx];
  if (!b.unusable.ok()) return b.unusable;
  std::lock_guard lk(mu_);
  std::shared_ptr<OpenFile>& slot = mode == OpenMode::kRead ? b.rd : mode == OpenMode::kWrite ? b.wr : b.wr_plain;
  if (!slot) {
    std::shared_ptr<OpenFile> f;
    Status s = open(idx, mode, mode != OpenMode::kWriteBuffered && how.direct, how, f);
    if (!s.ok()) return s;
    slot = std::move(f);
  }
  Status s = checkLength(idx, *slot);
  if (!s.ok()) return s;
  out = slot;
  return Status::OK();
}

void FilePeer::takeCache(std::vector<std::shared_ptr<OpenFile>>& out) {
  std::lock_guard lk(mu_);
  for (auto& b : files_)
    for (auto* slot : {&b.rd, &b.wr, &b.wr_plain})
      if (*slot) out.push_back(std::move(*slot));
}

// ---- PeerSet -------------------------------------------------------------------

void PeerSet::add(FilePeer* p) {
  std::lock_guard lk(mu_);
  peers_.insert(p);
}

void PeerSet::remove(FilePeer* p) {
  std::lock_guard lk(mu_);
  peers_.erase(p);
}

void PeerSet::closeAll(bool leak) {
  std::vector<std::shared_ptr<OpenFile>> files;
  {
    std::lock_guard lk(mu_);
    for (FilePeer* p : peers_) p->takeCache(files);
  }
  // Descriptors registered with an engine that could not be stopped stay open with it.
  if (leak) (void)new std::vector<std::shared_ptr<OpenFile>>(std::move(files));
}

}  // namespace hawser::file
