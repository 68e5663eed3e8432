#include "engine/engine_impl.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <thread>

#include "base/log.h"
#include "engine/transport_list.h"

namespace hawser {

std::string localHostId() {
  std::string id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, id);
  char buf[256] = {0};
  ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  if (n > 0) {
    id.push_back('/');
    id.append(buf, static_cast<size_t>(n));
  }
  return id;
}

EngineImpl::EngineImpl() : config_(Config::fromEnv()) {}

EngineImpl::~EngineImpl() { shutdown(); }

Status EngineImpl::checkInit() const {
  if (!initialized_) return {Code::kInvalidArgument, "engine is not initialized: call init() first"};
  return Status::OK();
}

TransportContext EngineImpl::transportContext() {
  TransportContext ctx;
  ctx.config = &config_;
  ctx.registry = &registry_;
  ctx.rpc = &rpc_;
  ctx.server_name = server_name_;
  ctx.host = host_;
  ctx.rpc_port = rpc_.port();
  ctx.host_id = host_id_;
  return ctx;
}

void EngineImpl::abandonInit() {
  rpc_.stop();
  for (auto& t : transports_) t->shutdown();
  transports_.clear();
}

Status EngineImpl::init(const std::string& metadata_uri, const std::string& server_name, const std::string& host,
                        uint16_t rpc_port) {
  if (initialized_) return {Code::kInvalidArgument, "init() was already called on this engine"};
  server_name_ = server_name;
  host_ = host.empty() ? "127.0.0.1" : host;
  if (server_name_.empty()) server_name_ = host_;
  host_id_ = localHostId();
  forced_transport_ = config_.getString("transport", "");
  if (forced_transport_ == "nvmeof") forced_transport_ = "file";  // the reference's name for it
  // Default: a task may be cut into up to 16384 slices (256 MiB at 16 KiB).
  slices_per_task_ = std::max<uint64_t>(1, config_.getSize("batch.slices_per_task", 16384));
  rpc::setAuthToken(config_.getString("auth.token", ""));

  Status s = makeMetadataStore(metadata_uri, config_, &rpc_, store_);
  if (!s.ok()) return s;
  s = rpc_.start(host_, rpc_port);
  if (!s.ok()) return {s.code(), fmt::format("init: rpc listener on {}:{}: {}", host_, rpc_port, s.message())};
  segment_name_ = store_->localSegmentName(server_name_, host_, rpc_.port());

  const TransportContext ctx = transportContext();
  for (auto& f : transportFactories()) {
    std::unique_ptr<Transport> t = f.make();
    Status ts = t->install(ctx);
    if (ts.ok()) {
      HLOG_INFO("transport {} installed", t->name());
      transports_.push_back(std::move(t));
    } else {
      HLOG_INFO("transport {} not installed: {}", t->name(), ts.toString());
    }
  }
  if (!forced_transport_.empty()) {
    bool found = false;
    for (auto& t : transports_) found |= forced_transport_ == t->name();
    if (!found) {
      abandonInit();
      return {Code::kNoTransport, fmt::format("transport '{}' (forced by HAWSER_TRANSPORT) is not available here",
                                              forced_transport_)};
    }
  }
  s = store_->start(segment_name_, [this] { return localDescriptor(); });
  if (!s.ok()) {
    abandonInit();
    return s;
  }
  initialized_ = true;
  HLOG_INFO("engine '{}' serving segment '{}' on {}:{}", server_name_, segment_name_, host_, rpc_.port());
  return Status::OK();
}

void EngineImpl::shutdown() {
  if (!initialized_) return;
  // Give in-flight batches a bounded chance to finish.
  std::vector<std::shared_ptr<Batch>> live;
  {
    std::shared_lock lk(batch_mu_);
    for (auto& [id, b] : batches_) live.push_back(b);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& b : live) {
    std::unique_lock lk(b->done_mu_);
    b->done_cv_.wait_until(lk, deadline, [&] { return b->unfinished() == 0; });
  }
  store_->stop();
  rpc_.stop();
  for (auto& t : transports_) t->shutdown();
  {
    std::unique_lock lk(batch_mu_);
    for (auto& [id, b] : batches_) {
      std::lock_guard sl(b->submit_mu_);
      for (auto& [t, sb] : b->subs_) t->freeSubBatch(std::move(sb));
      b->subs_.clear();
    }
    batches_.clear();
  }
  transports_.clear();
  initialized_ = false;
}

