// The nvlink data path. prepare() cuts tasks into stripes spread over a
// GPU's streams; prepareRuns() takes a block request's window of runs as
// one group for the GPU's first stream; post() queues the groups on the
// stream workers. A worker checks each group's owners and regions once per
// buffer, queues the whole group with one CopyStream::copyRuns (one launch
// of hawser's copy kernel for a window of small runs: gpu/batch_copy.h),
// waits for it, and ends its items; cancel() takes back groups not issued.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "base/log.h"
#include "base/registry.h"
#include "gpu/cuda_driver.h"
#include "metadata/descriptor.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/nvlink/nvlink_testing.h"

namespace hawser::nvlink {

namespace testing {
std::atomic<CheckHook> before_check{nullptr};
}

namespace {
using Clock = std::chrono::steady_clock;
uint64_t nanos(Clock::time_point from, Clock::time_point to) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}
}  // namespace

void endItems(Group& g, size_t first, size_t n, TransferState state, const Status& why) {
  if (n == 0) return;
  if (g.sink) {
    g.sink->runsEnded(n, 0, 0, state, why);
    return;
  }
  for (size_t i = first; i < first + n; ++i) g.items[i].task->completeSlice(state, 0, why);
}

namespace {
// Ends the copies of `g` that were issued, all with one outcome.
void endIssued(Group& g, size_t issued, uint64_t bytes, TransferState state, const Status& why) {
  if (g.sink) {
    g.sink->runsEnded(issued, state == TransferState::kCompleted ? issued : 0, bytes, state, why);
    return;
  }
  for (Item& it : g.items)
    if (it.issued) it.task->completeSlice(state, state == TransferState::kCompleted ? it.len : 0, why);
}
}  // namespace

// ---- sub-batch ----------------------------------------------------------------

Status SubBatchImpl::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "nvlink transport is not running"};
  const uint64_t stripe = owner_->settings_.stripe_size;
  std::vector<uint32_t> counts(tasks.size());
  std::vector<int> devs(tasks.size());
  std::map<int, std::vector<StreamWorker*>> ws;
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
    // The local region's GPU, found at submit.
    const LocalRegion& lr = t.region();
    Status s;
    if (lr.gpu < 0)
      return {Code::kNotSupported, fmt::format("requests[{}]: local memory is host memory; nvlink moves GPU memory only",
                                               t.id())};
    if (!ws.count(lr.gpu)) {
      if (!(s = owner_->workers(lr.gpu, ws[lr.gpu])).ok()) return s;
    }
    const uint64_t n = (r.length + stripe - 1) / stripe;
    if (n > UINT32_MAX)
      return {Code::kInvalidArgument, fmt::format("requests[{}]: length {} needs {} stripes", t.id(), r.length, n)};
    counts[i] = static_cast<uint32_t>(n);
    devs[i] = lr.gpu;
  }

  // One group per stream: the stripes of each task spread over the GPU's streams.
  auto work = std::make_unique<Work>();
  std::map<StreamWorker*, Group*> by;
  size_t total = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task* t = tasks[i];
    const TransferRequest& r = t->request();
    auto* ref = static_cast<PeerRef*>(t->peer());
    const auto& streams = ws[devs[i]];
    const uint32_t rr = owner_->rr_.fetch_add(counts[i], std::memory_order_relaxed);
    uint64_t off = 0;
    for (uint32_t j = 0; j < counts[i]; ++j) {
      StreamWorker* w = streams[(rr + j) % streams.size()];
      Group*& g = by[w];
      if (!g) {
        work->groups.push_back(std::make_unique<Group>());
        g = work->groups.back().get();
        g->sb = this;
        g->worker = w;
      }
      Item it;
      it.task = t;
      it.peer = ref;
      it.buf = static_cast<uint32_t>(t->remoteBuffer());
      it.is_read = r.opcode == OpCode::kRead;
      it.local = static_cast<char*>(r.source) + off;
      it.remote = r.target_offset + off;
      it.len = std::min<uint64_t>(stripe, r.length - off);
      off += it.len;
      g->items.push_back(it);
    }
    t->setSliceCount(counts[i]);
    total += counts[i];
  }
  work->slices = total;
  out = std::move(work);
  return Status::OK();
}

