// The nvlink data path: prepare cuts tasks into stripes over a GPU's streams,
// post queues them on the stream workers, each worker issues copies and
// completes them through events; cancel takes back what was not issued.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "base/log.h"
#include "base/registry.h"
#include "gpu/cuda_driver.h"
#include "metadata/descriptor.h"
#include "transport/nvlink/nvlink_internal.h"

namespace hawser::nvlink {

namespace {
using Clock = std::chrono::steady_clock;
}

// ---- sub-batch ----------------------------------------------------------------

Status SubBatchImpl::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "nvlink transport is not running"};
  const uint64_t stripe = owner_->settings_.stripe_size;
  std::vector<uint32_t> counts(tasks.size());
  std::vector<int> devs(tasks.size());
  std::map<int, std::vector<StreamWorker*>> ws;
  size_t total = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = *tasks[i];
    const TransferRequest& r = t.request();
    const auto* ref = static_cast<const PeerRef*>(t.peer());
    const int bi = t.remoteBuffer();
    if (bi < 0 || static_cast<size_t>(bi) >= ref->bufs.size())
      return {Code::kInternal, fmt::format("requests[{}]: no remote buffer index for nvlink", t.id())};
    const BufferInfo& b = ref->bufs[static_cast<size_t>(bi)];
    if (!b.exported)
      return {Code::kNotSupported, fmt::format("requests[{}]: remote range [{:#x}, +{}) of segment '{}' cannot go "
                                               "over nvlink: {}", t.id(), r.target_offset, r.length, ref->segment,
                                               b.why)};
    if (r.target_offset < b.base || r.target_offset + r.length > b.base + b.size)
      return {Code::kOutOfRange, fmt::format("requests[{}]: remote range [{:#x}, +{}) is outside its allocation",
                                             t.id(), r.target_offset, r.length)};
    std::string loc;
    Status s = owner_->registry_->checkLocal(t.localAddr(), r.length, &loc);
    if (!s.ok()) return {s.code(), fmt::format("requests[{}]: {}", t.id(), s.message())};
    int dev = -1;
    if (memoryKindOf(loc) == kGpuMemory) std::from_chars(loc.data() + 5, loc.data() + loc.size(), dev);
    if (dev < 0)
      return {Code::kNotSupported, fmt::format("requests[{}]: local memory is {}; nvlink moves GPU memory only",
                                               t.id(), loc)};
    if (!ws.count(dev)) {
      if (!(s = owner_->workers(dev, ws[dev])).ok()) return s;
    }
    const uint64_t n = (r.length + stripe - 1) / stripe;
    if (n > UINT32_MAX)
      return {Code::kInvalidArgument, fmt::format("requests[{}]: length {} needs {} stripes", t.id(), r.length, n)};
    counts[i] = static_cast<uint32_t>(n);
    devs[i] = dev;
    total += n;
  }

  auto work = std::make_unique<Work>();
  work->chunk.reset(new Slice[total]);
  work->slices = total;
  size_t k = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task* t = tasks[i];
    const TransferRequest& r = t->request();
    auto* ref = static_cast<PeerRef*>(t->peer());
    const auto& streams = ws[devs[i]];
    const uint32_t rr = owner_->rr_.fetch_add(counts[i], std::memory_order_relaxed);
    uint64_t off = 0;
    for (uint32_t j = 0; j < counts[i]; ++j) {
      Slice& s = work->chunk[k++];
      s.task = t;
      s.sb = this;
      s.peer = ref;
      s.worker = streams[(rr + j) % streams.size()];
      s.buf = static_cast<uint32_t>(t->remoteBuffer());
      s.is_read = r.opcode == OpCode::kRead;
      s.local = static_cast<char*>(r.source) + off;
      s.remote = r.target_offset + off;
      s.len = std::min<uint64_t>(stripe, r.length - off);
      off += s.len;
    }
    t->setSliceCount(counts[i]);
  }
  out = std::move(work);
  return Status::OK();
}

void SubBatchImpl::post(std::unique_ptr<PreparedWork> base) {
  std::unique_ptr<Slice[]> chunk = std::move(static_cast<Work&>(*base).chunk);
  const size_t n = base->slices;
  Slice* arr = chunk.get();
  std::map<StreamWorker*, std::vector<Slice*>> by;
  for (size_t i = 0; i < n; ++i) by[arr[i].worker].push_back(&arr[i]);
  {
    std::lock_guard lk(mu_);
    chunks_.push_back(std::move(chunk));
    chunk_sizes_.push_back(n);
    for (auto& [w, v] : by)
      if (std::find(used_.begin(), used_.end(), w) == used_.end()) used_.push_back(w);
  }
  outstanding.fetch_add(static_cast<int64_t>(n), std::memory_order_acq_rel);
  for (size_t i = 0; i < n; ++i) arr[i].state.store(kSliceQueued, std::memory_order_relaxed);
  for (auto& [w, v] : by) w->post(v);  // a stopped worker fails them
}