Status EngineImpl::installTransport(std::unique_ptr<Transport> t) {
  Status s = checkInit();
  if (!s.ok()) return s;
  const TransportContext ctx = transportContext();
  s = t->install(ctx);
  if (!s.ok()) return s;
  std::lock_guard lk(reg_mu_);
  for (auto& r : registry_.snapshot()) {
    nlohmann::json a = nlohmann::json::object();
    s = t->registerMemory(reinterpret_cast<void*>(r.addr), r.length, r.location, r.remote_accessible, a);
    if (!s.ok()) return s;
  }
  transports_.insert(transports_.begin(), std::move(t));
  return Status::OK();
}

SegmentDesc EngineImpl::localDescriptor() const {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = segment_name_;
  d.host = host_;
  d.rpc_port = rpc_.port();
  d.host_id = host_id_;
  d.server_name = server_name_;
  d.pid = ::getpid();
  d.generation = registry_.version();
  for (auto& t : transports_) {
    nlohmann::json a = nlohmann::json::object();
    t->describe(a);
    d.transports[t->name()] = std::move(a);
  }
  std::lock_guard lk(attrs_mu_);
  for (auto& r : registry_.snapshot()) {
    if (!r.remote_accessible) continue;
    BufferDesc b;
    b.addr = r.addr;
    b.length = r.length;
    b.location = r.location;
    auto it = buffer_attrs_.find(r.addr);
    if (it != buffer_attrs_.end()) b.attrs = it->second;
    d.buffers.push_back(std::move(b));
  }
  return d;
}

std::vector<std::string> EngineImpl::transportNames() const {
  std::vector<std::string> out;
  for (auto& t : transports_) out.push_back(t->name());
  return out;
}

// ---- memory registration ---------------------------------------------------

Status EngineImpl::registerMemory(const std::vector<BufferEntry>& buffers) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (buffers.empty()) return {Code::kInvalidArgument, "buffers is empty"};
  std::lock_guard lk(reg_mu_);
  // Validate everything first: all or nothing.
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    auto a = reinterpret_cast<uint64_t>(b.addr);
    if (b.addr == nullptr) return {Code::kInvalidArgument, fmt::format("buffers[{}].addr is null", i)};
    if (b.length == 0) return {Code::kInvalidArgument, fmt::format("buffers[{}].length is 0 (addr {:#x})", i, a)};
    s = registry_.checkInsert(a, b.length);
    if (!s.ok()) return {s.code(), fmt::format("buffers[{}]: {}", i, s.message())};
    for (size_t j = 0; j < i; ++j) {
      auto o = reinterpret_cast<uint64_t>(buffers[j].addr);
      if (a < o + buffers[j].length && o < a + b.length)
        return {Code::kAddressOverlapped, fmt::format("buffers[{}] [{:#x}, +{}) overlaps buffers[{}] [{:#x}, +{})", i,
                                                      a, b.length, j, o, buffers[j].length)};
    }
  }
  // Register in every transport; undo on failure.
  size_t done = 0;
  std::vector<nlohmann::json> attrs(buffers.size(), nlohmann::json::object());
  for (; done < buffers.size(); ++done) {
    const auto& b = buffers[done];
    std::string loc = b.location.empty() || b.location == "*" ? "cpu:0" : b.location;
    size_t t = 0;
    for (; t < transports_.size(); ++t) {
      nlohmann::json a = nlohmann::json::object();
      s = transports_[t]->registerMemory(b.addr, b.length, loc, b.remote_accessible, a);
      if (!s.ok()) break;
      if (!a.is_null() && !(a.is_object() && a.empty())) attrs[done][transports_[t]->name()] = std::move(a);
    }
    if (!s.ok()) {
      for (size_t u = 0; u < t; ++u) (void)transports_[u]->unregisterMemory(b.addr, b.length);
      s = Status(s.code(), fmt::format("buffers[{}] in transport {}: {}", done, transports_[t]->name(), s.message()));
      break;
    }
    Region r;
    r.addr = reinterpret_cast<uint64_t>(b.addr);
    r.length = b.length;
    r.location = loc;
    r.remote_accessible = b.remote_accessible;
    (void)registry_.insert(r);  // validated above, under reg_mu_
  }
  if (!s.ok()) {
    for (size_t i = 0; i < done; ++i) {
      (void)registry_.erase(reinterpret_cast<uint64_t>(buffers[i].addr));
      for (auto& t : transports_) (void)t->unregisterMemory(buffers[i].addr, buffers[i].length);
    }
    return s;
  }
  {
    std::lock_guard al(attrs_mu_);
    for (size_t i = 0; i < buffers.size(); ++i)
      buffer_attrs_[reinterpret_cast<uint64_t>(buffers[i].addr)] = std::move(attrs[i]);
  }
  s = store_->publishLocal();
  if (!s.ok()) HLOG_WARN("registered memory but could not publish the descriptor: {}", s.toString());
  return Status::OK();
}

