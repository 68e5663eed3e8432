#include "engine/block_runner.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "base/log.h"
#include "metadata/descriptor.h"

namespace hawser {

size_t BlockRunner::bytesPerRun() { return sizeof(Child) + sizeof(Task*); }

size_t BlockRunner::maxWindowBytes(const BlockSettings& s) {
  const size_t tasks = s.window * (sizeof(Child) + sizeof(Task*)), runs = s.run_window * sizeof(RunRef);
  return 2 * (s.lanes + 1) * (std::max(tasks, runs) + sizeof(Window));
}

size_t BlockRunner::windowBytes(size_t capacity) const {
  return capacity * (run_mode_ ? sizeof(RunRef) : bytesPerRun()) + sizeof(Window);
}

RunArrays::~RunArrays() {
  for (auto& [runs, capacity] : free_) std::free(runs);
}

RunRef* RunArrays::take(size_t capacity, size_t& got) {
  {
    std::lock_guard lk(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= capacity) {
        RunRef* runs = it->first;
        got = it->second;
        free_.erase(it);
        return runs;
      }
  }
  // RunRef is an aggregate: malloc's storage holds its objects once written.
  auto* runs = static_cast<RunRef*>(std::malloc(capacity * sizeof(RunRef)));
  if (!runs) throw std::bad_alloc();
  got = capacity;
  return runs;
}

void RunArrays::give(RunRef* runs, size_t capacity) {
  if (!runs) return;
  {
    std::lock_guard lk(mu_);
    if (free_.size() < kKeep) {
      free_.emplace_back(runs, capacity);
      return;
    }
  }
  std::free(runs);
}

BlockRunner::BlockRunner(std::shared_ptr<const BlockPlan> plan, Task* parent, BlockPump* pump,
                         std::shared_ptr<RunArrays> arrays, const BlockSettings& settings, BlockCounters* counters)
    : plan_(std::move(plan)),
      parent_(parent),
      pump_(pump),
      arrays_(std::move(arrays)),
      settings_(settings),
      counters_(counters),
      run_mode_(plan_->route->transport->caps().run_windows),
      window_(run_mode_ ? settings.run_window : settings.window),
      lanes_(std::max<size_t>(1, std::min(settings.lanes, (plan_->runs + window_ - 1) / window_))),
      lane_(lanes_, nullptr) {}

BlockRunner::~BlockRunner() {
  size_t bytes = 0;
  for (auto& w : windows_) {
    bytes += windowBytes(w->capacity);
    arrays_->give(w->runs, w->runs_capacity);
  }
  counters_->window_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

size_t BlockRunner::take(size_t max, size_t& first) {
  size_t cur = next_.load(std::memory_order_relaxed);
  for (;;) {
    if (cur >= plan_->runs) return 0;
    const size_t k = std::min(max, plan_->runs - cur);
    if (next_.compare_exchange_weak(cur, cur + k, std::memory_order_acq_rel)) {
      first = cur;
      return k;
    }
  }
}

BlockRunner::Window* BlockRunner::windowFor(size_t lane, size_t runs) {
  const size_t need = std::min(runs, plan_->runs);
  Window* w = lane_[lane];
  if (!w || !w->reusable() || w->capacity < need) {
    // The lane's last window is in flight, or still let go of by its
    // transport: take any idle one, else make one. Windows in flight are at
    // most lanes + 1 (each ended window starts one more), and as many may be
    // ending: at most 2 x (lanes + 1) windows.
    w = nullptr;
    for (auto& c : windows_)
      if (c->reusable() && c->capacity >= need) {
        w = c.get();
        break;
      }
    if (!w) {
      auto nw = std::make_unique<Window>();
      nw->runner = this;
      nw->capacity = need;
      nw->sink.w = nw.get();
      if (!run_mode_) {
        nw->children.reset(new Child[nw->capacity]);
        nw->tasks.reset(new Task*[nw->capacity]);
        for (size_t i = 0; i < nw->capacity; ++i) {
          nw->children[i].w = nw.get();
          nw->children[i].task.attach(&nw->children[i]);
          nw->tasks[i] = &nw->children[i].task;
        }
      }
      counters_->window_bytes.fetch_add(windowBytes(nw->capacity), std::memory_order_relaxed);
      w = nw.get();
      windows_.push_back(std::move(nw));
    }
    lane_[lane] = w;
  }
  w->lane = lane;
  return w;
}

Status BlockRunner::fill(Window* w, size_t first, size_t k, std::unique_ptr<PreparedWork>& work, bool on_submitter) {
  const BlockPlan& p = *plan_;
  Transport* t = p.route->transport;
  w->sb.reset();  // idle: its I/O has ended
  Status s = t->newSubBatch(k, w->sb);
  if (!s.ok() || !w->sb)
    return {s.ok() ? Code::kInternal : s.code(),
            fmt::format("transport {}: cannot allocate a sub-batch: {}", t->name(), s.message())};
  w->n = k;
  w->first = first;
  if (run_mode_) {
    w->written = false;  // written when the transport asks (RunsSink::runs)
    RunWindow rw;
    rw.op = p.op;
    rw.peer = p.route->peer.get();
    rw.segment = p.view->desc.get();
    rw.count = k;
    rw.source = &w->sink;
    rw.regions = p.regions;
    rw.sink = &w->sink;
    rw.on_submitter = on_submitter;
    if (p.prepared) {
      rw.plan = std::shared_ptr<const void>(plan_, plan_.get());
      rw.first = first;
    }
    s = w->sb->prepareRuns(rw, work);
  } else {
    for (size_t j = 0; j < k; ++j) {
      const Run r = p.run(first + j);
      TransferRequest req{p.op, reinterpret_cast<void*>(r.local), p.target, r.remote, r.length};
      w->children[j].task.reset(req, parent_->id(), p.view->desc, p.route->peer, p.bufferOf(first + j));
      w->children[j].task.setRegion(&p.regions[p.regionOf(first + j)]);
    }
    s = w->sb->prepare(std::span<Task* const>(w->tasks.get(), k), work);
  }
  if (s.ok() && !work) s = {Code::kInternal, fmt::format("transport {}: prepare returned no work", t->name())};
  if (!s.ok()) {
    // Nothing of it runs: reusable at once (a window used before still
    // counts the runs of its last use as exited).
    w->n = 0;
    w->exited.store(0, std::memory_order_release);
    return s;
  }
  if (!run_mode_)
    for (size_t j = 0; j < k; ++j) w->children[j].task.markSubmitted();
  w->left.store(k, std::memory_order_relaxed);
  w->exited.store(0, std::memory_order_release);
  return Status::OK();
}

void BlockRunner::post(Window* w, std::unique_ptr<PreparedWork> work) {
  counters_->runs_started.fetch_add(w->n, std::memory_order_relaxed);
  counters_->runs_in_flight.fetch_add(w->n, std::memory_order_relaxed);
  w->sb->post(std::move(work));
}

Status BlockRunner::prepareFirst() {
  std::lock_guard lk(mu_);
  // A short first window: the caller's thread pays for it (the pump cuts the
  // rest). A transport that moves windows of runs costs the engine little a
  // run, so its first window is block.first_run_window runs: a request of up
  // to that many goes to the transport from the caller's thread in one piece,
  // with no hand-over to the pump (whose wake-up is worth thousands of runs).
  // A prepared plan's runs were checked when it was made, and the transport
  // keeps what it derived from a window for the next post (nvlink: its run
  // list on the GPU): its first window is always a whole one.
  const size_t first_runs = !run_mode_        ? kFirstWindow
                            : plan_->prepared ? window_
                                              : std::max<size_t>(1, settings_.first_run_window);
  Window* w = windowFor(0, std::min(window_, first_runs));
  size_t first = 0;
  const size_t k = take(w->capacity, first);
  Status s = fill(w, first, k, first_work_, true);
  if (!s.ok()) {
    next_.store(0);  // nothing was posted; the runner is dropped
    return s;
  }
  first_w_ = w;
  return Status::OK();
}

void BlockRunner::start() {
  {
    std::lock_guard lk(mu_);
    post(first_w_, std::move(first_work_));
  }
  // Lane 0 goes on with a full window at once; the other lanes start too.
  for (size_t lane = 0; lane < lanes_; ++lane) {
    if (next_.load(std::memory_order_acquire) >= plan_->runs) break;
    if (!pump_->schedule(shared_from_this(), lane)) {
      stop(TransferState::kFailed, {Code::kUnavailable, "engine shut down before these blocks were started"}, false);
      break;
    }
  }
}

void BlockRunner::dispatch(size_t lane) {
  std::lock_guard lk(mu_);
  if (failed_.load(std::memory_order_acquire)) return;
  if (next_.load(std::memory_order_acquire) >= plan_->runs) return;
  Window* w = windowFor(lane, window_);
  size_t first = 0;
  const size_t k = take(w->capacity, first);
  if (k == 0) return;
  std::unique_ptr<PreparedWork> work;
  Status s = fill(w, first, k, work);
  if (!s.ok()) {
    // The transport refused a later window (it shut down, say): these runs
    // and all after them fail with its reason.
    failed_.store(true);
    parent_->failSlices(static_cast<uint32_t>(k), TransferState::kFailed, s);
    stop(TransferState::kFailed, s, false);
    return;
  }
  post(w, std::move(work));
}

void BlockRunner::stop(TransferState state, const Status& why, bool cancel_inflight) {
  const size_t first = next_.exchange(plan_->runs, std::memory_order_acq_rel);
  if (first < plan_->runs) parent_->failSlices(static_cast<uint32_t>(plan_->runs - first), state, why);
  if (!cancel_inflight) return;
  std::lock_guard lk(mu_);
  for (auto& w : windows_)
    if (w->sb) w->sb->cancel();
}

BlockRunner::Hold BlockRunner::hold() const {
  std::lock_guard lk(mu_);
  Hold h = Hold::kNone;
  for (auto& w : windows_) {
    if (w->left.load(std::memory_order_acquire) != 0 || (w->sb && !w->sb->idle())) return Hold::kIo;
    if (!w->reusable()) h = Hold::kReporting;
  }
  return h;
}

bool BlockRunner::assist() {
  // Under the runner's lock: fill() gives a window a new sub-batch each
  // time it is reused (TSan caught the old one freed under an assist made
  // without it). The pump waits for this one piece meanwhile.
  std::lock_guard lk(mu_);
  for (auto& w : windows_)
    if (w->sb && w->sb->assist()) return true;
  return false;
}

void BlockRunner::Child::taskFinished(size_t) { w->runner->childDone(this); }

void BlockRunner::childDone(Child* c) {
  Window* w = c->w;
  const TransferStatus st = c->task.status();
  counters_->runs_in_flight.fetch_sub(1, std::memory_order_relaxed);
  if (st.s != TransferState::kCompleted && !failed_.exchange(true))
    stop(TransferState::kCanceled,
         {st.error.code() == Code::kOk ? Code::kInternal : st.error.code(),
          fmt::format("not started: an earlier run of this block request ended {}: {}", stateName(st.s),
                      st.error.message())},
         false);
  if (w->left.fetch_sub(1, std::memory_order_acq_rel) == 1) windowDone(w->lane);
  // May end the parent (and let its batch be freed): from here on only the
  // window's exit count is touched, which hold() waits for.
  parent_->completeSlice(st.s, st.transferred_bytes, st.error);
  w->exited.fetch_add(1, std::memory_order_acq_rel);
}

std::span<const RunRef> BlockRunner::RunsSink::runs() {
  // The plan is immutable and the window is the transport's until its runs
  // end: no lock.
  if (!w->written) {
    const BlockPlan& p = *w->runner->plan_;
    if (!w->runs) w->runs = w->runner->arrays_->take(w->capacity, w->runs_capacity);
    for (size_t j = 0; j < w->n; ++j) {
      const Run r = p.run(w->first + j);
      w->runs[j] = RunRef{r.local, r.remote, r.length, p.bufferOf(w->first + j), p.regionOf(w->first + j)};
    }
    w->written = true;
  }
  return {w->runs, w->n};
}

void BlockRunner::RunsSink::runsEnded(size_t n, size_t completed, uint64_t bytes, TransferState state,
                                      const Status& error) {
  w->runner->runsDone(w, n, completed, bytes, state, error);
}

void BlockRunner::runsDone(Window* w, size_t n, size_t completed, uint64_t bytes, TransferState state,
                           const Status& error) {
  if (n == 0) return;
  counters_->runs_in_flight.fetch_sub(n, std::memory_order_relaxed);
  const size_t failed = n - completed;
  const Status why = failed == 0 || !error.ok() ? error : Status(Code::kInternal, "run failed without a reason");
  if (failed > 0 && !failed_.exchange(true))
    stop(TransferState::kCanceled,
         {why.code(), fmt::format("not started: an earlier run of this block request ended {}: {}", stateName(state),
                                  why.message())},
         false);
  if (w->left.fetch_sub(n, std::memory_order_acq_rel) == n) windowDone(w->lane);
  // May end the parent (and let its batch be freed): from here on only the
  // window's exit count is touched, which hold() waits for.
  parent_->completeSlices(static_cast<uint32_t>(completed), bytes);
  parent_->failSlices(static_cast<uint32_t>(failed), state, why);
  w->exited.fetch_add(n, std::memory_order_acq_rel);
}

void BlockRunner::windowDone(size_t lane) {
  if (next_.load(std::memory_order_acquire) >= plan_->runs) return;
  if (!pump_->schedule(shared_from_this(), lane))
    stop(TransferState::kFailed, {Code::kUnavailable, "engine shut down before these blocks were started"}, false);
}

// ---- pump ----------------------------------------------------------------------

bool BlockPump::schedule(std::shared_ptr<BlockRunner> r, size_t lane) {
  {
    std::lock_guard lk(mu_);
    if (stopped_) return false;
    q_.emplace_back(std::move(r), lane);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_one();
  return true;
}

void BlockPump::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stopped_ || !q_.empty(); });
    if (stopped_) return;
    auto [r, lane] = std::move(q_.front());
    q_.pop_front();
    lk.unlock();
    r->dispatch(lane);
    r.reset();  // may destroy the runner: not under mu_
    lk.lock();
  }
}

void BlockPump::stop() {
  std::deque<std::pair<std::shared_ptr<BlockRunner>, size_t>> left;
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    left.swap(q_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [r, lane] : left)
    r->stop(TransferState::kFailed, {Code::kUnavailable, "engine shut down before these blocks were started"}, false);
}

}  // namespace hawser
