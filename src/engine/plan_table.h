// Prepared block plans (prepareBlocks, prepareStrided: blocks.md): PlanID ->
// the checked BlockPlan, posted any number of times until released. A plan
// is immutable; one whose local memory was unregistered since is replaced
// whole by a re-checked copy (block_requests.cpp: refreshLocal). The memory
// plans hold and how many are open are counted in the engine's
// BlockCounters. Its mutex is a leaf: nothing else is taken under it
// (engine_impl.h: lock order).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "engine/block_plan.h"
#include "engine/block_runner.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class PlanTable {
 public:
  // counters: plan_bytes and plans_open are kept here; it outlives the table.
  explicit PlanTable(BlockCounters& counters) : counters_(counters) {}

  // Keeps `plan` (marked prepared) under a new id.
  PlanID add(BlockPlan&& plan);
  // The plan, or kInvalidArgument naming `id` when it is not prepared.
  Status find(PlanID id, std::shared_ptr<const BlockPlan>& out) const;
  Status info(PlanID id, PlanInfo& out) const;
  // Plan `id` becomes `fresh` where it still is `old` (not released or
  // replaced meanwhile); true when it did.
  bool replace(PlanID id, const std::shared_ptr<const BlockPlan>& old, std::shared_ptr<const BlockPlan> fresh);
  // Forgets plan `id` (posted tasks keep what they hold of it).
  Status release(PlanID id);
  size_t size() const;

  // kInvalidArgument naming `id`.
  static Status notPrepared(PlanID id);

 private:
  BlockCounters& counters_;
  mutable std::mutex plan_mu_;
  std::unordered_map<PlanID, std::shared_ptr<const BlockPlan>> plans_;
  PlanID next_plan_ = 1;
};

}  // namespace hawser