Status EngineImpl::unregisterMemory(const std::vector<void*>& addrs) {
  Status s = checkInit();
  if (!s.ok()) return s;
  std::lock_guard lk(reg_mu_);
  for (size_t i = 0; i < addrs.size(); ++i) {
    if (!registry_.find(reinterpret_cast<uint64_t>(addrs[i])))
      return {Code::kNotRegistered,
              fmt::format("addrs[{}] = {} is not the start of a registered region", i, addrs[i])};
  }
  for (void* a : addrs) {
    Region r;
    if (!registry_.erase(reinterpret_cast<uint64_t>(a), &r).ok()) continue;
    for (auto& t : transports_) {
      Status ts = t->unregisterMemory(a, r.length);
      if (!ts.ok()) HLOG_WARN("transport {}: unregister {}: {}", t->name(), a, ts.toString());
    }
    std::lock_guard al(attrs_mu_);
    buffer_attrs_.erase(reinterpret_cast<uint64_t>(a));
  }
  s = store_->publishLocal();
  if (!s.ok()) HLOG_WARN("unregistered memory but could not publish the descriptor: {}", s.toString());
  return Status::OK();
}

// ---- segments ----------------------------------------------------------------

Status EngineImpl::fetchSegment(const std::string& name, SegmentDesc& out) {
  if (name.rfind("file://", 0) == 0) {
    std::string path = name.substr(7);
    if (path.empty() || path[0] != '/')
      return {Code::kInvalidArgument, fmt::format("segment '{}': a file:// path must be absolute", name)};
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      int e = errno;
      Code c = e == ENOENT ? Code::kFileNotFound : e == EACCES ? Code::kPermissionDenied : Code::kIoError;
      return {c, fmt::format("segment '{}': stat '{}': {}", name, path, std::strerror(e))};
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
      return {Code::kInvalidArgument, fmt::format("segment '{}': '{}' is not a regular file", name, path)};
    uint64_t length = static_cast<uint64_t>(st.st_size);
    if (S_ISBLK(st.st_mode)) {  // st_size is 0 for a block device: ask the device
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::ioctl(fd, BLKGETSIZE64, &length) != 0) {
        int e = errno;
        if (fd >= 0) ::close(fd);
        return {e == EACCES ? Code::kPermissionDenied : Code::kIoError,
                fmt::format("segment '{}': size of block device '{}': {}", name, path, std::strerror(e))};
      }
      ::close(fd);
    }
    out = SegmentDesc{};
    out.kind = SegmentDesc::Kind::kFile;
    out.name = name;
    FileDesc f;
    f.file_path = path;
    f.length = length;
    out.files.push_back(std::move(f));
    return Status::OK();
  }
  return store_->getSegment(name, out);
}

