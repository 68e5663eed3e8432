// One block request in flight: the runs of its plan handed to the
// transport a window at a time, so that the engine's memory per task is
// bounded (block.lanes x block.window runs) whatever the number of blocks,
// and posting a plan of a million blocks touches none of them.
//
// The task the user sees (the batch's Task, "parent") has one slice per
// run. Each run of a window becomes an internal task ("child") of the
// window's own sub-batch of the route's transport: transports see ordinary
// tasks and cut them into slices as they always do. When a child ends, it
// ends one slice of the parent; when a window's children have all ended,
// the lane asks the pump (one engine thread) for its next window.
//
// The first window is cut on the caller's thread, so that a transport's
// refusal (prepare) fails the call with nothing posted; the other lanes
// start on the pump.
//
// Lifetime: the batch holds the runner; the pump holds it while a lane
// waits for a window. A child's callback touches the runner only before
// it ends the parent's slice, or its window's `exited` count, which hold()
// waits for; the batch drops the runner only when hold() is kNone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/task.h"
#include "base/transport.h"
#include "engine/block_plan.h"

namespace hawser {

class BlockPump;

// The run arrays of run windows, kept for later block requests: a window's
// runs are written into memory touched before, not into fresh pages (a
// window of 8192 runs is 256 KiB: 64 page faults, ~55 us on the H200
// machine's VM, each time a request made one). An array is taken when a
// window's runs are first written (a prepared plan whose transport kept its
// window never takes one) and given back when the request ends; at most
// kKeep are kept, the others freed.
class RunArrays {
 public:
  ~RunArrays();
  // An array of at least `capacity` runs (uninitialized); `got` says how many.
  RunRef* take(size_t capacity, size_t& got);
  void give(RunRef* runs, size_t capacity);
  static constexpr size_t kKeep = 8;

 private:
  std::mutex mu_;
  std::vector<std::pair<RunRef*, size_t>> free_;
};

// Engine-wide counters of block requests (stats()).
struct BlockCounters {
  std::atomic<uint64_t> tasks{0};          // block tasks posted
  std::atomic<uint64_t> runs_started{0};   // runs handed to transports
  std::atomic<uint64_t> runs_in_flight{0};  // gauge
  std::atomic<uint64_t> window_bytes{0};   // gauge: memory the runners' windows hold
  std::atomic<uint64_t> plan_bytes{0};     // gauge: memory prepared plans hold
  std::atomic<uint64_t> plans_open{0};     // gauge
};

class BlockRunner : public std::enable_shared_from_this<BlockRunner> {
 public:
  // Engine memory one run in flight holds (its internal task and pointer),
  // besides the transport's slices; a transport that moves windows of runs
  // costs sizeof(RunRef) a run.
  static size_t bytesPerRun();
  // The most the windows of one block request hold: 2 x (lanes + 1) windows.
  static size_t maxWindowBytes(const BlockSettings& s);

  BlockRunner(std::shared_ptr<const BlockPlan> plan, Task* parent, BlockPump* pump,
              std::shared_ptr<RunArrays> arrays, const BlockSettings& settings, BlockCounters* counters);
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;

  // Caller's thread, under the batch's submit lock, before the parent is
  // visible: cuts and prepares the first window (nothing posted).
  Status prepareFirst();
  // Once the parent is committed: posts the first window, starts the other lanes.
  void start();
  // The pump: the next window of `lane`.
  void dispatch(size_t lane);
  // Runs not yet started end `state` with `why`; windows in flight are
  // canceled when `cancel_inflight`.
  void stop(TransferState state, const Status& why, bool cancel_inflight);
  // What still references the runner: a window's I/O (runs not ended, or
  // its sub-batch not idle: may take as long as that I/O), or only the
  // reporting of runs that ended (a few instructions per completer), or
  // nothing.
  enum class Hold { kNone, kReporting, kIo };
  Hold hold() const;
  // A thread waiting for the parent's batch (its submit lock held) runs a
  // queued piece of a window's work (SubBatch::assist), under the runner's
  // lock; true when it ran one. Windows the pump posts later find the
  // waiter asleep.
  bool assist();
  Transport* transport() const { return plan_->route->transport; }

