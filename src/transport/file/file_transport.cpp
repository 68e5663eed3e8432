// The file transport: serves file segments.
//
// prepare(): for each task, intersect its logical range with the segment's
// backing files (kOutOfRange unless fully covered), resolve and open every
// file it touches (path map, existence, permission, declared length: each a
// distinct code naming the file), then cut slices at file boundaries and at
// file.max_io_size, deciding per slice how it reaches the file:
//   direct   - user memory <-> O_DIRECT fd (address, offset, length aligned)
//   bounce   - through an aligned bounce buffer (reads round out to the
//              alignment and copy the asked bytes out; writes copy in)
//   buffered - through a page-cache fd (file systems without O_DIRECT, and
//              the unaligned head/tail of an O_DIRECT write, so a write never
//              has to read-modify-write a block it only partly covers)
// submit(): issue every slice (one engine submission for all of them).
// Completions come back by one-based cookie (slot index + 1, generation in
// the high bits). A short read/write is resumed for the remainder; end of
// file or an error fails the slice, and the task's other in-flight slices
// are asked to cancel. A slice whose I/O does not end within
// file.cancel_grace_ms of its cancel is reported CANCELED and quarantined:
// its memory (bounce buffer, file handle, the sub-batch) is kept until the
// kernel reports the I/O ended, and idle() stays false until then.
#include "transport/file/file_transport.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <optional>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/log.h"
#include "base/transport.h"
#include "metadata/descriptor.h"
#include "transport/file/file_plan.h"
#include "transport/file/io_engine.h"

namespace hawser {
namespace file {

namespace detail {
Counters& counters() {
  static Counters c;
  return c;
}
}  // namespace detail

FileStats globalStats() {
  auto& c = detail::counters();
  FileStats s;
  s.uring_ops = c.uring_ops;
  s.posix_ops = c.posix_ops;
  s.direct_slices = c.direct_slices;
  s.bounce_slices = c.bounce_slices;
  s.buffered_slices = c.buffered_slices;
  s.fixed_buffer_ops = c.fixed_buffer_ops;
  s.fixed_file_ops = c.fixed_file_ops;
  s.short_continuations = c.short_continuations;
  s.cancel_requests = c.cancel_requests;
  s.quarantined = c.quarantined;
  s.quarantine_released = c.quarantine_released;
  s.files_opened = c.files_opened;
  s.files_open = c.files_open;
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = 4096;

// ---- open files --------------------------------------------------------------

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

  OpenFile() = default;
  OpenFile(const OpenFile&) = delete;
  ~OpenFile() {
    if (engine && token >= 0) engine->removeFile(token);
    if (fd >= 0) {
      ::close(fd);
      detail::counters().files_open--;
    }
  }
};

// Cached per (segment, file index).
struct FileEntry {
  std::string path;
  uint64_t declared = 0;
  std::shared_ptr<OpenFile> rd;        // O_RDONLY (+O_DIRECT)
  std::shared_ptr<OpenFile> wr;        // O_WRONLY (+O_DIRECT)
  std::shared_ptr<OpenFile> wr_plain;  // O_WRONLY through the page cache (unaligned write heads/tails)
};

// ---- bounce buffers ----------------------------------------------------------

struct Bounce {
  char* p = nullptr;
  size_t size = 0;
  bool pooled = false;
};

class BouncePool {
 public:
  void configure(size_t buf_size, size_t max_bufs, IoEngine* reg) {
    buf_size_ = alignUp(buf_size, kPage);
    max_ = max_bufs;
    reg_ = reg;
  }
  ~BouncePool() { releaseAll(); }