void SubBatchImpl::cancel() {
  bool any = false;
  std::vector<StreamWorker*> used;
  {
    std::lock_guard lk(mu_);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      Slice* arr = chunks_[c].get();
      for (size_t i = 0; i < chunk_sizes_[c]; ++i) {
        uint8_t expect = kSliceQueued;
        if (arr[i].state.compare_exchange_strong(expect, kSliceCanceled, std::memory_order_acq_rel)) {
          any = true;
          arr[i].task->completeSlice(TransferState::kCanceled, 0,
                                     Status(Code::kUnavailable, "canceled by cancelTransfer before it was issued"));
        }
      }
    }
    used = used_;
  }
  if (!any) return;
  // Take them off the queues now, so the sub-batch is idle once its tasks
  // are terminal.
  for (StreamWorker* w : used) outstanding.fetch_sub(static_cast<int64_t>(w->purge(this)), std::memory_order_acq_rel);
}

SubBatchImpl::~SubBatchImpl() {
  // The engine frees only idle sub-batches; never free slices a worker still
  // holds (wait a bounded time, then leak rather than corrupt).
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (outstanding.load(std::memory_order_acquire) != 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (outstanding.load(std::memory_order_acquire) != 0) {
    HLOG_ERROR("nvlink: sub-batch destroyed with {} slice(s) still in flight; leaking its slices", outstanding.load());
    std::lock_guard lk(mu_);
    for (auto& c : chunks_) (void)c.release();
  }
}

// ---- stream worker ------------------------------------------------------------

StreamWorker::StreamWorker(int device, uint32_t depth, std::shared_ptr<Counters> counters)
    : device_(device), depth_(depth), counters_(std::move(counters)) {}

StreamWorker::~StreamWorker() { stop(); }

Status StreamWorker::start() {
  thread_ = std::thread([this] { run(); });
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return started_; });
  return start_status_;
}

void StreamWorker::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamWorker::post(std::vector<Slice*>& slices) {
  {
    std::lock_guard lk(mu_);
    if (!stop_) {
      queue_.insert(queue_.end(), slices.begin(), slices.end());
      cv_.notify_all();
      return;
    }
  }
  for (Slice* s : slices) {
    s->state.store(kSliceCommitted, std::memory_order_relaxed);
    fail(s, Code::kUnavailable, "nvlink transport shut down");
  }
}

size_t StreamWorker::purge(const SubBatchImpl* sb) {
  std::lock_guard lk(mu_);
  size_t before = queue_.size();
  std::erase_if(queue_, [&](Slice* s) {
    return s->sb == sb && s->state.load(std::memory_order_acquire) == kSliceCanceled;
  });
  return before - queue_.size();
}

void StreamWorker::fail(Slice* s, Code code, const std::string& why) {
  SubBatchImpl* sb = s->sb;
  counters_->slices_failed.fetch_add(1, std::memory_order_relaxed);
  s->task->completeSlice(TransferState::kFailed, 0, Status(code, why));
  sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);  // s may be freed from here on
}

void StreamWorker::run() {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  Status st = d ? d->bindDevice(device_) : Status(Code::kNotSupported, "no CUDA driver");
  if (st.ok())
    st = d->check(d->api().StreamCreate(&stream_, gpu::cu::kStreamNonBlocking),
                  fmt::format("cuStreamCreate(GPU {})", device_), Code::kNotSupported);
  {
    std::lock_guard lk(mu_);
    started_ = true;
    start_status_ = st;
  }
  cv_.notify_all();
  if (!st.ok()) return;

  std::vector<Slice*> take;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lk(mu_);
      if (inflight_.empty()) cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      stopping = stop_;
      if (stopping) {
        take.assign(queue_.begin(), queue_.end());
        queue_.clear();
      } else {
        while (inflight_.size() + take.size() < depth_ && !queue_.empty()) {
          take.push_back(queue_.front());
          queue_.pop_front();
        }
      }
    }
    if (stopping) {
      for (Slice* s : take) {
        uint8_t expect = kSliceQueued;
        if (s->state.compare_exchange_strong(expect, kSliceCommitted, std::memory_order_acq_rel))
          fail(s, Code::kUnavailable, "nvlink transport shut down");
        else
          s->sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);  // canceled
      }
      while (!inflight_.empty()) {
        finish(inflight_.front());
        inflight_.pop_front();
      }
      break;
    }
    for (Slice* s : take) issue(s);
    take.clear();
    if (!inflight_.empty()) {
      finish(inflight_.front());
      inflight_.pop_front();
    }
  }
  for (auto e : spare_) d->api().EventDestroy(e);
  d->api().StreamDestroy(stream_);
}

