// The engine's batches: BatchID -> Batch (allocate, find, free), and the
// orphans: batches transferSync gave up on while transports still held
// their memory, freed by a later allocate (or stats()) once that I/O ended.
// What a batch does with its tasks is batch.h; submitting to one is the
// engine's (batches.cpp).
//
// The table is cut into shards, each with its own lock, map and id counter
// on cache lines of its own; a thread allocates in the shard it was given
// on its first allocate (round robin), and an id names its shard (its low
// bits). Threads submitting batches side by side (transferSync's allocate,
// find, free) then take no lock and write no line another thread takes:
// one table lock for all made every small batch of several threads wait
// for each other. Ids stay unique and are never reused; they are not
// consecutive.
//
// A freed batch that can be (Batch::recyclable) is kept in its shard, a
// few at most, and handed out again by the shard's next allocations: no
// allocation of the batch and its tasks, and its submits reuse the segment
// views and local regions its earlier uses resolved while those are
// current (Batch::recycle). Closing a segment or unregistering memory
// makes the kept batches let go of theirs (cool): nothing is held past
// closeSegment or unregisterLocalMemory by a batch nobody uses.
//
// Locks: a shard's mutex (a plain one, cheaper than a shared mutex: its
// own thread takes it to allocate and free, others rarely, to find a
// batch by id), taken under the orphan mutex when orphans are reaped, and
// itself held while a freed batch's submit mutex is taken (engine_impl.h:
// lock order). What a kept batch lets go of is dropped outside it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/cache_line.h"
#include "engine/batch.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class MemoryRegistry;
class OpenSegments;

class BatchTable {
 public:
  struct Settings {
    size_t max_capacity = 0;     // batch.max_capacity: tasks of one batch at most
    size_t slices_per_task = 0;  // batch.slices_per_task: a batch's slice capacity per task
    WaitSpin* spin = nullptr;    // shared by the batches (batch.h); null: none
    // The stamps of what a recycled batch keeps (Batch::recycle): the open
    // segments' generation, the registry's removals. Null: no recycling.
    const OpenSegments* segments = nullptr;
    const MemoryRegistry* registry = nullptr;
  };
  // Batches kept for reuse in one shard at most.
  static constexpr size_t kKeptPerShard = 4;

  // Before the first allocate (init).
  void configure(const Settings& s) { settings_ = s; }

  // A new batch of `capacity` tasks (orphans that let go are freed first);
  // `held` (optional): the batch itself, for a caller that uses it at once.
  Status allocate(size_t capacity, BatchID& out, std::shared_ptr<Batch>* held = nullptr);
  // The batch, or null when `id` is not allocated.
  std::shared_ptr<Batch> find(BatchID id) const;
  // Frees batch `id` once its tasks ended and no transport holds its
  // memory; kBatchBusy otherwise. settle: wait a moment (50 ms at most) for
  // transports still letting go of slices whose tasks ended.
  Status free(BatchID id, bool settle = true);
  // The kept batches let go of the views (a segment was closed or its view
  // replaced) and/or the local regions (memory was unregistered) they kept.
  void cool(bool views, bool regions);
  // Batches kept for reuse, all shards.
  size_t kept() const;
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
  uint64_t allocated() const;
  uint64_t reaped() const { return n_reaped_.load(); }

  // kInvalidBatch naming `id`.
  static Status notAllocated(BatchID id);

  static constexpr unsigned kShardBits = 6;
  static constexpr size_t kShards = size_t{1} << kShardBits;
  // The shard of batch `id` (its low bits; ids start at 1).
  static size_t shardOf(BatchID id) { return static_cast<size_t>((id - 1) & (kShards - 1)); }

 private:
  struct alignas(kFalseSharingBytes) Shard {
    mutable std::mutex mu;
    using Map = std::unordered_map<BatchID, std::shared_ptr<Batch>>;
    Map batches;                               // under mu
    uint64_t made = 0;                         // under mu: batches allocated here
    std::vector<std::shared_ptr<Batch>> kept;  // under mu: freed, for reuse (oldest first)
    std::vector<Map::node_type> nodes;         // under mu: the map's nodes of freed batches, for reuse
  };
  // Keeps freed batch `b` (nobody else holds it) for reuse in shard `sh`.
  void keep(Shard& sh, std::shared_ptr<Batch> b);
  // The shard this thread allocates in.
  static size_t myShard();

  Settings settings_;
  Shard shards_[kShards];
  mutable std::mutex orphan_mu_;
  std::vector<BatchID> orphans_;      // transferSync batches still referenced by I/O
  std::atomic<size_t> n_orphans_{0};  // orphans_.size(), read without the lock
  std::atomic<uint64_t> n_reaped_{0};
};

}  // namespace hawser