  // nullptr .p: every pooled buffer is in use (wait for one).
  Bounce acquire(size_t need) {
    if (need > buf_size_) {  // larger than a pooled buffer (huge O_DIRECT alignment): a one-off
      size_t n = alignUp(need, kPage);
      void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return {};
      return Bounce{static_cast<char*>(p), n, false};
    }
    if (!free_.empty()) {
      char* p = free_.back();
      free_.pop_back();
      return Bounce{p, buf_size_, true};
    }
    if (all_.size() >= max_) return {};
    void* p = ::mmap(nullptr, buf_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return {};
    all_.push_back(static_cast<char*>(p));
    if (reg_) reg_->addMemory(p, buf_size_);
    return Bounce{static_cast<char*>(p), buf_size_, true};
  }

  void release(Bounce& b) {
    if (!b.p) return;
    if (b.pooled)
      free_.push_back(b.p);
    else
      ::munmap(b.p, b.size);
    b = Bounce{};
  }

  void releaseAll() {
    for (char* p : all_) {
      if (reg_) reg_->removeMemory(p, buf_size_);
      ::munmap(p, buf_size_);
    }
    all_.clear();
    free_.clear();
  }
  // Forget the buffers without unmapping (quarantine at a failed shutdown).
  void leak() {
    all_.clear();
    free_.clear();
  }

 private:
  size_t buf_size_ = 0;
  size_t max_ = 0;
  IoEngine* reg_ = nullptr;
  std::vector<char*> all_;
  std::vector<char*> free_;
};

// ---- batches -----------------------------------------------------------------

enum class SState : uint8_t { kPrepared, kWaitBounce, kInFlight, kDone };

struct FileSubBatch;

struct TaskRec {
  Task* task = nullptr;
  FileSubBatch* sb = nullptr;
  size_t first = 0;  // index of its first slice in sb->slices
  uint32_t count = 0;
  bool failed = false;  // a slice failed or the batch was cancelled: stop its siblings
};

struct Slice {
  TaskRec* rec = nullptr;
  std::shared_ptr<OpenFile> file;
  bool write = false;
  bool bounce = false;
  bool buffered = false;
  char* user = nullptr;   // the user's memory for this slice
  uint64_t len = 0;       // bytes asked
  uint64_t off = 0;       // file offset of those bytes
  uint64_t io_off = 0;    // the I/O issued (bounce reads round out to the alignment)
  uint64_t io_len = 0;
  uint64_t progress = 0;  // bytes of the I/O done (short I/O is resumed)
  Bounce bb;
  uint64_t cookie = 0;
  SState state = SState::kPrepared;
  bool cancel_requested = false;
  bool reported = false;
  bool quarantined = false;
  bool counted = false;  // direct/bounce/buffered counter bumped
  Clock::time_point deadline{};
};

struct FileSubBatch final : SubBatch {
  std::deque<TaskRec> tasks;
  std::deque<Slice> slices;
  size_t committed_tasks = 0;   // tasks/slices before these indices were submitted
  size_t committed_slices = 0;
  size_t active = 0;            // slices waiting for a bounce buffer or with I/O in the kernel
};

// What to do once the transport lock is released.
struct Report {
  Task* task;
  TransferState state;
  uint64_t bytes;
  Status error;
};
struct Outbox {
  std::vector<IoOp> uring_ops, posix_ops;
  std::vector<uint64_t> uring_cancel, posix_cancel;
  struct Copy {
    char* dst;
    const char* src;
    uint64_t len;
  };
  std::vector<Copy> copy_in;  // user -> bounce, before the write is posted
  std::vector<Report> reports;
  std::vector<std::unique_ptr<FileSubBatch>> destroy;
  bool empty() const {
    return uring_ops.empty() && posix_ops.empty() && uring_cancel.empty() && posix_cancel.empty() &&
           reports.empty() && destroy.empty();
  }
};

const char* opName(bool write) { return write ? "write" : "read"; }

// ---- the transport -----------------------------------------------------------

class FileTransport final : public Transport {
 public:
  FileTransport() = default;
  ~FileTransport() override;