Status EngineImpl::openSegment(const std::string& name, SegmentID& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (name.empty()) return {Code::kInvalidArgument, "segment name is empty"};
  {
    std::lock_guard lk(seg_mu_);
    auto it = segment_ids_.find(name);
    if (it != segment_ids_.end()) {
      segments_[it->second].refs++;
      out = it->second;
      return Status::OK();
    }
  }
  SegmentDesc d;
  s = fetchSegment(name, d);
  if (!s.ok()) return s;
  std::lock_guard lk(seg_mu_);
  auto it = segment_ids_.find(name);
  if (it != segment_ids_.end()) {  // raced with another open
    segments_[it->second].refs++;
    out = it->second;
    return Status::OK();
  }
  SegmentID id = next_segment_++;
  segments_[id] = OpenSegment{name, std::make_shared<const SegmentDesc>(std::move(d)), 1};
  segment_ids_[name] = id;
  out = id;
  return Status::OK();
}

Status EngineImpl::closeSegment(SegmentID id) {
  Status s = checkInit();
  if (!s.ok()) return s;
  std::shared_ptr<const SegmentDesc> closed;
  {
    std::lock_guard lk(seg_mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return {Code::kSegmentNotFound, fmt::format("segment id {} is not open", id)};
    if (--it->second.refs > 0) return Status::OK();
    closed = it->second.desc;
    segment_ids_.erase(it->second.name);
    segments_.erase(it);
  }
  for (auto& t : transports_) t->closeSegment(*closed);
  return Status::OK();
}

Status EngineImpl::segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto d = refreshSegment(id);
  if (!d) d = segmentDesc(id);
  if (!d) return {Code::kSegmentNotFound, fmt::format("segment id {} is not open", id)};
  out.clear();
  if (d->kind == SegmentDesc::Kind::kFile) {
    uint64_t off = 0;
    for (auto& f : d->files) {
      out.push_back(SegmentBuffer{off, f.length, f.file_path});
      off += f.length;
    }
  } else {
    for (auto& b : d->buffers) out.push_back(SegmentBuffer{b.addr, b.length, b.location});
  }
  return Status::OK();
}

std::shared_ptr<const SegmentDesc> EngineImpl::segmentDesc(SegmentID id) const {
  std::lock_guard lk(seg_mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second.desc;
}

std::shared_ptr<const SegmentDesc> EngineImpl::refreshSegment(SegmentID id) {
  std::string name;
  {
    std::lock_guard lk(seg_mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return nullptr;
    name = it->second.name;
  }
  SegmentDesc d;
  if (!fetchSegment(name, d).ok()) return nullptr;
  auto fresh = std::make_shared<const SegmentDesc>(std::move(d));
  std::lock_guard lk(seg_mu_);
  auto it = segments_.find(id);
  if (it == segments_.end()) return nullptr;
  it->second.desc = fresh;
  return fresh;
}

Status EngineImpl::registerFileSegment(const std::string& name, const std::vector<FileDesc>& files) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (name.empty()) return {Code::kInvalidArgument, "file segment name is empty"};
  if (name.rfind("file://", 0) == 0)
    return {Code::kInvalidArgument, fmt::format("file segment name '{}' must not start with file://", name)};
  if (files.empty()) return {Code::kInvalidArgument, fmt::format("file segment '{}' has no files", name)};
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].length == 0)
      return {Code::kInvalidArgument, fmt::format("file segment '{}': files[{}].length is 0", name, i)};
    if (files[i].file_path.empty() && files[i].local_path_map.empty())
      return {Code::kInvalidArgument, fmt::format("file segment '{}': files[{}] has no path", name, i)};
  }
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = name;
  d.files = files;
  return store_->putFileSegment(d);
}

Status EngineImpl::unregisterFileSegment(const std::string& name) {
  Status s = checkInit();
  if (!s.ok()) return s;
  return store_->removeSegment(name);
}

// ---- batches -------------------------------------------------------------------

