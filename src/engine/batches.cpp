// Batches: allocate, submit (validate, select, prepare all-or-nothing, post),
// status, wait, cancel, free, and the synchronous transfer built on them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <optional>

#include "base/log.h"
#include "engine/engine_impl.h"

namespace hawser {

namespace {

Status bad(size_t i, const Status& s) { return {s.code(), fmt::format("requests[{}]: {}", i, s.message())}; }

// One request, resolved before the batch is locked.
struct Resolved {
  const SegmentView* view = nullptr;  // kept alive by the submit's `views`
  const Route* route = nullptr;
  int remote_buffer = -1;
  uint32_t region = 0;  // its local region, with its route's registration: an index into `regions`
  const LocalRegion* warm = nullptr;  // or a recycled batch's (Batch::warmRegion)
};

// A view a submit found (not one its batch kept from an earlier use).
struct FoundView {
  SegmentID id;
  std::shared_ptr<const SegmentView> view;
};

// What a submit lays out per request and per transport, kept by its thread
// from one submit to the next: a submit of a batch's requests then makes no
// heap allocation for them (four a submit before, each a malloc and a free).
struct SubmitScratch {
  std::vector<Resolved> res;
  // Each transport's tasks, in request order; the first `ngroups` in use
  // (the task lists keep their capacity).
  std::vector<std::pair<Transport*, std::vector<Task*>>> groups;
  size_t ngroups = 0;
  std::vector<std::pair<SubBatch*, std::unique_ptr<PreparedWork>>> work;  // dropped unposted on failure
  bool busy = false;