  const char* name() const override { return "file"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.memory_segments = false;
    c.file_segments = true;
    c.host_memory = true;
    c.gpu_memory = false;  // a cuFile engine would lift this
    c.same_host_only = false;
    c.needs_polling = false;  // engine threads complete slices
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

 private:
  Status readConfig(const Config& cfg);
  IoEngine* engineFor(bool direct);
  IoEngine* posixEngine();
  Status resolvePath(const SegmentDesc& seg, uint32_t idx, std::string& path, bool& mapped) const;
  Status openOne(const SegmentDesc& seg, uint32_t idx, const std::string& path, bool mapped, int mode, bool direct,
                 std::shared_ptr<OpenFile>& out);
  // mode: 0 read (direct when possible), 1 write (direct when possible), 2 write through the page cache
  Status acquireFile(const SegmentDesc& seg, uint32_t idx, int mode, std::shared_ptr<OpenFile>& out);
  Status checkLength(const SegmentDesc& seg, uint32_t idx, const OpenFile& f) const;

  // Under mu_.
  void issue(Slice* s, Outbox& ob);
  void cancelSlice(Slice* s, Outbox& ob, const char* why);
  void finishIo(Slice* s, Outbox& ob);
  void handle(const IoCompletion& c, Outbox& ob);
  void report(Slice* s, TransferState st, Status err, Outbox& ob);
  uint64_t allocCookie(Slice* s);
  void freeCookie(Slice* s);
  Slice* lookup(uint64_t cookie) const;
  void onComplete(std::span<const IoCompletion> cs);
  void flush(Outbox& ob);
  void watchdog();

  TransportContext ctx_;
  EngineOptions eopts_;
  std::string mode_ = "auto";
  bool direct_ = true;
  uint64_t max_io_ = 1 << 20;
  uint32_t bounce_buffers_ = 32;
  std::chrono::milliseconds grace_{1000};
  bool installed_ = false;
  bool down_ = false;

  std::unique_ptr<IoEngine> uring_;
  std::unique_ptr<IoEngine> posix_;
  std::mutex posix_mu_;
  bool leak_engines_ = false;

  mutable std::mutex cache_mu_;
  std::map<std::pair<std::string, uint32_t>, FileEntry> cache_;

  // Everything below: under mu_.
  mutable std::mutex mu_;
  std::vector<Slice*> slots_;
  std::vector<uint32_t> gens_;
  std::vector<uint32_t> free_slots_;
  BouncePool pool_;
  std::deque<Slice*> waiters_;
  std::vector<Slice*> cancelling_;
  std::set<FileSubBatch*> live_;
  std::vector<std::unique_ptr<FileSubBatch>> quarantine_;
  size_t total_active_ = 0;
  std::condition_variable drained_cv_;

  std::thread watchdog_;
  std::condition_variable wd_cv_;
  bool wd_stop_ = false;
};

// ---- configuration -------------------------------------------------------------

template <typename T>
Status parseKey(const Config& cfg, const char* key, T lo, T hi, T& out, bool size = false) {
  auto raw = cfg.raw(key);
  if (!raw) return Status::OK();
  std::optional<uint64_t> v;
  if (size) {
    v = parseSize(*raw);
  } else {
    uint64_t x = 0;
    auto [p, ec] = std::from_chars(raw->data(), raw->data() + raw->size(), x);
    if (ec == std::errc() && p == raw->data() + raw->size()) v = x;
  }
  if (!v || *v < static_cast<uint64_t>(lo) || *v > static_cast<uint64_t>(hi))
    return {Code::kInvalidArgument, fmt::format("config {} (env {}) = '{}': expected {} in [{}, {}]", key,
                                                Config::envName(key), *raw, size ? "a size" : "an integer", lo, hi)};
  out = static_cast<T>(*v);
  return Status::OK();
}

Status parseBool(const Config& cfg, const char* key, bool& out) {
  auto raw = cfg.raw(key);
  if (!raw) return Status::OK();
  std::string s;
  for (char c : *raw) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    out = true;
  } else if (s == "0" || s == "false" || s == "no" || s == "off") {
    out = false;
  } else {
    return {Code::kInvalidArgument,
            fmt::format("config {} (env {}) = '{}': expected true or false", key, Config::envName(key), *raw)};
  }
  return Status::OK();
}

Status FileTransport::readConfig(const Config& cfg) {
  mode_ = cfg.getString("file.engine", "auto");
  if (mode_ != "auto" && mode_ != "uring" && mode_ != "posix")
    return {Code::kInvalidArgument, fmt::format("config file.engine (env HAWSER_FILE_ENGINE) = '{}': expected auto, "
                                                "uring or posix",
                                                mode_)};
  Status s;
  uint32_t depth = 32, threads = 4, bufs = 32;
  uint64_t grace = 1000;
  if (!(s = parseKey<uint32_t>(cfg, "file.io_depth", 1, 4096, depth)).ok()) return s;
  if (!(s = parseKey<uint64_t>(cfg, "file.max_io_size", kPage, 1ULL << 30, max_io_, true)).ok()) return s;
  if (max_io_ % kPage != 0)
    return {Code::kInvalidArgument,
            fmt::format("config file.max_io_size (env HAWSER_FILE_MAX_IO_SIZE) = {}: must be a multiple of 4096",
                        max_io_)};
  if (!(s = parseKey<uint32_t>(cfg, "file.posix_threads", 1, 256, threads)).ok()) return s;
  bufs = depth;
  if (!(s = parseKey<uint32_t>(cfg, "file.bounce_buffers", 1, 4096, bufs)).ok()) return s;
  if (!(s = parseKey<uint64_t>(cfg, "file.cancel_grace_ms", 0, 3600000, grace)).ok()) return s;
  if (!(s = parseBool(cfg, "file.direct", direct_)).ok()) return s;
  if (!(s = parseBool(cfg, "file.fixed_buffers", eopts_.fixed_buffers)).ok()) return s;
  if (!(s = parseBool(cfg, "file.fixed_files", eopts_.fixed_files)).ok()) return s;
  if (!(s = parseBool(cfg, "file.sqpoll", eopts_.sqpoll)).ok()) return s;
  eopts_.io_depth = depth;
  eopts_.posix_threads = threads;
  bounce_buffers_ = bufs;
  grace_ = std::chrono::milliseconds(grace);
  return Status::OK();
}

// ---- lifecycle -------------------------------------------------------------------

Status FileTransport::install(const TransportContext& ctx) {
  ctx_ = ctx;
  static Config empty;
  Status s = readConfig(ctx.config ? *ctx.config : empty);
  if (!s.ok()) return s;
  if (mode_ != "posix") {
    s = makeUringEngine(eopts_, uring_);
    if (!s.ok()) {
      if (mode_ == "uring")
        return {Code::kNotSupported, fmt::format("file.engine=uring but io_uring is unavailable: {}", s.message())};
      HLOG_INFO("file: io_uring unavailable ({}); using the POSIX engine", s.message());
      uring_.reset();
    } else {
      s = uring_->start([this](std::span<const IoCompletion> cs) { onComplete(cs); });
      if (!s.ok()) return s;
    }
  }
  // Bounce buffers are not registered with io_uring: they are taken under the
  // transport lock, and a registration is a round trip to the ring's thread,
  // which may itself be waiting for that lock.
  pool_.configure(max_io_ + 2 * kPage, bounce_buffers_, nullptr);
  watchdog_ = std::thread([this] { watchdog(); });
  installed_ = true;
  HLOG_INFO("file: engine={} io_depth={} max_io_size={} direct={} bounce_buffers={}",
            uring_ ? "uring" : "posix", eopts_.io_depth, max_io_, direct_, bounce_buffers_);
  return Status::OK();
}

IoEngine* FileTransport::posixEngine() {
  std::lock_guard lk(posix_mu_);
  if (!posix_) {
    posix_ = makePosixEngine(eopts_);
    (void)posix_->start([this](std::span<const IoCompletion> cs) { onComplete(cs); });
  }
  return posix_.get();
}

IoEngine* FileTransport::engineFor(bool direct) {
  if (mode_ == "posix" || !uring_) return posixEngine();
  if (mode_ == "uring") return uring_.get();
  return direct ? uring_.get() : posixEngine();  // auto: the page cache path goes to pread/pwrite
}

void FileTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  attrs["engine"] = uring_ ? (mode_ == "auto" ? "uring+posix" : "uring") : "posix";
  attrs["io_depth"] = eopts_.io_depth;
  attrs["max_io_size"] = max_io_;
  attrs["aliases"] = nlohmann::json::array({"nvmeof"});
}

void FileTransport::shutdown() {
  if (!installed_ || down_) return;
  down_ = true;
  Outbox ob;
  {
    std::unique_lock lk(mu_);
    for (FileSubBatch* sb : live_)
      for (auto& s : sb->slices) cancelSlice(&s, ob, "the engine is shutting down");
    for (auto& sb : quarantine_)
      for (auto& s : sb->slices) cancelSlice(&s, ob, "the engine is shutting down");
  }
  flush(ob);
  {
    std::unique_lock lk(mu_);
    // Cancelled I/O ends quickly; a slice past its grace is quarantined by the
    // watchdog but still counts as active until the kernel lets it go.
    drained_cv_.wait_for(lk, grace_ + std::chrono::seconds(2), [&] { return total_active_ == 0; });
  }
  size_t left = 0;
  if (uring_) left += uring_->stop(std::chrono::seconds(2));
  {
    std::lock_guard lk(posix_mu_);
    if (posix_) left += posix_->stop(std::chrono::seconds(2));
  }
  {
    std::lock_guard lk(mu_);
    wd_stop_ = true;
  }
  wd_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (left > 0) {
    // The kernel may still write into bounce buffers, sub-batches and user
    // memory: keep everything (engines, buffers, descriptors) for good.
    leak_engines_ = true;
    HLOG_ERROR("file: {} I/O(s) never ended; engines, bounce buffers and open files are quarantined for the life "
               "of the process",
               left);
    return;
  }
  std::lock_guard lk(cache_mu_);
  cache_.clear();
}

FileTransport::~FileTransport() {
  shutdown();
  if (leak_engines_) {
    (void)uring_.release();
    (void)posix_.release();
    pool_.leak();
    std::lock_guard lk(mu_);
    for (auto& sb : quarantine_) (void)sb.release();
    std::lock_guard cl(cache_mu_);
    // Descriptors registered with a leaked ring stay open with it.
    (void)new std::map<std::pair<std::string, uint32_t>, FileEntry>(std::move(cache_));
    return;
  }
  quarantine_.clear();
  {
    std::lock_guard lk(cache_mu_);
    cache_.clear();
  }
  pool_.releaseAll();
  uring_.reset();
  posix_.reset();
}

// ---- memory ----------------------------------------------------------------------

Status FileTransport::registerMemory(void* addr, size_t length, const std::string& location, bool,
                                     nlohmann::json& attrs) {
  // Host memory may be pre-registered with io_uring (fixed buffers); anything
  // the kernel refuses just goes through plain reads/writes.
  if (uring_ && location.rfind("cuda", 0) != 0) uring_->addMemory(addr, length);
  return Status::OK();
}

Status FileTransport::unregisterMemory(void* addr, size_t length) {
  if (uring_) uring_->removeMemory(addr, length);
  return Status::OK();
}

bool FileTransport::canServe(const SegmentDesc& seg, const std::string& local_location) const {
  if (seg.kind != SegmentDesc::Kind::kFile) return false;
  // io_uring and pread/pwrite move host memory only; GPU memory needs a cuFile engine.
  return local_location.rfind("cuda", 0) != 0;
}

void FileTransport::closeSegment(const SegmentDesc& seg) {
  std::lock_guard lk(cache_mu_);
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (it->first.first == seg.name)
      it = cache_.erase(it);  // descriptors still used by in-flight I/O close when it ends
    else
      ++it;
  }
}

// ---- files -----------------------------------------------------------------------

Status FileTransport::resolvePath(const SegmentDesc& seg, uint32_t idx, std::string& path, bool& mapped) const {
  const FileDesc& f = seg.files[idx];
  auto it = f.local_path_map.find(ctx_.server_name);
  mapped = it != f.local_path_map.end() && !it->second.empty();
  path = mapped ? it->second : f.file_path;
  if (path.empty()) {
    std::string keys;
    for (auto& [k, v] : f.local_path_map) keys += (keys.empty() ? "" : ", ") + k;
    return {Code::kPathNotMapped,
            fmt::format("segment '{}' file #{}: local_path_map has no path for server '{}' (it maps: {}) and the "
                        "file has no file_path",
                        seg.name, idx, ctx_.server_name, keys.empty() ? "nothing" : keys)};
  }
  if (path[0] != '/')
    return {Code::kInvalidArgument,
            fmt::format("segment '{}' file #{}: path '{}' is not absolute", seg.name, idx, path)};
  return Status::OK();
}

static Status fileSize(int fd, uint64_t& size, bool& is_block) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {Code::kIoError, fmt::format("fstat: {}", std::strerror(errno))};
  is_block = S_ISBLK(st.st_mode);
  if (is_block) {
    uint64_t n = 0;
    if (::ioctl(fd, BLKGETSIZE64, &n) != 0)
      return {Code::kIoError, fmt::format("BLKGETSIZE64: {}", std::strerror(errno))};
    size = n;
    return Status::OK();
  }
  if (!S_ISREG(st.st_mode)) return {Code::kInvalidArgument, "not a regular file or block device"};
  size = static_cast<uint64_t>(st.st_size);
  return Status::OK();
}