Status EngineImpl::allocateBatch(size_t capacity, BatchID& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (capacity == 0) return {Code::kInvalidArgument, "capacity is 0"};
  const size_t max_cap = config_.getSize("batch.max_capacity", 1 << 20);
  if (capacity > max_cap)
    return {Code::kInvalidArgument, fmt::format("capacity {} exceeds batch.max_capacity {}", capacity, max_cap)};
  std::shared_ptr<Batch> b;
  std::unique_lock lk(batch_mu_);
  BatchID id = next_batch_++;
  try {
    b = std::make_shared<Batch>(id, capacity, capacity * slices_per_task_);
  } catch (const std::bad_alloc&) {
    return {Code::kInvalidArgument, fmt::format("capacity {}: out of memory", capacity)};
  }
  batches_[id] = std::move(b);
  out = id;
  return Status::OK();
}

std::shared_ptr<Batch> EngineImpl::findBatch(BatchID id) const {
  std::shared_lock lk(batch_mu_);
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second;
}

Transport* EngineImpl::selectTransport(const SegmentDesc& seg, const std::string& local_location) const {
  for (auto& t : transports_) {
    if (!forced_transport_.empty() && forced_transport_ != t->name()) {
      // A forced transport applies to memory segments; file segments always
      // go to the transport that serves files.
      if (seg.kind == SegmentDesc::Kind::kMemory) continue;
    }
    if (t->canServe(seg, local_location)) return t.get();
  }
  return nullptr;
}

static Status bad(size_t i, Status s) { return {s.code(), fmt::format("requests[{}]: {}", i, s.message())}; }

Status EngineImpl::submit(BatchID id, const std::vector<TransferRequest>& reqs) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  if (reqs.empty()) return Status::OK();
  std::lock_guard sl(batch->submit_mu_);
  const size_t base = batch->taskCount();
  if (reqs.size() > batch->capacity() - base)
    return {Code::kCapacityExceeded, fmt::format("batch {} holds {} of {} tasks; {} more requested", id, base,
                                                 batch->capacity(), reqs.size())};

  // 1. Validate every request and pick its transport.
  std::vector<std::shared_ptr<const SegmentDesc>> descs(reqs.size());
  std::vector<Transport*> chosen(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    if (r.opcode != OpCode::kRead && r.opcode != OpCode::kWrite)
      return bad(i, {Code::kInvalidArgument, fmt::format("opcode {} is neither READ nor WRITE", int(r.opcode))});
    if (r.length == 0) return bad(i, {Code::kInvalidArgument, "length is 0"});
    if (r.source == nullptr) return bad(i, {Code::kInvalidArgument, "source is null"});
    auto desc = segmentDesc(r.target_id);
    if (!desc)
      return bad(i, {Code::kSegmentNotFound, fmt::format("target_id {} is not an open segment", r.target_id)});
    // A store that tracks changes (etcd watch) flags a stale cached descriptor
    // (owner restarted or re-registered); refresh it, keep the old one if that fails.
    if (desc->name.rfind("file://", 0) != 0 && store_->mayHaveChanged(desc->name, desc->generation)) {
      if (auto fresh = refreshSegment(r.target_id)) desc = fresh;
    }
    const uint64_t src = reinterpret_cast<uint64_t>(r.source);
    if (src + r.length < src) return bad(i, {Code::kInvalidArgument, "source + length wraps around"});
    std::string loc;
    s = registry_.checkLocal(src, r.length, &loc);
    if (!s.ok()) return bad(i, s);
    if (desc->kind == SegmentDesc::Kind::kMemory) {
      if (r.target_offset + r.length < r.target_offset)
        return bad(i, {Code::kOutOfRange, "target_offset + length wraps around"});
      if (desc->findBuffer(r.target_offset, r.length) < 0) {
        auto fresh = refreshSegment(r.target_id);  // the owner may have registered it since
        if (fresh) desc = fresh;
        if (desc->findBuffer(r.target_offset, r.length) < 0)
          return bad(i, {Code::kOutOfRange,
                         fmt::format("remote range [{:#x}, +{}) is not inside one registered buffer of segment '{}'",
                                     r.target_offset, r.length, desc->name)});
      }
    }
    Transport* t = selectTransport(*desc, loc);
    if (!t)
      return bad(i, {Code::kNoTransport,
                     fmt::format("no installed transport ({}) can reach segment '{}'{}",
                                 fmt::join(transportNames(), ","), desc->name,
                                 forced_transport_.empty() ? "" : " with HAWSER_TRANSPORT=" + forced_transport_)});
    descs[i] = std::move(desc);
    chosen[i] = t;
  }

  // 2. Lay the tasks out (not yet visible: task_count_ is unchanged).
  std::map<Transport*, std::vector<Task*>> groups;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Task& t = batch->task(base + i);
    t.request_ = reqs[i];
    t.segment_ = descs[i];
    t.id_ = base + i;
    t.slices_total_ = 0;
    t.slices_done_ = 0;
    t.bytes_done_ = 0;
    t.worst_rank_ = 0;
    t.submitted_ = false;
    t.transport_word = 0;
    t.error_ = Status::OK();
    groups[chosen[i]].push_back(&t);
  }

  // 3. Prepare in every transport involved; all or nothing.
  size_t slices = 0;
  std::vector<Transport*> prepared;
  auto undo = [&] {
    for (Transport* t : prepared) t->discard(*batch->subs_[t]);
  };
  for (auto& [t, tasks] : groups) {
    auto& sb = batch->subs_[t];
    if (!sb) {
      s = t->allocateSubBatch(batch->capacity(), sb);
      if (!s.ok() || !sb) {
        batch->subs_.erase(t);
        undo();
        return {s.ok() ? Code::kInternal : s.code(),
                fmt::format("transport {}: cannot allocate a sub-batch: {}", t->name(), s.message())};
      }
    }
    size_t n = 0;
    s = t->prepare(*sb, std::span<Task* const>(tasks.data(), tasks.size()), n);
    if (!s.ok()) {
      undo();
      return s;
    }
    prepared.push_back(t);
    slices += n;
  }
  if (slices > batch->sliceCapacity() - batch->slices_used_) {
    undo();
    return {Code::kCapacityExceeded, fmt::format("batch {} holds {} of {} slices; these requests need {} more", id,
                                                 batch->slices_used_, batch->sliceCapacity(), slices)};
  }

  // 4. Commit and post.
  batch->slices_used_ += slices;
  batch->unfinished_.fetch_add(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) batch->task(base + i).submitted_.store(true, std::memory_order_release);
  batch->task_count_.store(base + reqs.size(), std::memory_order_release);
  for (Transport* t : prepared) t->submit(*batch->subs_[t]);
  return Status::OK();
}