  void reset(size_t requests) {
    res.resize(requests);
    ngroups = 0;
    work.clear();
  }
  // A submit of many requests does not leave its thread holding their
  // layout: more than this many entries are let go after it.
  static constexpr size_t kKeep = 1024;
  void trim() {
    work.clear();  // a refused submit's unposted work, dropped now
    if (res.capacity() > kKeep) std::vector<Resolved>().swap(res);
    for (auto& g : groups)
      if (g.second.capacity() > kKeep) std::vector<Task*>().swap(g.second);
  }
};

// This thread's scratch, or one of its own for a submit made while the
// thread's is in use (a transport that submits from inside a submit).
class ScratchLease {
 public:
  ScratchLease() {
    thread_local SubmitScratch mine;
    s_ = mine.busy ? &spare_.emplace() : &mine;
    s_->busy = true;
  }
  ~ScratchLease() {
    s_->trim();
    s_->busy = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  SubmitScratch& operator*() const { return *s_; }

 private:
  std::optional<SubmitScratch> spare_;
  SubmitScratch* s_;
};

// A submit's requests, checked and all routed as `r` (one route, one
// remote buffer), moved at once by the route's transport, handed over at
// `t0`; false when it declined (nothing moved). `n` and `bytes`: the
// requests and bytes of each direction (PeerTraffic::dir), counted in the
// route's traffic as tasks of one slice each, submitted and ended together.
bool moveDirect(const Resolved& r, const std::vector<TransferRequest>& reqs, const uint32_t (&n)[2],
                const uint64_t (&bytes)[2], std::chrono::steady_clock::time_point t0) {
  const Route& route = *r.route;
  metrics::PeerTraffic* const traffic = route.traffic.get();
  if (!route.transport->moveDirect(*route.peer, r.remote_buffer, reqs, bytes[0] + bytes[1])) return false;
  if (traffic) {
    const uint64_t ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    const size_t shard = metrics::threadShard();
    for (int d = 0; d < 2; ++d)
      if (n[d]) traffic->movedDirect(shard, d, n[d], bytes[d], ns);
  }
  return true;
}

}  // namespace

Status EngineImpl::allocateBatch(size_t capacity, BatchID& out) {
  if (!initialized_) return checkInit();
  return batches_.allocate(capacity, out);
}

Status EngineImpl::submit(BatchID id, const std::vector<TransferRequest>& reqs, const Notification* notify,
                          const Signal* signal) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto batch = findBatch(id);
  if (!batch) return BatchTable::notAllocated(id);
  return submitTo(*batch, id, reqs, notify, signal, nullptr, Direct::kTasks);
}

Status EngineImpl::submitTo(Batch& b, BatchID id, const std::vector<TransferRequest>& reqs,
                            const Notification* notify, const Signal* signal,
                            std::chrono::steady_clock::time_point* posted_at, Direct direct, bool* moved) {
  Batch* const batch = &b;
  Status s;
  if (moved) *moved = false;
  if (reqs.empty() && notify)
    return {Code::kInvalidArgument,
            fmt::format("notification '{}' follows the requests of its submit, and there are none: use sendNotify",
                        notify->name)};
  if (reqs.empty() && signal)
    return {Code::kInvalidArgument,
            fmt::format("signal '{}' counts the requests of its submit, and there are none", signal->name)};
  if (reqs.empty()) return Status::OK();
  if (reqs.size() > batch->capacity())
    return {Code::kCapacityExceeded,
            fmt::format("batch {} holds at most {} tasks; {} requested", id, batch->capacity(), reqs.size())};

  // 1. Validate every request and pick its route. Descriptors may be
  //    re-fetched here, before the batch is locked.
  ScratchLease lease;
  SubmitScratch& scratch = *lease;
  scratch.reset(reqs.size());
  std::vector<Resolved>& res = scratch.res;
  auto refuse = [&](size_t i, Status st) {
    n_refused_.add(1);
    return bad(i, st);
  };
  SegmentID last_id = kInvalidSegment;
  // What a recycled batch kept from its earlier uses is used while these
  // stamps, read before anything is looked up, are those it was found at
  // (Batch::warmView, warmRegion): no lock, no reference count.
  const uint64_t generation = segments_.generation();
  const uint64_t removals = registry_.removals();
  // Every view a request resolved against that the batch did not keep,
  // held until the submit returns (then the batch holds them: one reference
  // each, handed on, on a line every thread submitting to the segment
  // shares); `view`: the last.
  std::vector<FoundView> views;
  const SegmentView* view = nullptr;
  // The request before's remote buffer and route: a batch's requests mostly
  // lie in one buffer of one segment, and take one route. The choice depends
  // only on the view, the query and the contract, so it is reused while
  // those are the same.
  const SegmentView* choice_view = nullptr;
  RouteQuery choice_q;
  Contract choice_contract;
  RouteChoice choice;
  int last_buf = -1;
  uint32_t last_kind = kHostMemory;  // of last_buf
  // The local regions of these requests, each with the registration of
  // the request's transport, found once: consecutive requests mostly lie
  // in the region of the one before and take its route.
  LocalRegion cur;  // the region of the request before
  const LocalRegion* last_warm = nullptr;  // the recycled batch's region the request before lay in
  // Where cur's reference to its registrations went (regions[cur_at]),
  // none yet: the first entry for it takes the reference itself, not a
  // count of its own on a line every thread submitting from it shares.
  size_t cur_at = SIZE_MAX;
  std::vector<LocalRegion> regions;
  std::vector<const Transport*> region_for;  // whose registration regions[k] holds
  // Fallbacks taken, counted once the submit is accepted: runs of requests
  // with the same one.
  struct Fell {
    const SegmentView* view;
    const Route* from;
    const Route* to;
    RouteDecline why;
    uint64_t n;
  };
  std::vector<Fell> fell;
  // Whether the requests may be moved at once (with no notification or
  // signal, which follow tasks): every one to the same route and remote
  // buffer, which the loop keeps true while it holds; the requests and
  // bytes of each direction, counted for its metrics.
  bool alike = direct != Direct::kNo && !notify && !signal;
  uint32_t dir_n[2] = {0, 0};
  uint64_t dir_bytes[2] = {0, 0};
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    if (r.opcode != OpCode::kRead && r.opcode != OpCode::kWrite)
      return refuse(i, {Code::kInvalidArgument, fmt::format("opcode {} is neither READ nor WRITE", int(r.opcode))});
    if (r.length == 0) return refuse(i, {Code::kInvalidArgument, "length is 0"});
    if (r.source == nullptr) return refuse(i, {Code::kInvalidArgument, "source is null"});
    if (r.target_id != last_id || !view) {
      const SegmentView* warm = batch->warmView(r.target_id, generation);
      if (warm && !viewStale(*warm)) {
        view = warm;
      } else {
        std::shared_ptr<const SegmentView> found;
        if (!warm)
          found = currentView(r.target_id);
        else if (!(found = refreshSegment(r.target_id)))  // stale: the store said so once, refresh now
          found = segmentView(r.target_id);               // the refresh failed: the open view, as currentView
        if (!found)
          return refuse(i, {Code::kSegmentNotFound, fmt::format("target_id {} is not an open segment", r.target_id)});
        views.push_back(FoundView{r.target_id, std::move(found)});
        view = views.back().view.get();
      }
      last_id = r.target_id;
      last_buf = -1;
    }
    const uint64_t src = reinterpret_cast<uint64_t>(r.source);
    if (src + r.length < src) return refuse(i, {Code::kInvalidArgument, "source + length wraps around"});
    // Its local region: the request before's, or one the batch kept, or
    // looked up.
    const LocalRegion* warm_region = nullptr;
    int gpu = -1;
    if (last_warm && last_warm->contains(src, r.length)) {
      warm_region = last_warm;
      gpu = warm_region->gpu;
    } else if (cur.contains(src, r.length)) {
      gpu = cur.gpu;
    } else if ((warm_region = batch->warmRegion(src, r.length, removals))) {
      gpu = warm_region->gpu;
    } else {
      if (!(s = registry_.regionAt(src, r.length, cur)).ok()) return refuse(i, s);
      cur_at = SIZE_MAX;
      gpu = cur.gpu;
    }
    RouteQuery q;
    q.local_kind = gpu >= 0 ? kGpuMemory : kHostMemory;
    int buf = -1;
    if (view->desc->kind == SegmentDesc::Kind::kMemory) {
      if (r.target_offset + r.length < r.target_offset)
        return refuse(i, {Code::kOutOfRange, "target_offset + length wraps around"});
      if (last_buf >= 0) {
        const BufferDesc& b = view->desc->buffers[static_cast<size_t>(last_buf)];
        if (r.target_offset >= b.addr && r.target_offset + r.length <= b.addr + b.length) buf = last_buf;
      }
      if (buf < 0) buf = view->desc->findBuffer(r.target_offset, r.length);
      if (buf < 0) {
        if (auto fresh = refreshSegment(r.target_id)) {  // the owner may have registered it since
          views.push_back(FoundView{r.target_id, std::move(fresh)});
          view = views.back().view.get();
          last_buf = -1;  // an index into the old descriptor's buffers
        }
        buf = view->desc->findBuffer(r.target_offset, r.length);
        if (buf < 0)
          return refuse(i, {Code::kOutOfRange,
                            fmt::format("remote range [{:#x}, +{}) is not inside one registered buffer of segment '{}'",
                                        r.target_offset, r.length, view->desc->name)});
      }
      if (buf != last_buf) {
        last_buf = buf;
        last_kind = memoryKindOf(view->desc->buffers[static_cast<size_t>(buf)].location);
      }
      q.remote_kind = last_kind;
      q.buffer = buf;
    }
    const char* source = nullptr;
    const Contract contract = contractOf(r.route, &source);
    if (choice_view != view || q.local_kind != choice_q.local_kind || q.remote_kind != choice_q.remote_kind ||
        q.buffer != choice_q.buffer || contract.transports != choice_contract.transports ||
        contract.require != choice_contract.require) {
      choice = selectRoute(*view, q, forced_transport_, contract);
      choice_view = view;
      choice_q = q;
      choice_contract = contract;
    }
    const Route* route = choice.route;
    if (!route) {
      if (contract.any())
        if (const Route* would = selectRoute(*view, q, forced_transport_))
          return refuse(i, contractRefusal(*view, q, contract, *would, source));
      std::string why;
      (void)selectRoute(*view, q, forced_transport_, &why);
      // When one transport alone serves this kind of segment and it failed to
      // open the peer for a reason other than "cannot reach it" (a missing or
      // unreadable file), that failure is the error.
      const Status& only = view->routes.size() == 1 ? view->routes[0].refusal : Status::OK();
      if (!only.ok() && only.code() != Code::kNotSupported)
        return refuse(i, {only.code(), fmt::format("segment '{}': {}", view->desc->name, only.message())});
      return refuse(i, {Code::kNoTransport, fmt::format("no installed transport ({}) can serve it to segment '{}': {}",
                                                        fmt::join(transportNames(), ","), view->desc->name, why)});
    }
    if (warm_region && warm_region->picked_for != route->transport) {
      // The batch kept the region for another transport: this one's, or look it up.
      warm_region = batch->warmRegion(src, r.length, removals, route->transport);
      if (!warm_region && !cur.contains(src, r.length)) {
        if (!(s = registry_.regionAt(src, r.length, cur)).ok()) return refuse(i, s);
        cur_at = SIZE_MAX;
      }
    }
    last_warm = warm_region;
    if (!warm_region &&
        (regions.empty() || regions.back().seq != cur.seq || region_for.back() != route->transport)) {
      if (cur_at == SIZE_MAX) {
        cur_at = regions.size();
        regions.push_back(std::move(cur));  // cur keeps its range, seq and gpu
      } else {
        LocalRegion again = regions[cur_at];  // the same region for another transport
        regions.push_back(std::move(again));
      }
      regions.back().pick(route->transport);
      region_for.push_back(route->transport);
    }
    res[i] = Resolved{view, route, buf, warm_region ? 0 : static_cast<uint32_t>(regions.size() - 1), warm_region};
    if (alike) {
      alike = i == 0 || (route == res[0].route && buf == res[0].remote_buffer);
      const int d = metrics::PeerTraffic::dir(r.opcode);
      dir_n[d]++;
      dir_bytes[d] += r.length;
    }
    if (choice.fallback) {
      if (fell.empty() || fell.back().from != choice.fallback || fell.back().to != route ||
          fell.back().view != view || fell.back().why.reason != choice.fallback_why.reason)
        fell.push_back(Fell{view, choice.fallback, route, choice.fallback_why, 0});
      fell.back().n++;
    }
  }

