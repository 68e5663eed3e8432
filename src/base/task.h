// A task: one request of a batch, as the transports see it. Transports cut
// it into slices and report each slice's end; the task aggregates them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/registry.h"
#include "base/segment_desc.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class PeerHandle;
namespace metrics {
class PeerTraffic;
}

// Told when a task's last slice has ended (the engine's batch).
class TaskOwner {
 public:
  virtual void taskFinished(size_t task_id) = 0;
  // Tasks first_id .. first_id + n - 1 finished together (one count of
  // the batch instead of n); by default one taskFinished each.
  virtual void tasksFinished(size_t first_id, size_t n) {
    for (size_t i = 0; i < n; ++i) taskFinished(first_id + i);
  }

 protected:
  ~TaskOwner() = default;
};

// The state of a rank (0: COMPLETED).
TransferState stateOfRank(int rank);

// One request inside a batch. What a submit and a completion write comes
// first, on the task's first two cache lines (a task starts a line: a
// batch's tasks share none): the request and its segment, then the state;
// the owner (read, written once by attach()), the references reset() owns
// and the error, set only on failure, come after.
class alignas(64) Task {
 public:
  Task() = default;
  Task(const Task&) = delete;

  const TransferRequest& request() const { return request_; }
  uint64_t localAddr() const { return reinterpret_cast<uint64_t>(request_.source); }
  // The target segment's descriptor, as known when the task was submitted.
  const SegmentDesc& segment() const { return *segment_p_; }
  // The transport's decoded view of that segment (its own PeerHandle type).
  PeerHandle* peer() const { return peer_p_; }
  // Index of the remote buffer the request lies in (memory segments), else -1.
  int remoteBuffer() const { return remote_buffer_; }
  // The registered region the local buffer lies in, found when the task was
  // submitted, with the registration of the transport that moves it
  // (region().registration): a transport reads it instead of looking the
  // region up again. An empty region (length 0) when none was set.
  const LocalRegion& region() const { return region_ ? *region_ : kNoRegion; }
  size_t id() const { return id_; }

  // Set by the transport in prepare(): how many slices this task is cut into
  // (>= 1). completeSlice must then be called exactly that many times.
  void setSliceCount(uint32_t n) { slices_total_ = n; }
  uint32_t sliceCount() const { return slices_total_; }

  // Thread-safe. `bytes` counts only when state == kCompleted. Also counts
  // the slice (and the task, at its last slice) in the peer's traffic metrics.
  void completeSlice(TransferState state, uint64_t bytes, const Status& error = Status::OK());
  // The same, ended at `now` (one clock read for the slices a copy ended
  // together, instead of one each).
  void completeSlice(TransferState state, uint64_t bytes, const Status& error,
                     std::chrono::steady_clock::time_point now);
  // Ends `n` slices at once, all COMPLETED, moving `bytes` in all (runs of
  // a block request moved as a window).
  void completeSlices(uint32_t n, uint64_t bytes);
  // Ends `n` tasks of one slice each (sliceCount() == 1), all COMPLETED at
  // `now`, task k having moved bytes[k]: what ends a copy of many small
  // requests. Tasks of one owner with consecutive ids, one traffic, one
  // direction and one submission instant are counted together (one add
  // per counter and one count of the owner for the run, instead of about a
  // dozen atomic adds a task). The caller is each task's only completer.
  static void completeWhole(Task* const* tasks, const uint64_t* bytes, size_t n,
                            std::chrono::steady_clock::time_point now);
  // Ends `n` slices at once, none of them COMPLETED (runs of a block
  // request that were never started: canceled, or abandoned at shutdown).
  void failSlices(uint32_t n, TransferState state, const Status& error);
  // A transport retried one of this task's slices after an error (counted
  // in the peer's hawser_retries_total).
  void countRetry();