Status FileTransport::openOne(const SegmentDesc& seg, uint32_t idx, const std::string& path, bool mapped, int mode,
                              bool direct, std::shared_ptr<OpenFile>& out) {
  const bool write = mode != 0;
  int flags = (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC;
  int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL) {  // the file system refuses O_DIRECT
    direct = false;
    fd = ::open(path.c_str(), flags);
  }
  if (fd < 0) {
    int e = errno;
    const FileDesc& f = seg.files[idx];
    if ((e == ENOENT || e == ENOTDIR) && !mapped && !f.local_path_map.empty()) {
      std::string keys;
      for (auto& [k, v] : f.local_path_map) keys += (keys.empty() ? "" : ", ") + k;
      return {Code::kPathNotMapped,
              fmt::format("segment '{}' file #{}: local_path_map has no path for server '{}' (it maps: {}) and "
                          "file_path '{}' does not exist here",
                          seg.name, idx, ctx_.server_name, keys, path)};
    }
    Code c = (e == ENOENT || e == ENOTDIR)                ? Code::kFileNotFound
             : (e == EACCES || e == EPERM || e == EROFS) ? Code::kPermissionDenied
             : (e == EISDIR || e == ELOOP || e == ENXIO)  ? Code::kInvalidArgument
                                                           : Code::kIoError;
    return {c, fmt::format("segment '{}' file #{}: open '{}' for {}: {}", seg.name, idx, path,
                           write ? "writing" : "reading", std::strerror(e))};
  }
  auto f = std::make_shared<OpenFile>();
  f->fd = fd;
  f->path = path;
  detail::counters().files_open++;
  detail::counters().files_opened++;
  uint64_t size = 0;
  bool is_block = false;
  Status s = fileSize(fd, size, is_block);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}' file #{} '{}': {}", seg.name, idx, path, s.message())};

  if (direct) {
    // Does the file system really do direct I/O here, and with what alignment?
    struct statx sx {};
    bool known = false;
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
      known = true;
      if (sx.stx_dio_mem_align == 0 || sx.stx_dio_offset_align == 0) {
        direct = false;  // "no direct I/O on this file"
      } else {
        f->mem_align = sx.stx_dio_mem_align;
        f->off_align = sx.stx_dio_offset_align;
      }
    }
    if (!known) {
      struct statfs fs {};
      if (::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
        direct = false;  // accepts O_DIRECT (Linux >= 6.6) but serves it from the page cache
      } else {
        int ss = 0;
        uint64_t a = is_block && ::ioctl(fd, BLKSSZGET, &ss) == 0 && ss > 0 ? static_cast<uint64_t>(ss) : kPage;
        f->mem_align = std::max<uint64_t>(a, 512);
        f->off_align = std::max<uint64_t>(a, 512);
        if (!is_block) f->mem_align = f->off_align = kPage;
      }
    }
    if (!direct) {  // reopen through the page cache
      int fd2 = ::open(path.c_str(), flags);
      if (fd2 < 0)
        return {Code::kIoError, fmt::format("segment '{}' file #{}: reopen '{}' without O_DIRECT: {}", seg.name, idx,
                                            path, std::strerror(errno))};
      ::close(fd);
      f->fd = fd2;
      f->mem_align = f->off_align = 1;
    }
  }
  f->direct = direct;
  f->engine = engineFor(direct);
  f->token = f->engine->addFile(f->fd);
  out = std::move(f);
  return Status::OK();
}