Status SubBatchImpl::prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "nvlink transport is not running"};
  auto* ref = static_cast<PeerRef*>(w.peer);
  auto work = std::make_unique<Work>();
  auto group = [&](int dev, Group*& g) -> Status {
    std::vector<StreamWorker*> ws;
    Status s = owner_->workers(dev, ws);
    if (!s.ok()) return s;
    work->groups.push_back(std::make_unique<Group>());
    g = work->groups.back().get();
    g->sb = this;
    g->worker = ws.front();
    g->sink = w.sink;
    g->source = w.source;
    g->nruns = w.count;
    g->peer = ref;
    g->is_read = w.op == OpCode::kRead;
    return Status::OK();
  };
  const bool keepable = !w.plan.expired() && owner_->settings_.plan_cache > 0;
  // A prepared plan's window posted before: its run list is on the GPU, its
  // runs were checked then (the plan is immutable); only its buffers are
  // checked again, by the worker, once each.
  if (keepable) {
    if (auto kept = owner_->cache_->find(w.plan, w.first)) {
      bool exported = true;
      for (auto& [buf, base] : kept->bases) exported &= buf < ref->bufs.size() && ref->bufs[buf].exported;
      if (exported) {
        Group* g = nullptr;
        if (Status s = group(kept->pieces.device, g); !s.ok()) return s;
        g->cached = std::move(kept);
        g->plan = w.plan;
        g->first = w.first;
        work->slices = w.count;
        out = std::move(work);
        return Status::OK();
      }
      owner_->cache_->drop(kept.get());
    }
  }
  const std::span<const RunRef> runs = w.runs();
  // Every run checked against its buffer's allocation; the GPU of each
  // local region found once.
  int last_buf = -1;
  const BufferInfo* b = nullptr;
  int device = -1;
  bool one_device = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRef& r = runs[i];
    if (r.buffer != last_buf) {
      if (r.buffer < 0 || static_cast<size_t>(r.buffer) >= ref->bufs.size())
        return {Code::kInternal, fmt::format("blocks: run {} has no remote buffer index for nvlink", i)};
      b = &ref->bufs[static_cast<size_t>(r.buffer)];
      last_buf = r.buffer;
      if (!b->exported)
        return {Code::kNotSupported, fmt::format("blocks: remote range [{:#x}, +{}) of segment '{}' cannot go over "
                                                 "nvlink: {}", r.remote, r.length, ref->segment, b->why)};
    }
    if (r.remote < b->base || r.remote + r.length > b->base + b->size)
      return {Code::kOutOfRange,
              fmt::format("blocks: remote range [{:#x}, +{}) is outside its allocation", r.remote, r.length)};
    const int dev = r.region < w.regions.size() ? w.regions[r.region].gpu : -1;
    if (dev < 0)
      return {Code::kNotSupported,
              fmt::format("blocks: local range [{:#x}, +{}) is host memory; nvlink moves GPU memory only", r.local,
                          r.length)};
    if (device < 0) device = dev;
    one_device &= dev == device;
  }
  // A window goes to its GPU's first stream as one group: one launch copies
  // it, and windows of one GPU queue one after another there, so the
  // kernel's CTAs never exceed gpu.copy_max_ctas per GPU.
  if (one_device) {
    Group* g = nullptr;
    if (Status s = group(device, g); !s.ok()) return s;
    g->runs = runs.data();
    if (keepable) {
      g->plan = w.plan;
      g->first = w.first;
    }
  } else {
    std::map<int, Group*> by;
    for (const RunRef& r : runs) {
      const int dev = w.regions[r.region].gpu;
      Group*& g = by[dev];
      if (!g) {
        if (Status s = group(dev, g); !s.ok()) return s;
        g->nruns = 0;
      }
      Item it;
      it.peer = ref;
      it.buf = static_cast<uint32_t>(r.buffer);
      it.is_read = w.op == OpCode::kRead;
      it.local = reinterpret_cast<char*>(r.local);
      it.remote = r.remote;
      it.len = r.length;
      g->items.push_back(it);
    }
  }
  work->slices = w.count;
  out = std::move(work);
  return Status::OK();
}