  // The engine's side: who is told when the last slice ends, and what the
  // task is (before submission; the task is then not yet visible).
  void attach(TaskOwner* owner) { owner_ = owner; }
  // `traffic` (may be null): where its slices are counted.
  void reset(const TransferRequest& request, size_t id, std::shared_ptr<const SegmentDesc> segment,
             std::shared_ptr<PeerHandle> peer, int remote_buffer,
             std::shared_ptr<metrics::PeerTraffic> traffic = nullptr);
  // The same, with `segment`, `peer` and `traffic` kept alive by the caller
  // as long as the task (a batch keeps one reference per submit to the
  // views its tasks point into): a submit of N tasks to one peer then
  // takes no reference counts per task, atomic increments on cache lines
  // every submitting thread shares. For a task no other thread can see
  // yet (a batch's next one, before Batch::commit publishes it): it takes
  // no lock.
  void resetBorrowed(const TransferRequest& request, size_t id, const SegmentDesc* segment, PeerHandle* peer,
                     int remote_buffer, metrics::PeerTraffic* traffic);
  // After reset(): the task's local region, which the caller keeps alive
  // as long as the task (its batch, or the block plan of its runs).
  void setRegion(const LocalRegion* region) { region_ = region; }
  // Before its slices are posted; `now` starts its latency clock.
  void markSubmitted(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // The same for tasks[0, n), their slices counted in flight with one add
  // per run of tasks of one traffic (a batch's submit mostly has one).
  static void markSubmitted(Task* tasks, size_t n, std::chrono::steady_clock::time_point now);
  // tasks[0, n), after reset(): submitted at `now` as one slice each and
  // already COMPLETED, every byte moved (their transport moved them at
  // once: Transport::moveDirect; the caller counts their traffic). Nothing
  // counted in flight, no owner told.
  static void markMoved(Task* tasks, size_t n, std::chrono::steady_clock::time_point now);

  // Snapshot of this task's aggregated status.
  TransferStatus status() const;
  // status().s == kCompleted, without building the status.
  bool completed() const;
  bool terminal() const;

 private:
  TransferRequest request_;
  // What the task uses (set by either reset).
  const SegmentDesc* segment_p_ = nullptr;
  PeerHandle* peer_p_ = nullptr;
  metrics::PeerTraffic* traffic_p_ = nullptr;
  const LocalRegion* region_ = nullptr;
  static const LocalRegion kNoRegion;
  // The end of `n` slices (their failure, if any, already noted); `shard`:
  // the caller's metrics::threadShard() (0 without traffic counting).
  void slicesEnded(uint32_t n, uint64_t ns, size_t shard);
  void noteFailure(TransferState state, const Status& error);
  uint64_t sinceSubmitNs() const { return sinceSubmitNs(std::chrono::steady_clock::now()); }
  uint64_t sinceSubmitNs(std::chrono::steady_clock::time_point now) const;

  std::chrono::steady_clock::time_point submitted_at_{};
  int remote_buffer_ = -1;
  uint32_t slices_total_ = 0;
  uint32_t id_ = 0;  // its index in its batch (batch.max_capacity: at most 2^30)
  std::atomic<uint32_t> slices_done_{0};
  std::atomic<uint64_t> bytes_done_{0};
  std::atomic<int> worst_rank_{0};  // failureRank of the worst failure so far
  std::atomic<bool> submitted_{false};
  // From the third line on: read, not written, by a submit and a
  // completion. Set once, by attach().
  TaskOwner* owner_ = nullptr;
  // What reset() owns (the pointers above point into it).
  std::shared_ptr<const SegmentDesc> segment_;
  std::shared_ptr<PeerHandle> peer_;
  std::shared_ptr<metrics::PeerTraffic> traffic_;
  // Set with worst_rank_ (under the mutex) and read only when that is not
  // 0: a task that never failed leaves both untouched.
  mutable std::mutex error_mu_;
  Status error_;
};

}  // namespace hawser