Status FileTransport::checkLength(const SegmentDesc& seg, uint32_t idx, const OpenFile& f) const {
  uint64_t size = 0;
  bool is_block = false;
  Status s = fileSize(f.fd, size, is_block);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}' file #{} '{}': {}", seg.name, idx, f.path, s.message())};
  if (size < seg.files[idx].length)
    return {Code::kFileTooShort, fmt::format("segment '{}' file #{} '{}' has {} bytes, shorter than its declared "
                                             "length {}",
                                             seg.name, idx, f.path, size, seg.files[idx].length)};
  return Status::OK();
}

Status FileTransport::acquireFile(const SegmentDesc& seg, uint32_t idx, int mode, std::shared_ptr<OpenFile>& out) {
  std::string path;
  bool mapped = false;
  Status s = resolvePath(seg, idx, path, mapped);
  if (!s.ok()) return s;
  std::lock_guard lk(cache_mu_);
  FileEntry& e = cache_[{seg.name, idx}];
  if (e.path != path || e.declared != seg.files[idx].length) {
    e = FileEntry{};
    e.path = path;
    e.declared = seg.files[idx].length;
  }
  std::shared_ptr<OpenFile>& slot = mode == 0 ? e.rd : mode == 1 ? e.wr : e.wr_plain;
  if (!slot) {
    std::shared_ptr<OpenFile> f;
    s = openOne(seg, idx, path, mapped, mode, mode != 2 && direct_, f);
    if (!s.ok()) return s;
    slot = std::move(f);
  }
  s = checkLength(seg, idx, *slot);  // also catches a file truncated since it was opened
  if (!s.ok()) return s;
  out = slot;
  return Status::OK();
}