  // The notification goes to the owner of requests[0]'s segment.
  std::string notify_host;
  uint16_t notify_port = 0;
  if (notify && !(s = notifyTarget(*res[0].view, *notify, notify_host, notify_port)).ok()) {
    n_refused_.add(1);
    return s;
  }
  if (signal) {
    std::string others;
    for (auto& r : res)
      if (r.view->desc->name != res[0].view->desc->name) others = r.view->desc->name;
    if (!(s = signalTarget(*res[0].view, others, *signal, notify_host, notify_port)).ok()) {
      n_refused_.add(1);
      return s;
    }
  }

  // 2. Under the batch's lock: lay the tasks out (not yet visible), prepare
  //    in every transport involved, all or nothing, then commit and post.
  std::lock_guard sl(batch->submitMutex());
  const size_t base = batch->taskCount();
  if (reqs.size() > batch->capacity() - base) {
    n_refused_.add(1);
    return {Code::kCapacityExceeded, fmt::format("batch {} holds {} of {} tasks; {} more requested", id, base,
                                                 batch->capacity(), reqs.size())};
  }
  // The tasks point into these views (descriptor, peer, traffic): the
  // batch keeps them (a refused submit's too, harmlessly).
  for (auto& v : views) batch->keepView(v.id, generation, std::move(v.view));
  // Each transport's tasks, in request order (a batch mostly has one).
  auto& groups = scratch.groups;
  size_t& ngroups = scratch.ngroups;
  const LocalRegion* kept = regions.empty() ? nullptr : batch->keepRegions(std::move(regions), removals);
  // Request i's task, laid out (not yet visible).
  auto layOut = [&](size_t i) -> Task& {
    Task& t = batch->task(base + i);
    t.resetBorrowed(reqs[i], base + i, res[i].view->desc.get(), res[i].route->peer.get(), res[i].remote_buffer,
                    res[i].route->traffic.get());
    t.setRegion(res[i].warm ? res[i].warm : kept + res[i].region);
    return t;
  };
  // Moved at once: a slice a task, so only while the batch has that room
  // (else the path below refuses it, saying so).
  // Offered only to a transport that may take it (caps), on its own route
  // (not its variant's).
  if (alike && res[0].route->caps.moves_direct && !res[0].route->variant &&
      (direct == Direct::kNoTasks || reqs.size() <= batch->sliceCapacity() - batch->slicesUsed())) {
    const auto t0 = std::chrono::steady_clock::now();
    if (moveDirect(res[0], reqs, dir_n, dir_bytes, t0)) {
      if (direct == Direct::kTasks) {
        for (size_t i = 0; i < reqs.size(); ++i) layOut(i);
        batch->commitMoved(reqs.size(), t0);
      }
      if (moved) *moved = true;
      if (posted_at) *posted_at = t0;
      n_tasks_.add(reqs.size());
      for (const Fell& f : fell) fallbacks_->note(f.view->desc->name, *f.from, *f.to, f.why, f.n);
      return Status::OK();
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Task& t = layOut(i);
    Transport* tr = res[i].route->transport;
    size_t g = 0;
    while (g < ngroups && groups[g].first != tr) ++g;
    if (g == ngroups) {
      if (g == groups.size()) groups.emplace_back();
      groups[g].first = tr;
      groups[g].second.clear();
      groups[g].second.reserve(reqs.size() - i);
      ++ngroups;
    }
    groups[g].second.push_back(&t);
  }
  size_t slices = 0;
  auto& work = scratch.work;  // dropped unposted on failure
  auto refused = [&](Status why) {
    work.clear();
    if (kept) batch->dropRegions();  // no task points at them: none was committed
    n_refused_.add(1);
    return why;
  };
  for (size_t g = 0; g < ngroups; ++g) {
    auto& [t, tasks] = groups[g];
    SubBatch* sb = nullptr;
    s = batch->subBatch(t, sb);
    std::unique_ptr<PreparedWork> w;
    if (s.ok()) s = sb->prepare(std::span<Task* const>(tasks.data(), tasks.size()), w);
    if (s.ok() && !w) s = {Code::kInternal, fmt::format("transport {}: prepare returned no work", t->name())};
    if (!s.ok()) return refused(s);
    slices += w->slices;
    work.emplace_back(sb, std::move(w));
  }
  if (slices > batch->sliceCapacity() - batch->slicesUsed())
    return refused({Code::kCapacityExceeded, fmt::format("batch {} holds {} of {} slices; these requests need {} more",
                                                         id, batch->slicesUsed(), batch->sliceCapacity(), slices)});
  if (notify || signal)  // queued now, so that it keeps its place among this peer's notifications
    batch->addNotify(reqs.size(),
                     outbox_.track(notify_host, notify_port, res[0].view->desc->name, notify,
                                   signal ? signal->name : std::string(), static_cast<uint32_t>(reqs.size())),
                     &outbox_);
  const auto committed = batch->commit(reqs.size(), slices);
  if (posted_at) *posted_at = committed;
  n_tasks_.add(reqs.size());
  for (const Fell& f : fell) fallbacks_->note(f.view->desc->name, *f.from, *f.to, f.why, f.n);
  for (auto& [sb, w] : work) sb->post(std::move(w));
  return Status::OK();
}

Status EngineImpl::taskStatus(BatchID id, size_t task, TransferStatus& st) {
  auto batch = findBatch(id);
  if (!batch) return BatchTable::notAllocated(id);
  size_t n = batch->taskCount();
  if (task >= n)
    return {Code::kInvalidArgument, fmt::format("task_id {} is not in batch {} ({} tasks submitted)", task, id, n)};
  st = batch->task(task).status();
  return Status::OK();
}

Status EngineImpl::batchStatus(BatchID id, TransferStatus& st) {
  auto batch = findBatch(id);
  if (!batch) return BatchTable::notAllocated(id);
  st = batch->aggregate();
  return Status::OK();
}

Status EngineImpl::wait(BatchID id, std::chrono::milliseconds timeout) {
  auto batch = findBatch(id);
  if (!batch) return BatchTable::notAllocated(id);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!batch->waitUntil(deadline))
    return {Code::kTimeout,
            fmt::format("batch {}: {} task(s) unfinished after {} ms", id, batch->unfinished(), timeout.count())};
  for (auto& o : batch->notifies(true))
    if (!o->waitSettled(deadline))
      return {Code::kTimeout, fmt::format("batch {}: {} to '{}' still on its way after {} ms", id, o->what(),
                                          o->target(), timeout.count())};
  return Status::OK();
}