void SubBatchImpl::post(std::unique_ptr<PreparedWork> base) {
  auto& work = static_cast<Work&>(*base);
  std::vector<Group*> gs;
  {
    std::lock_guard lk(mu_);
    for (auto& g : work.groups) {
      gs.push_back(g.get());
      if (std::find(used_.begin(), used_.end(), g->worker) == used_.end()) used_.push_back(g->worker);
      groups_.push_back(std::move(g));
    }
  }
  outstanding.fetch_add(static_cast<int64_t>(gs.size()), std::memory_order_acq_rel);
  for (Group* g : gs) g->state.store(kGroupQueued, std::memory_order_relaxed);
  for (Group* g : gs) g->worker->post(g);  // a stopped worker fails it
}

void SubBatchImpl::cancel() {
  bool any = false;
  std::vector<StreamWorker*> used;
  {
    std::lock_guard lk(mu_);
    for (auto& g : groups_) {
      uint8_t expect = kGroupQueued;
      if (g->state.compare_exchange_strong(expect, kGroupCanceled, std::memory_order_acq_rel)) {
        any = true;
        endItems(*g, 0, g->size(), TransferState::kCanceled,
                 Status(Code::kUnavailable, "canceled by cancelTransfer before it was issued"));
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
  // The engine frees only idle sub-batches; never free groups a worker still
  // holds (wait a bounded time, then leak rather than corrupt).
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (outstanding.load(std::memory_order_acquire) != 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (outstanding.load(std::memory_order_acquire) != 0) {
    HLOG_ERROR("nvlink: sub-batch destroyed with {} group(s) still in flight; leaking them", outstanding.load());
    std::lock_guard lk(mu_);
    for (auto& g : groups_) (void)g.release();
  }
}

// ---- stream worker ------------------------------------------------------------

namespace {
// The stream worker whose thread this is (null on any other thread): a
// group posted from a worker's own thread (a completion's callback) is
// queued, never issued there.
thread_local const StreamWorker* t_worker = nullptr;
}  // namespace

StreamWorker::StreamWorker(size_t index, int device, uint32_t depth, std::shared_ptr<Counters> counters,
                           const gpu::CopySettings& copy, bool spin_wait, bool issue_inline, WindowCache* cache,
                           uint64_t cache_budget)
    : index_(index),
      device_(device),
      depth_(depth),
      issue_inline_(issue_inline),
      counters_(std::move(counters)),
      copy_(copy),
      cache_(cache),
      cache_budget_(cache_budget) {
  copy_.blocking_sync = !spin_wait;  // this thread only waits: sleep in the driver unless told to poll
}

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

bool StreamWorker::issueHere(Group* g) {
  if (!issue_inline_ || t_worker) return false;
  std::unique_lock ilk(issue_mu_, std::try_to_lock);
  if (!ilk.owns_lock()) return false;  // the stream's thread is issuing or polling: it takes the queue at once
  {
    std::lock_guard lk(mu_);
    // Behind queued groups it would overtake them; a full stream waits.
    if (stop_ || !started_ || !queue_.empty() || inflight_.size() >= depth_) return false;
  }
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  {
    gpu::ContextScope scope(d, device_);  // the caller's own context comes back
    if (!scope.status().ok()) return false;
    g->posted = Clock::now();
    issue(g);
    counters_->groups_inline.fetch_add(1, std::memory_order_relaxed);
  }
  ilk.unlock();
  {
    std::lock_guard lk(mu_);
    kicked_ = true;  // the stream's thread polls for its end
  }
  cv_.notify_all();
  return true;
}

void StreamWorker::post(Group* g) {
  if (issueHere(g)) return;
  {
    std::lock_guard lk(mu_);
    if (!stop_) {
      g->posted = Clock::now();
      queue_.push_back(g);
      queued_.store(true, std::memory_order_release);
      cv_.notify_all();
      return;
    }
  }
  g->state.store(kGroupCommitted, std::memory_order_relaxed);
  counters_->slices_failed.fetch_add(g->size(), std::memory_order_relaxed);
  endItems(*g, 0, g->size(), TransferState::kFailed, Status(Code::kUnavailable, "nvlink transport shut down"));
  letGo(g);
}

size_t StreamWorker::purge(const SubBatchImpl* sb) {
  std::lock_guard lk(mu_);
  size_t before = queue_.size();
  std::erase_if(queue_, [&](Group* g) {
    return g->sb == sb && g->state.load(std::memory_order_acquire) == kGroupCanceled;
  });
  return before - queue_.size();
}

void StreamWorker::letGo(Group* g) { g->sb->outstanding.fetch_sub(1, std::memory_order_acq_rel); }

void StreamWorker::run() {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  Status st = d ? d->bindDevice(device_) : Status(Code::kNotSupported, "no CUDA driver");
  if (st.ok()) st = gpu::CopyStream::open(device_, stream_, copy_);
  if (!st.ok()) st = Status(Code::kNotSupported, st.message());
  {
    std::lock_guard lk(mu_);
    started_ = true;
    start_status_ = st;
  }
  cv_.notify_all();
  if (!st.ok()) return;
  t_worker = this;

  std::vector<Group*> take;
  for (;;) {
    bool stopping = false;
    // Held while this thread issues, polls and finishes; let go of between
    // turns and while it sleeps, so that a poster may issue meanwhile
    // (issueHere) instead of waking it first.
    std::unique_lock ilk(issue_mu_);
    {
      std::unique_lock lk(mu_);
      while (inflight_.empty() && !stop_ && queue_.empty()) {
        ilk.unlock();
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || kicked_; });
        kicked_ = false;
        lk.unlock();  // issue_mu_ before mu_, as posters take them
        ilk.lock();
        lk.lock();
      }
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
      queued_.store(!queue_.empty(), std::memory_order_release);
    }
    if (stopping) {
      for (Group* g : take) {
        uint8_t expect = kGroupQueued;
        if (g->state.compare_exchange_strong(expect, kGroupCommitted, std::memory_order_acq_rel)) {
          counters_->slices_failed.fetch_add(g->size(), std::memory_order_relaxed);
          endItems(*g, 0, g->size(), TransferState::kFailed,
                   Status(Code::kUnavailable, "nvlink transport shut down"));
        }
        letGo(g);
      }
      while (!inflight_.empty()) {
        finish(inflight_.front());
        inflight_.pop_front();
      }
      break;
    }
    for (Group* g : take) issue(g);
    take.clear();
    if (inflight_.empty()) continue;
    if (copy_.blocking_sync) {
      finish(inflight_.front());  // sleeps in the driver until the oldest is done
      inflight_.pop_front();
      continue;
    }
    // Polling: the oldest group is finished as soon as it is done, and a
    // group queued meanwhile is issued at once, not after the oldest.
    bool done = false;
    const Status polled = stream_->poll(inflight_.front().ticket, done);
    if (done || !polled.ok()) {  // a failed stream: finish()'s wait reports it
      finish(inflight_.front());
      inflight_.pop_front();
    } else if (!queued_.load(std::memory_order_acquire)) {
      cpuRelax();
    }
  }
  stream_.reset();  // waits for what is queued on it (nothing by now)
}

void StreamWorker::cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

void StreamWorker::lookUp(PeerRef* peer, uint32_t buf, uint64_t remote, uint64_t len, Pending& p, Mapping*& m,
                          uint64_t& base, Status& bad, int& peer_device) {
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  m = nullptr;
  bad = Status::OK();
  PeerRef& pr = *peer;
  Owner& o = *pr.owner;
  const BufferInfo& b = pr.bufs[buf];
  bool switched = false;
  // The registration checked is the one the task (or window) was made for:
  // slot and gen of the descriptor its PeerRef was decoded from. So every
  // group of a task checks the same registration, and a task never mixes two.
  testing::call(remote);
  Reader* reader = nullptr;
  if (o.dead.load(std::memory_order_acquire)) {
    bad = Status(Code::kUnavailable, fmt::format("the owner of segment '{}', {}, has exited", pr.segment, o.name));
    return;
  }
  if (Status rs = o.reader(index_, reader); !rs.ok()) {
    bad = rs;
    return;
  }
  // Announced before the check (nvlink_readers.h): either the check sees the
  // owner's withdrawal, or the withdrawal sees this and waits for the copies.
  if (reader) reader->enter(b.slot);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!o.valid(b.slot, b.gen)) {
    counters_->withdrawn_refusals.fetch_add(1, std::memory_order_relaxed);
    bad = Status(Code::kOutOfRange,
                 fmt::format("remote range [{:#x}, +{}) of segment '{}' was withdrawn by its owner (unregistered): "
                             "registration {} is gone",
                             remote, len, pr.segment, b.gen));
  } else if (Status s = pr.mapping(buf, m, switched); !s.ok()) {
    bad = s;
    m = nullptr;
  } else if (!m->acquire(base)) {
    bad = Status(Code::kUnavailable, fmt::format("the owner of segment '{}', {}, has exited", pr.segment, o.name));
    m = nullptr;
  } else {
    p.maps.push_back(m);
    if (reader) p.hazards.emplace_back(reader, b.slot);
    if (m->device != device_) peer_device = m->device;
  }
  if (!bad.ok() && reader) reader->leave(b.slot);
  if (switched) (void)d->bindDevice(device_);
}

// The owner's liveness, the region's registration and the mapping are
// checked once per (peer, buffer) of a group, not per copy: memo_ holds what
// was found for each buffer of the group's peer (a window's runs alternate
// between a few buffers, one per layer and K/V).
void StreamWorker::collectRuns(Group* g, Pending& p, int& peer_device) {
  PeerRef* const peer = g->peer;
  memo_.assign(peer->bufs.size(), Memo{});
  size_t refused = 0;
  Status refusal;
  int32_t last = -1;
  uint64_t base = 0, bbase = 0;
  bool ok = false;
  for (size_t i = 0; i < g->nruns; ++i) {
    const RunRef& r = g->runs[i];
    if (r.buffer != last) {
      last = r.buffer;
      Memo& memo = memo_[static_cast<size_t>(r.buffer)];
      if (!memo.seen) {
        Mapping* m = nullptr;
        memo.seen = true;
        lookUp(peer, static_cast<uint32_t>(r.buffer), r.remote, r.length, p, m, memo.base, memo.bad, peer_device);
      }
      ok = memo.bad.ok();
      base = memo.base;
      bbase = peer->bufs[static_cast<size_t>(r.buffer)].base;
      if (!ok && refused == 0) refusal = memo.bad;
    }
    if (!ok) {
      ++refused;
      continue;
    }
    const uint64_t remote = base + (r.remote - bbase);
    runs_.push_back(g->is_read ? gpu::CopyRun{r.local, remote, r.length} : gpu::CopyRun{remote, r.local, r.length});
    p.bytes += r.length;
  }
  p.issued = g->nruns - refused;
  if (refused > 0) {
    counters_->slices_failed.fetch_add(refused, std::memory_order_relaxed);
    g->sink->runsEnded(refused, 0, 0, TransferState::kFailed, refusal);
  }
}

void StreamWorker::collectItems(Group* g, Pending& p, int& peer_device) {
  PeerRef* const first_peer = g->items.front().peer;
  memo_.assign(first_peer->bufs.size(), Memo{});
  size_t refused = 0;
  Status refusal;
  PeerRef* last_peer = nullptr;
  uint32_t last_buf = 0;
  Mapping* m = nullptr;
  uint64_t base = 0;
  Status bad;  // why the current (peer, buffer) cannot be copied
  for (Item& it : g->items) {
    if (it.peer != last_peer || it.buf != last_buf) {
      last_peer = it.peer;
      last_buf = it.buf;
      Memo* memo = it.peer == first_peer ? &memo_[it.buf] : nullptr;
      if (memo && memo->seen) {
        base = memo->base;
        bad = memo->bad;
      } else {
        lookUp(it.peer, it.buf, it.remote, it.len, p, m, base, bad, peer_device);
        if (memo) *memo = Memo{true, base, bad};
      }
    }
    if (!bad.ok()) {
      counters_->slices_failed.fetch_add(1, std::memory_order_relaxed);
      if (g->sink) {
        if (refused++ == 0) refusal = bad;
      } else {
        it.task->completeSlice(TransferState::kFailed, 0, bad);
      }
      continue;
    }
    const uint64_t remote = base + (it.remote - it.peer->bufs[it.buf].base);
    const uint64_t local = reinterpret_cast<uint64_t>(it.local);
    runs_.push_back(it.is_read ? gpu::CopyRun{local, remote, it.len} : gpu::CopyRun{remote, local, it.len});
    it.issued = true;
    p.bytes += it.len;
    ++p.issued;
  }
  if (refused > 0) g->sink->runsEnded(refused, 0, 0, TransferState::kFailed, refusal);
}

bool StreamWorker::reuse(Group* g, Pending& p) {
  CachedWindow& kept = *g->cached;
  int peer_device = -1;
  for (auto& [buf, was] : kept.bases) {
    Mapping* m = nullptr;
    uint64_t base = 0;
    Status bad;
    lookUp(g->peer, buf, 0, 0, p, m, base, bad, peer_device);
    if (!bad.ok() || base != was || peer_device >= 0) {
      release(p);
      cache_->drop(&kept);
      return false;
    }
  }
  counters_->plan_cache_hits.fetch_add(1, std::memory_order_relaxed);
  p.issued = kept.nruns;
  p.bytes = kept.pieces.bytes;
  p.list = g->cached;
  return true;
}

Status StreamWorker::queue(Group* g, Pending& p, int peer_device, gpu::CopyReport& rep) {
  if (g->cached) return stream_->copyPieces(g->cached->pieces, p.ticket, &rep);
  // A prepared plan's window whose every run is copied by the kernel: keep
  // its run list on the GPU for the next post.
  if (!g->plan.expired() && g->runs && p.issued == g->nruns && peer_device < 0 &&
      stream_->wouldUse(runs_.size(), p.bytes) == gpu::CopyMechanism::kKernel) {
    auto kept = std::make_shared<CachedWindow>();
    Status st = stream_->makePieces(runs_, kept->pieces);
    if (st.ok()) {
      kept->plan = g->plan;
      kept->first = g->first;
      kept->nruns = g->nruns;
      kept->counters = counters_;
      for (size_t b = 0; b < memo_.size(); ++b)
        if (memo_[b].seen && memo_[b].bad.ok()) kept->bases.emplace_back(static_cast<uint32_t>(b), memo_[b].base);
      counters_->plan_cache_misses.fetch_add(1, std::memory_order_relaxed);
      counters_->plan_cache_bytes.fetch_add(kept->pieces.alloc, std::memory_order_relaxed);
      if ((st = stream_->copyPieces(kept->pieces, p.ticket, &rep)).ok()) {
        p.list = kept;
        cache_->insert(std::move(kept), cache_budget_);
      }
      return st;
    }
    HLOG_DEBUG("nvlink: cannot keep a window's run list on GPU {}: {}", device_, st.message());
  }
  return stream_->copyRuns(runs_, p.ticket, &rep, peer_device);
}

void StreamWorker::issue(Group* g) {
  uint8_t expect = kGroupQueued;
  if (!g->state.compare_exchange_strong(expect, kGroupCommitted, std::memory_order_acq_rel)) {
    letGo(g);  // canceled: its items already ended
    return;
  }
  const auto t0 = Clock::now();
  Pending p{g};
  runs_.clear();
  int peer_device = -1;
  if (g->cached && !reuse(g, p)) {
    // Its buffers moved or went: the runs themselves, checked as at a first post.
    g->cached.reset();
    g->runs = g->source->runs().data();
  }
  if (!g->cached) {
    if (g->runs)
      collectRuns(g, p, peer_device);
    else
      collectItems(g, p, peer_device);
  }
  if (p.issued == 0) {
    release(p);
    letGo(g);
    return;
  }
  gpu::CopyReport rep;
  const auto t1 = Clock::now();
  Status st = queue(g, p, peer_device, rep);
  if (!st.ok()) {
    // Whatever of the group was queued must stop before its memory is let go.
    (void)stream_->waitAll();
    release(p);
    counters_->slices_failed.fetch_add(p.issued, std::memory_order_relaxed);
    endIssued(*g, p.issued, 0, TransferState::kFailed,
              Status(st.code(), fmt::format("copy of {} bytes on GPU {}: {}", p.bytes, device_, st.message())));
    letGo(g);
    return;
  }
  counters_->copy.add(rep);
  if (peer_device >= 0) counters_->peer_copies.fetch_add(p.issued, std::memory_order_relaxed);
  p.launched = Clock::now();
  counters_->groups_issued.fetch_add(1, std::memory_order_relaxed);
  counters_->group_queued_ns.fetch_add(nanos(g->posted, t0), std::memory_order_relaxed);
  counters_->group_check_ns.fetch_add(nanos(t0, t1), std::memory_order_relaxed);
  counters_->group_launch_ns.fetch_add(nanos(t1, p.launched), std::memory_order_relaxed);
  inflight_.push_back(std::move(p));
}

void StreamWorker::release(Pending& p) {
  for (Mapping* m : p.maps) m->release();
  p.maps.clear();
  for (auto& [reader, slot] : p.hazards) reader->leave(slot);
  p.hazards.clear();
}

void StreamWorker::finish(Pending& p) {
  Status st = stream_->wait(p.ticket);
  const auto done = Clock::now();
  counters_->group_gpu_ns.fetch_add(nanos(p.launched, done), std::memory_order_relaxed);
  release(p);  // before the tasks hear of it: an owner's withdrawal may be waiting
  Group* g = p.g;
  if (!st.ok()) {
    counters_->slices_failed.fetch_add(p.issued, std::memory_order_relaxed);
    endIssued(*g, p.issued, 0, TransferState::kFailed,
              Status(st.code(), fmt::format("copy on GPU {}: {}", device_, st.message())));
    letGo(g);
    return;
  }
  counters_->slices_completed.fetch_add(p.issued, std::memory_order_relaxed);
  counters_->bytes.fetch_add(p.bytes, std::memory_order_relaxed);
  endIssued(*g, p.issued, p.bytes, TransferState::kCompleted, Status::OK());
  counters_->group_end_ns.fetch_add(nanos(done, Clock::now()), std::memory_order_relaxed);
  letGo(g);
}

}  // namespace hawser::nvlink