// ---- batches ---------------------------------------------------------------------

Status FileTransport::allocateSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  auto sb = std::make_unique<FileSubBatch>();
  {
    std::lock_guard lk(mu_);
    live_.insert(sb.get());
  }
  out = std::move(sb);
  return Status::OK();
}

Status FileTransport::prepare(SubBatch& base, std::span<Task* const> tasks, size_t& slices) {
  auto& sb = static_cast<FileSubBatch&>(base);
  slices = 0;
  struct NewTask {
    Task* task;
    std::vector<Slice> slices;
  };
  std::vector<NewTask> built;
  built.reserve(tasks.size());
  std::vector<uint64_t> lengths;
  std::vector<FileSpan> spans;
  std::vector<Piece> pieces;
  for (Task* task : tasks) {
    const SegmentDesc& seg = task->segment();
    const TransferRequest& r = task->request();
    if (seg.kind != SegmentDesc::Kind::kFile)
      return {Code::kInternal, fmt::format("file transport got task {} for memory segment '{}'", task->id(), seg.name)};
    const bool write = r.opcode == OpCode::kWrite;
    lengths.clear();
    for (auto& f : seg.files) lengths.push_back(f.length);
    Status s = coverRange(lengths, r.target_offset, r.length, spans);
    if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", seg.name, s.message())};
    NewTask nt{task, {}};
    for (const FileSpan& span : spans) {
      std::shared_ptr<OpenFile> f, plain;
      s = acquireFile(seg, span.file, write ? 1 : 0, f);
      if (!s.ok()) return s;
      uint64_t walign = 1, max_io = max_io_;
      if (write && f->direct) {
        walign = std::max(f->off_align, kPage);
        max_io = alignUp(max_io_, walign);
      }
      pieces.clear();
      cutSpan(span, max_io, walign, pieces);
      for (const Piece& p : pieces) {
        Slice sl;
        sl.write = write;
        sl.user = static_cast<char*>(r.source) + p.req_off;
        sl.len = p.len;
        sl.off = p.file_off;
        sl.io_off = p.file_off;
        sl.io_len = p.len;
        const auto addr = reinterpret_cast<uint64_t>(sl.user);
        if (p.buffered) {
          if (!plain) {
            s = acquireFile(seg, span.file, 2, plain);
            if (!s.ok()) return s;
          }
          sl.file = plain;
          sl.buffered = true;
        } else {
          sl.file = f;
          if (!f->direct) {
            sl.buffered = true;
          } else if (write) {
            sl.bounce = addr % f->mem_align != 0;  // offset and length are aligned by the cut
          } else if (addr % f->mem_align != 0 || p.file_off % f->off_align != 0 || p.len % f->off_align != 0) {
            sl.bounce = true;
            sl.io_off = alignDown(p.file_off, f->off_align);
            sl.io_len = alignUp(p.file_off + p.len, f->off_align) - sl.io_off;
          }
        }
        nt.slices.push_back(std::move(sl));
      }
    }
    slices += nt.slices.size();
    built.push_back(std::move(nt));
  }
  // Everything validated: append (nothing is posted until submit()).
  std::lock_guard lk(mu_);
  for (auto& nt : built) {
    nt.task->setSliceCount(static_cast<uint32_t>(nt.slices.size()));
    TaskRec& rec = sb.tasks.emplace_back();
    rec.task = nt.task;
    rec.sb = &sb;
    rec.first = sb.slices.size();
    rec.count = static_cast<uint32_t>(nt.slices.size());
    for (auto& sl : nt.slices) {
      sl.rec = &rec;
      sb.slices.push_back(std::move(sl));
    }
  }
  return Status::OK();
}

void FileTransport::discard(SubBatch& base) {
  auto& sb = static_cast<FileSubBatch&>(base);
  std::lock_guard lk(mu_);
  while (sb.slices.size() > sb.committed_slices) sb.slices.pop_back();
  while (sb.tasks.size() > sb.committed_tasks) sb.tasks.pop_back();
}

void FileTransport::submit(SubBatch& base) {
  auto& sb = static_cast<FileSubBatch&>(base);
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (size_t i = sb.committed_slices; i < sb.slices.size(); ++i) {
      Slice* s = &sb.slices[i];
      sb.active++;
      total_active_++;
      issue(s, ob);
    }
    sb.committed_slices = sb.slices.size();
    sb.committed_tasks = sb.tasks.size();
  }
  flush(ob);
}

uint64_t FileTransport::allocCookie(Slice* s) {
  uint32_t idx;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else {
    idx = static_cast<uint32_t>(slots_.size());
    slots_.push_back(nullptr);
    gens_.push_back(0);
  }
  slots_[idx] = s;
  gens_[idx] = (gens_[idx] + 1) & 0x3fffffff;
  // One-based: cookie 0 never names a slice.
  return (static_cast<uint64_t>(gens_[idx]) << 32) | (static_cast<uint64_t>(idx) + 1);
}

void FileTransport::freeCookie(Slice* s) {
  if (!s->cookie) return;
  uint32_t idx = static_cast<uint32_t>(s->cookie & 0xffffffffu) - 1;
  slots_[idx] = nullptr;
  free_slots_.push_back(idx);
  s->cookie = 0;
}