 private:
  struct Window;
  struct Child final : TaskOwner {
    Task task;
    Window* w = nullptr;
    void taskFinished(size_t task_id) override;
  };
  // A window handed to a transport that moves runs (caps().run_windows):
  // its runs, written when the transport asks, and the sink their ends come
  // back through.
  struct RunsSink final : RunSink, RunSource {
    Window* w = nullptr;
    void runsEnded(size_t n, size_t completed, uint64_t bytes, TransferState state, const Status& error) override;
    std::span<const RunRef> runs() override;
  };
  struct Window {
    BlockRunner* runner = nullptr;
    size_t lane = 0;
    std::unique_ptr<SubBatch> sb;
    // Task mode: a child task per run.
    std::unique_ptr<Child[]> children;
    std::unique_ptr<Task*[]> tasks;
    // Run mode: the runs themselves, from the runner's RunArrays when first
    // written (runs_capacity of them).
    RunRef* runs = nullptr;
    size_t runs_capacity = 0;
    RunsSink sink;
    size_t first = 0;      // the plan's index of its first run
    bool written = false;  // runs[0, n) hold the runs (run mode)
    size_t capacity = 0;
    size_t n = 0;                     // runs of the current window
    std::atomic<size_t> left{0};      // runs not yet ended
    std::atomic<size_t> exited{0};    // runs whose end has been fully reported
    bool reusable() const { return exited.load(std::memory_order_acquire) == n && (!sb || sb->idle()); }
  };

  // Takes up to `max` runs not yet started: [first, first + k).
  size_t take(size_t max, size_t& first);
  // Under mu_: a window for `lane` that no I/O references, holding up to
  // `runs` runs (fewer when the plan has fewer).
  Window* windowFor(size_t lane, size_t runs);
  static constexpr size_t kFirstWindow = 64;
  // Under mu_: fills `w` with runs [first, first + k) and prepares them;
  // `on_submitter`: the submitting thread will post it (RunWindow::on_submitter).
  Status fill(Window* w, size_t first, size_t k, std::unique_ptr<PreparedWork>& work, bool on_submitter = false);
  void post(Window* w, std::unique_ptr<PreparedWork> work);
  void childDone(Child* c);
  void runsDone(Window* w, size_t n, size_t completed, uint64_t bytes, TransferState state, const Status& error);
  void windowDone(size_t lane);
  // Engine memory a window of `capacity` runs holds.
  size_t windowBytes(size_t capacity) const;

  const std::shared_ptr<const BlockPlan> plan_;
  Task* const parent_;
  BlockPump* const pump_;
  const std::shared_ptr<RunArrays> arrays_;
  const BlockSettings settings_;
  BlockCounters* const counters_;
  const bool run_mode_;  // the transport moves windows of runs (no child tasks)
  const size_t window_;  // runs per window: block.run_window in run mode, else block.window
  const size_t lanes_;
  std::atomic<size_t> next_{0};  // first run not yet taken
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;  // windows_ and their sub-batches (not the callbacks)
  std::vector<std::unique_ptr<Window>> windows_;
  std::vector<Window*> lane_;  // each lane's latest window
  // The first window, prepared and not yet posted.
  Window* first_w_ = nullptr;
  std::unique_ptr<PreparedWork> first_work_;
};

// One engine thread that cuts and posts the next window of lanes whose
// window ended (never a transport's completion thread).
class BlockPump {
 public:
  ~BlockPump() { stop(); }
  // False once stopped.
  bool schedule(std::shared_ptr<BlockRunner> r, size_t lane);
  // Joins the thread; lanes still waiting end their runs FAILED.
  void stop();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<BlockRunner>, size_t>> q_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace hawser