Status EngineImpl::taskStatus(BatchID id, size_t task, TransferStatus& st) {
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  size_t n = batch->taskCount();
  if (task >= n)
    return {Code::kInvalidArgument, fmt::format("task_id {} is not in batch {} ({} tasks submitted)", task, id, n)};
  for (auto& t : transports_)
    if (t->caps().needs_polling) {
      std::unique_lock sl(batch->submit_mu_, std::try_to_lock);
      if (sl) {
        auto it = batch->subs_.find(t.get());
        if (it != batch->subs_.end()) t->poll(*it->second);
      }
    }
  st = batch->task(task).status();
  return Status::OK();
}

Status EngineImpl::batchStatus(BatchID id, TransferStatus& st) {
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  st = batch->aggregate();
  return Status::OK();
}

Status EngineImpl::wait(BatchID id, std::chrono::milliseconds timeout) {
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool polling = false;
  for (auto& t : transports_) polling |= t->caps().needs_polling;
  while (true) {
    if (polling) {
      std::lock_guard sl(batch->submit_mu_);
      for (auto& [t, sb] : batch->subs_)
        if (t->caps().needs_polling) t->poll(*sb);
    }
    std::unique_lock lk(batch->done_mu_);
    if (batch->unfinished() == 0) return Status::OK();
    auto until = polling ? std::min(deadline, std::chrono::steady_clock::now() + std::chrono::microseconds(200))
                         : deadline;
    batch->done_cv_.wait_until(lk, until, [&] { return batch->unfinished() == 0; });
    if (batch->unfinished() == 0) return Status::OK();
    if (std::chrono::steady_clock::now() >= deadline)
      return {Code::kTimeout, fmt::format("batch {}: {} task(s) unfinished after {} ms", id, batch->unfinished(),
                                          timeout.count())};
  }
}