Slice* FileTransport::lookup(uint64_t cookie) const {
  uint64_t low = cookie & 0xffffffffu;
  if (low == 0 || low > slots_.size()) return nullptr;
  uint32_t idx = static_cast<uint32_t>(low - 1);
  if (gens_[idx] != static_cast<uint32_t>(cookie >> 32)) return nullptr;
  return slots_[idx];
}

// Posts the slice's (remaining) I/O, or parks it until a bounce buffer frees.
void FileTransport::issue(Slice* s, Outbox& ob) {
  if (s->bounce && !s->bb.p) {
    s->bb = pool_.acquire(s->io_len);
    if (!s->bb.p) {
      s->state = SState::kWaitBounce;
      waiters_.push_back(s);
      return;
    }
    if (s->write) ob.copy_in.push_back({s->bb.p, s->user, s->len});
  }
  if (!s->counted) {
    s->counted = true;
    auto& c = detail::counters();
    (s->bounce ? c.bounce_slices : s->buffered ? c.buffered_slices : c.direct_slices)++;
  }
  if (!s->cookie) s->cookie = allocCookie(s);
  s->state = SState::kInFlight;
  IoOp op;
  op.cookie = s->cookie;
  op.fd = s->file->fd;
  op.file_token = s->file->token;
  op.write = s->write;
  op.buf = (s->bounce ? s->bb.p : s->user) + s->progress;
  op.len = s->io_len - s->progress;
  op.offset = s->io_off + s->progress;
  if (s->file->engine == uring_.get()) {
    ob.uring_ops.push_back(op);
    detail::counters().uring_ops++;
  } else {
    ob.posix_ops.push_back(op);
    detail::counters().posix_ops++;
  }
}

void FileTransport::report(Slice* s, TransferState st, Status err, Outbox& ob) {
  if (s->reported) return;
  s->reported = true;
  ob.reports.push_back(Report{s->rec->task, st, st == TransferState::kCompleted ? s->len : 0, std::move(err)});
}

// Asks a slice to stop. Not yet posted: CANCELED now. In the kernel: a cancel
// request; it ends with its completion, or at its deadline (quarantine).
void FileTransport::cancelSlice(Slice* s, Outbox& ob, const char* why) {
  if (s->reported || s->state == SState::kDone) return;
  s->rec->failed = true;
  Status err(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled: {}", opName(s->write),
                                         s->file ? s->file->path : "?", s->off, s->len, why));
  switch (s->state) {
    case SState::kPrepared:
      s->state = SState::kDone;
      report(s, TransferState::kCanceled, std::move(err), ob);
      break;
    case SState::kWaitBounce:
      waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), s), waiters_.end());
      s->state = SState::kDone;
      s->file.reset();
      s->rec->sb->active--;
      total_active_--;
      report(s, TransferState::kCanceled, std::move(err), ob);
      break;
    case SState::kInFlight:
      if (!s->cancel_requested) {
        s->cancel_requested = true;
        s->deadline = Clock::now() + grace_;
        cancelling_.push_back(s);
        (s->file->engine == uring_.get() ? ob.uring_cancel : ob.posix_cancel).push_back(s->cookie);
        detail::counters().cancel_requests++;
        wd_cv_.notify_all();
      }
      break;
    case SState::kDone:
      break;
  }
  if (total_active_ == 0) drained_cv_.notify_all();
}

// The slice's I/O has ended for good: release what it held.
void FileTransport::finishIo(Slice* s, Outbox& ob) {
  freeCookie(s);
  pool_.release(s->bb);
  s->file.reset();
  s->state = SState::kDone;
  FileSubBatch* sb = s->rec->sb;
  sb->active--;
  total_active_--;
  if (s->cancel_requested) cancelling_.erase(std::remove(cancelling_.begin(), cancelling_.end(), s), cancelling_.end());
  // A freed bounce buffer goes to the oldest waiter.
  while (!waiters_.empty()) {
    Slice* w = waiters_.front();
    w->bb = pool_.acquire(w->io_len);
    if (!w->bb.p) break;
    waiters_.pop_front();
    if (w->write) ob.copy_in.push_back({w->bb.p, w->user, w->len});
    issue(w, ob);
  }
  if (sb->active == 0) {
    // A sub-batch freed while it had quarantined I/O can go now.
    for (auto it = quarantine_.begin(); it != quarantine_.end(); ++it) {
      if (it->get() == sb) {
        HLOG_INFO("file: quarantined sub-batch released: its last I/O has ended");
        ob.destroy.push_back(std::move(*it));
        quarantine_.erase(it);
        break;
      }
    }
  }
  if (total_active_ == 0) drained_cv_.notify_all();
}

