// The engine's batches: BatchID -> Batch (allocate, find, free), and the
// orphans: batches transferSync gave up on while transports still held
// their memory, freed by a later allocate (or stats()) once that I/O ended.
// What a batch does with its tasks is batch.h; submitting to one is the
// engine's (batches.cpp). Locks: the table's shared_mutex (find shared;
// allocate and free exclusive), taken under the orphan mutex when orphans
// are reaped, and itself held while a freed batch's submit mutex is taken
// (engine_impl.h: lock order).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class BatchTable {
 public:
  struct Settings {
    size_t max_capacity = 0;     // batch.max_capacity: tasks of one batch at most
    size_t slices_per_task = 0;  // batch.slices_per_task: a batch's slice capacity per task
    WaitSpin* spin = nullptr;    // shared by the batches (batch.h); null: none
  };

  // Before the first allocate (init).
  void configure(const Settings& s) { settings_ = s; }

  // A new batch of `capacity` tasks (orphans that let go are freed first).
  Status allocate(size_t capacity, BatchID& out);
  // The batch, or null when `id` is not allocated.
  std::shared_ptr<Batch> find(BatchID id) const;
  // Frees batch `id` once its tasks ended and no transport holds its
  // memory; kBatchBusy otherwise. settle: wait a moment (50 ms at most) for
  // transports still letting go of slices whose tasks ended.
  Status free(BatchID id, bool settle = true);
  // Batch `id` is left to the reaper (transferSync could not free it).
  void orphan(BatchID id);
  // Frees the orphans whose I/O ended.
  void reapOrphans();
  // Every open batch (shutdown waits for them), and forgetting them all,
  // their sub-batches dropped (after the transports shut down).
  std::vector<std::shared_ptr<Batch>> live() const;
  void clear();

  size_t open() const;
  size_t orphans() const;
  uint64_t allocated() const { return n_batches_.load(); }
  uint64_t reaped() const { return n_reaped_.load(); }

  // kInvalidBatch naming `id`.
  static Status notAllocated(BatchID id);

 private:
  Settings settings_;
  mutable std::shared_mutex batch_mu_;
  std::unordered_map<BatchID, std::shared_ptr<Batch>> batches_;
  BatchID next_batch_ = 1;
  mutable std::mutex orphan_mu_;
  std::vector<BatchID> orphans_;  // transferSync batches still referenced by I/O
  std::atomic<uint64_t> n_batches_{0}, n_reaped_{0};
};

}  // namespace hawser