void StreamWorker::issue(Slice* s) {
  uint8_t expect = kSliceQueued;
  if (!s->state.compare_exchange_strong(expect, kSliceCommitted, std::memory_order_acq_rel)) {
    s->sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);  // canceled: already completed
    return;
  }
  PeerRef& p = *s->peer;
  Owner& o = *p.owner;
  const BufferInfo& b = p.bufs[s->buf];
  if (o.dead.load(std::memory_order_acquire))
    return fail(s, Code::kUnavailable, fmt::format("the owner of segment '{}', {}, has exited", p.segment, o.name));
  if (!o.valid(b.slot, b.gen)) {
    counters_->withdrawn_refusals.fetch_add(1, std::memory_order_relaxed);
    return fail(s, Code::kOutOfRange,
                fmt::format("remote range [{:#x}, +{}) of segment '{}' was withdrawn by its owner (unregistered)",
                            s->remote, s->len, p.segment));
  }
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  Mapping* m = nullptr;
  bool switched = false;
  Status st = p.mapping(s->buf, m, switched);
  if (switched) (void)d->bindDevice(device_);
  if (!st.ok()) return fail(s, st.code(), st.message());
  uint64_t base = 0;
  if (!m->acquire(base))
    return fail(s, Code::kUnavailable, fmt::format("the owner of segment '{}', {}, has exited", p.segment, o.name));
  const auto remote = static_cast<gpu::cu::DevicePtr>(base + (s->remote - b.base));
  const auto local = reinterpret_cast<gpu::cu::DevicePtr>(s->local);
  const gpu::cu::DevicePtr dst = s->is_read ? local : remote, src = s->is_read ? remote : local;
  gpu::cu::Result rc;
  if (m->device == device_) {
    rc = d->api().MemcpyAsync(dst, src, s->len, stream_);
  } else {
    gpu::cu::Context lc = d->context(device_), rcx = d->context(m->device);
    rc = d->api().MemcpyPeerAsync(dst, s->is_read ? lc : rcx, src, s->is_read ? rcx : lc, s->len, stream_);
    counters_->peer_copies.fetch_add(1, std::memory_order_relaxed);
  }
  if (rc != gpu::cu::kSuccess) {
    m->release();
    st = d->check(rc, fmt::format("copy of {} bytes {} GPU {} (segment '{}')", s->len, s->is_read ? "to" : "from",
                                  device_, p.segment));
    return fail(s, st.code(), st.message());
  }
  gpu::cu::Event e = nullptr;
  if (!spare_.empty()) {
    e = spare_.back();
    spare_.pop_back();
  } else if (d->api().EventCreate(&e, gpu::cu::kEventBlockingSync | gpu::cu::kEventDisableTiming) !=
             gpu::cu::kSuccess) {
    e = nullptr;
  }
  if (e && d->api().EventRecord(e, stream_) != gpu::cu::kSuccess) {
    spare_.push_back(e);
    e = nullptr;
  }
  inflight_.push_back(Pending{s, e, m});
}

void StreamWorker::finish(Pending& p) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  // Without an event (none could be made), the whole stream is waited for.
  gpu::cu::Result rc = p.event ? d->api().EventSynchronize(p.event) : d->api().StreamSynchronize(stream_);
  if (p.event) spare_.push_back(p.event);
  p.mapping->release();
  Slice* s = p.slice;
  if (rc != gpu::cu::kSuccess) {
    Status st = d->check(rc, fmt::format("copy on GPU {} (segment '{}')", device_, s->peer->segment));
    return fail(s, st.code(), st.message());
  }
  const uint64_t len = s->len;
  SubBatchImpl* sb = s->sb;
  counters_->slices_completed.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(len, std::memory_order_relaxed);
  s->task->completeSlice(TransferState::kCompleted, len);
  sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace hawser::nvlink