Status EngineImpl::cancel(BatchID id) {
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  std::lock_guard sl(batch->submit_mu_);
  for (auto& [t, sb] : batch->subs_) t->cancel(*sb);
  return Status::OK();
}

Status EngineImpl::freeBatch(BatchID id) {
  std::shared_ptr<Batch> batch;
  {
    std::unique_lock lk(batch_mu_);
    auto it = batches_.find(id);
    if (it == batches_.end())
      return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
    batch = it->second;
    std::lock_guard sl(batch->submit_mu_);
    size_t left = batch->unfinished();
    if (left > 0) return {Code::kBatchBusy, fmt::format("batch {} has {} unfinished task(s)", id, left)};
    for (auto& [t, sb] : batch->subs_) {
      if (t->caps().needs_polling) t->poll(*sb);
      if (!t->idle(*sb))
        return {Code::kBatchBusy, fmt::format("batch {}: transport {} still has I/O referencing its memory", id,
                                              t->name())};
    }
    batches_.erase(it);
  }
  // Nobody can reach the batch now; wait out a completer still inside taskFinished().
  { std::lock_guard dl(batch->done_mu_); }
  std::lock_guard sl(batch->submit_mu_);
  for (auto& [t, sb] : batch->subs_) t->freeSubBatch(std::move(sb));
  batch->subs_.clear();
  return Status::OK();
}

// ---- public facade -------------------------------------------------------------

TransferEngine::TransferEngine() : impl_(std::make_unique<EngineImpl>()) {}
TransferEngine::~TransferEngine() = default;

Status TransferEngine::init(const std::string& metadata_uri, const std::string& local_server_name,
                            const std::string& host, uint16_t rpc_port) {
  return impl_->init(metadata_uri, local_server_name, host, rpc_port);
}
uint16_t TransferEngine::rpcPort() const { return impl_->rpcPort(); }
std::string TransferEngine::segmentName() const { return impl_->segmentName(); }
Status TransferEngine::registerLocalMemory(void* addr, size_t length, const std::string& location,
                                           bool remote_accessible) {
  return impl_->registerMemory({BufferEntry{addr, length, location, remote_accessible}});
}
Status TransferEngine::registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers) {
  return impl_->registerMemory(buffers);
}
Status TransferEngine::unregisterLocalMemory(void* addr) { return impl_->unregisterMemory({addr}); }
Status TransferEngine::unregisterLocalMemoryBatch(const std::vector<void*>& addrs) {
  return impl_->unregisterMemory(addrs);
}
Status TransferEngine::openSegment(const std::string& name, SegmentID& out) { return impl_->openSegment(name, out); }
Status TransferEngine::closeSegment(SegmentID id) { return impl_->closeSegment(id); }
Status TransferEngine::segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out) {
  return impl_->segmentBuffers(id, out);
}
Status TransferEngine::registerFileSegment(const std::string& name, const std::vector<FileDesc>& files) {
  return impl_->registerFileSegment(name, files);
}
Status TransferEngine::unregisterFileSegment(const std::string& name) { return impl_->unregisterFileSegment(name); }
Status TransferEngine::allocateBatchID(size_t capacity, BatchID& out) { return impl_->allocateBatch(capacity, out); }
Status TransferEngine::submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests) {
  return impl_->submit(batch, requests);
}
Status TransferEngine::getTransferStatus(BatchID batch, size_t task_id, TransferStatus& status) {
  return impl_->taskStatus(batch, task_id, status);
}
Status TransferEngine::getBatchTransferStatus(BatchID batch, TransferStatus& status) {
  return impl_->batchStatus(batch, status);
}
Status TransferEngine::waitTransfer(BatchID batch, std::chrono::milliseconds timeout) {
  return impl_->wait(batch, timeout);
}
Status TransferEngine::cancelTransfer(BatchID batch) { return impl_->cancel(batch); }
Status TransferEngine::freeBatchID(BatchID batch) { return impl_->freeBatch(batch); }
std::vector<std::string> TransferEngine::transports() const { return impl_->transportNames(); }

}  // namespace hawser