Status EngineImpl::cancel(BatchID id) {
  auto batch = findBatch(id);
  if (!batch) return BatchTable::notAllocated(id);
  std::lock_guard sl(batch->submitMutex());
  for (auto& [t, sb] : batch->subBatches()) sb->cancel();
  for (auto& r : batch->runners())
    r->stop(TransferState::kCanceled, {Code::kUnavailable, "canceled by cancelTransfer before it was started"}, true);
  return Status::OK();
}

Status EngineImpl::transferSync(const std::vector<TransferRequest>& reqs, std::chrono::milliseconds timeout,
                                std::vector<TransferStatus>* statuses, std::chrono::milliseconds cancel_wait,
                                const Notification* notify) {
  if (statuses) statuses->clear();
  if (reqs.empty() && !notify) return Status::OK();
  if (reqs.empty())
    return {Code::kInvalidArgument,
            fmt::format("notification '{}' follows the requests of its transfer, and there are none: use sendNotify",
                        notify->name)};
  if (!initialized_) return checkInit();
  Status s;
  // The batch, held from its allocation on: no lookup by id.
  BatchID b = kInvalidBatch;
  std::shared_ptr<Batch> batch;
  if (!(s = batches_.allocate(reqs.size(), b, &batch)).ok()) return s;
  std::chrono::steady_clock::time_point posted_at;
  bool direct = false;
  s = submitTo(*batch, b, reqs, notify, nullptr, &posted_at, Direct::kNoTasks, &direct);
  if (!s.ok() || direct) {
    batch.reset();
    (void)freeBatch(b);  // nothing was posted
    if (s.ok() && statuses)  // moved: every request COMPLETED
      for (const TransferRequest& r : reqs) statuses->push_back(TransferStatus{TransferState::kCompleted, r.length, {}});
    return s;
  }
  // The timeout counts from when the requests were posted (the clock their
  // tasks' latency starts at: no read of its own).
  const auto deadline = posted_at + timeout;
  bool timed_out = !batch->waitUntil(deadline);
  if (timed_out) {
    n_sync_timeouts_.add(1);
    (void)cancel(b);
    // Canceled slices end promptly; what the kernel or a device cannot stop
    // ends by its own timeout. Wait a bounded time for the states.
    batch->waitUntil(std::chrono::steady_clock::now() + cancel_wait);
  }
  Status first;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!statuses && batch->task(i).completed()) continue;  // the common case: no status to build
    TransferStatus st = batch->task(i).status();
    if (first.ok() && st.s != TransferState::kCompleted)
      first = st.error.ok() ? Status(Code::kInternal, fmt::format("task {} ended {}", i, stateName(st.s))) : st.error;
    if (statuses) statuses->push_back(std::move(st));
  }
  // The notification, once the transfer completed: delivered or why not.
  // Its outcome is known once the peer answered (bounded by rpc.timeout_ms).
  Status notified;
  if (notify && !timed_out && first.ok()) {
    auto items = batch->notifies();
    const auto& o = items.front();
    if (!o->waitSettled(std::max(deadline, std::chrono::steady_clock::now() + cancel_wait)))
      notified = {Code::kTimeout, fmt::format("notification '{}' to '{}' still on its way after the transfer",
                                              notify->name, o->target())};
    else
      notified = o->status().error;
  }
  batch.reset();  // the table's reference alone: the batch can be recycled
  if (freeBatch(b).code() == Code::kBatchBusy) batches_.orphan(b);  // freed by a later allocateBatch once its I/O ends
  if (timed_out)
    return {Code::kTimeout, fmt::format("transfer of {} request(s) did not finish in {} ms{}{}", reqs.size(),
                                        timeout.count(), first.ok() ? "" : "; first failure: ", first.message())};
  return first.ok() ? notified : first;
}

}  // namespace hawser
