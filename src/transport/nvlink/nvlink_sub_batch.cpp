// The nvlink sub-batch. prepare() cuts tasks into stripes spread over a
// GPU's streams; prepareRuns() takes a block request's window of runs as
// one group for the GPU's first stream; post() hands the groups to the
// stream workers (nvlink_stream_worker.cpp); cancel() takes back groups not
// issued.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "base/log.h"
#include "base/registry.h"
#include "gpu/cuda_driver.h"
#include "base/segment_desc.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/nvlink/nvlink_testing.h"


namespace hawser::nvlink {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void endItems(Group& g, size_t first, size_t n, TransferState state, const Status& why) {
  if (n == 0) return;
  if (g.sink) {
    g.sink->runsEnded(n, 0, 0, state, why);
    return;
  }
  for (size_t i = first; i < first + n; ++i) g.items[i].task->completeSlice(state, 0, why);
}

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
    for (auto& g : work.groups)
      if (std::find(used_.begin(), used_.end(), g->worker) == used_.end()) used_.push_back(g->worker);
  }
  for (auto& g : work.groups) gs.push_back(groups_.keep(std::move(g)));
  outstanding.fetch_add(static_cast<int64_t>(gs.size()), std::memory_order_acq_rel);
  for (Group* g : gs) g->state.store(kGroupQueued, std::memory_order_relaxed);
  for (Group* g : gs) g->worker->post(g);  // a stopped worker fails it
}

void SubBatchImpl::cancel() {
  bool any = false;
  std::vector<StreamWorker*> used;
  groups_.forEach([&any](Group& g) {
    uint8_t expect = kGroupQueued;
    if (g.state.compare_exchange_strong(expect, kGroupCanceled, std::memory_order_acq_rel)) {
      any = true;
      endItems(g, 0, g.size(), TransferState::kCanceled,
               Status(Code::kUnavailable, "canceled by cancelTransfer before it was issued"));
    }
  });
  {
    std::lock_guard lk(mu_);
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
  (void)groups_.settle(outstanding, std::chrono::seconds(30), "nvlink: sub-batch", "group(s)");
}

}  // namespace hawser::nvlink