void FileTransport::handle(const IoCompletion& c, Outbox& ob) {
  Slice* s = lookup(c.cookie);
  if (!s || s->state != SState::kInFlight) {
    HLOG_WARN("file: completion for unknown cookie {:#x} (result {}) ignored", c.cookie, c.result);
    return;
  }
  const int64_t res = c.result;
  // Bytes of the I/O that must be done for the slice to be complete: a
  // bounce read may run past end of file in its alignment padding.
  const uint64_t needed = (s->bounce && !s->write) ? (s->off - s->io_off) + s->len : s->io_len;
  if (res > 0) s->progress += static_cast<uint64_t>(res);

  if (s->quarantined) {
    HLOG_INFO("file: quarantined {} of '{}' [{}, +{}) has ended (result {}); its memory is released",
              opName(s->write), s->file->path, s->off, s->len, res);
    detail::counters().quarantine_released++;
    finishIo(s, ob);
    return;
  }
  if (res > 0 && s->progress < needed && !s->cancel_requested) {
    detail::counters().short_continuations++;
    issue(s, ob);  // resume the remainder with the same cookie
    return;
  }
  TransferState st;
  Status err;
  if (s->progress >= needed) {
    st = TransferState::kCompleted;
    if (s->bounce && !s->write) std::memcpy(s->user, s->bb.p + (s->off - s->io_off), s->len);
  } else if (res == -ECANCELED || s->cancel_requested) {
    st = TransferState::kCanceled;
    err = Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled after {} bytes", opName(s->write),
                                             s->file->path, s->off, s->len, s->progress));
  } else if (res < 0) {
    st = TransferState::kFailed;
    err = Status(Code::kIoError, fmt::format("{} of '{}' at offset {} ({} bytes): {}", opName(s->write),
                                             s->file->path, s->io_off + s->progress, s->io_len - s->progress,
                                             std::strerror(static_cast<int>(-res))));
  } else {
    st = TransferState::kFailed;
    err = Status(Code::kIoError,
                 fmt::format("short {}: {} of {} bytes at offset {} of '{}' (end of file: truncated since it was "
                             "opened?)",
                             opName(s->write), std::min(s->progress, needed), needed, s->io_off, s->file->path));
  }
  TaskRec* rec = s->rec;
  report(s, st, std::move(err), ob);
  finishIo(s, ob);
  if (st == TransferState::kFailed && !rec->failed) {
    rec->failed = true;
    for (uint32_t i = 0; i < rec->count; ++i)
      cancelSlice(&rec->sb->slices[rec->first + i], ob, "another slice of the task failed");
  }
}

void FileTransport::onComplete(std::span<const IoCompletion> cs) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (const auto& c : cs) handle(c, ob);
  }
  flush(ob);
}

void FileTransport::flush(Outbox& ob) {
  for (auto& c : ob.copy_in) std::memcpy(c.dst, c.src, c.len);
  if (!ob.uring_ops.empty()) uring_->submit(ob.uring_ops);
  if (!ob.posix_ops.empty()) posixEngine()->submit(ob.posix_ops);
  if (!ob.uring_cancel.empty()) uring_->cancel(ob.uring_cancel);
  if (!ob.posix_cancel.empty()) posixEngine()->cancel(ob.posix_cancel);
  for (auto& r : ob.reports) r.task->completeSlice(r.state, r.bytes, r.error);
  ob.destroy.clear();
}

void FileTransport::cancel(SubBatch& base) {
  auto& sb = static_cast<FileSubBatch&>(base);
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < sb.committed_slices; ++i) cancelSlice(&sb.slices[i], ob, "cancelTransfer");
  }
  flush(ob);
}

bool FileTransport::idle(SubBatch& base) {
  auto& sb = static_cast<FileSubBatch&>(base);
  std::lock_guard lk(mu_);
  return sb.active == 0;
}

void FileTransport::freeSubBatch(std::unique_ptr<SubBatch> base) {
  if (!base) return;
  std::unique_ptr<FileSubBatch> sb(static_cast<FileSubBatch*>(base.release()));
  std::unique_lock lk(mu_);
  live_.erase(sb.get());
  if (sb->active > 0) {
    HLOG_WARN("file: sub-batch freed with {} I/O(s) still in the kernel: quarantined until they end", sb->active);
    quarantine_.push_back(std::move(sb));
    return;
  }
  lk.unlock();
  sb.reset();  // drops its file references (closing descriptors no longer cached)
}

// Reports CANCELED for slices whose cancel did not take effect within the
// grace period, and keeps their memory (quarantine) until the I/O ends.
void FileTransport::watchdog() {
  std::unique_lock lk(mu_);
  while (!wd_stop_) {
    Outbox ob;
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (Slice* s : cancelling_) {
      if (s->reported || s->quarantined) continue;
      if (now >= s->deadline) {
        s->quarantined = true;
        detail::counters().quarantined++;
        HLOG_WARN("file: {} of '{}' [{}, +{}) did not stop within {} ms of its cancel; reported CANCELED and "
                  "quarantined (bounce buffer, descriptor and batch kept) until the kernel ends it",
                  opName(s->write), s->file->path, s->off, s->len, grace_.count());
        report(s, TransferState::kCanceled,
               Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled; the I/O had not stopped after {} "
                                                  "ms and is quarantined",
                                                  opName(s->write), s->file->path, s->off, s->len, grace_.count())),
               ob);
      } else {
        next = std::min(next, s->deadline);
      }
    }
    if (!ob.empty()) {
      lk.unlock();
      flush(ob);
      lk.lock();
      continue;
    }
    if (next == Clock::time_point::max())
      wd_cv_.wait(lk);
    else
      wd_cv_.wait_until(lk, next);
  }
}

}  // namespace
}  // namespace file

std::unique_ptr<Transport> makeFileTransport() { return std::make_unique<file::FileTransport>(); }

}  // namespace hawser
