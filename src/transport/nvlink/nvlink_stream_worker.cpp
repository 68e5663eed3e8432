// A stream worker: one CUDA stream of one local GPU and the thread that
// drives it. It checks each group's owners and regions once per buffer,
// queues the whole group with one CopyStream::copyRuns (one launch of
// hawser's copy kernel for a window of small runs: gpu/batch_copy.h), waits
// for it and ends its items. A group posted while the stream is idle is
// issued by the posting thread (issueHere).
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "base/cpu_relax.h"
#include "base/log.h"
#include "base/registry.h"
#include "gpu/cuda_driver.h"
#include "base/segment_desc.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/nvlink/nvlink_testing.h"


namespace hawser::nvlink {

namespace testing {
std::atomic<CheckHook> before_check{nullptr};
std::atomic<bool> stream_threads_ignore_kicks{false};
}

namespace {
using Clock = std::chrono::steady_clock;
uint64_t nanos(Clock::time_point from, Clock::time_point to) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

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

void StreamWorker::pollHere() {
  if (t_worker) return;  // a stream's thread (a completion's callback) never polls
  std::unique_lock ilk(issue_mu_, std::try_to_lock);
  if (!ilk.owns_lock() || inflight_.empty()) return;
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  gpu::ContextScope scope(d, device_);  // the caller's own context comes back
  if (!scope.status().ok()) return;
  t_worker = this;  // what the completions post is queued, not issued here
  while (!inflight_.empty()) {
    bool done = false;
    // A failed stream is left to the stream's thread: its finish() reports it.
    if (!stream_->poll(inflight_.front().ticket, done).ok() || !done) break;
    finish(inflight_.front());
    inflight_.pop_front();
    counters_->groups_polled.fetch_add(1, std::memory_order_relaxed);
  }
  t_worker = nullptr;
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
      while ((inflight_.empty() || testing::ignoringKicks()) && !stop_ && queue_.empty()) {
        ilk.unlock();
        cv_.wait(lk, [&] { return stop_ || !queue_.empty() || (kicked_ && !testing::ignoringKicks()); });
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
