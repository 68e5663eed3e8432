// Prepared block plans (plan_table.h).
#include "engine/plan_table.h"

#include <fmt/format.h>

namespace hawser {

Status PlanTable::notPrepared(PlanID id) {
  return {Code::kInvalidArgument, fmt::format("plan id {} is not prepared (never, or already released)", id)};
}

PlanID PlanTable::add(BlockPlan&& plan) {
  plan.prepared = true;
  auto p = std::make_shared<const BlockPlan>(std::move(plan));
  std::lock_guard lk(plan_mu_);
  PlanID out = next_plan_++;
  counters_.plan_bytes.fetch_add(p->memoryBytes(), std::memory_order_relaxed);
  counters_.plans_open.fetch_add(1, std::memory_order_relaxed);
  plans_.emplace(out, std::move(p));
  return out;
}

Status PlanTable::find(PlanID id, std::shared_ptr<const BlockPlan>& out) const {
  std::lock_guard lk(plan_mu_);
  auto it = plans_.find(id);
  if (it == plans_.end()) return notPrepared(id);
  out = it->second;
  return Status::OK();
}

Status PlanTable::info(PlanID id, PlanInfo& out) const {
  std::lock_guard lk(plan_mu_);
  auto it = plans_.find(id);
  if (it == plans_.end()) return notPrepared(id);
  out = PlanInfo{it->second->blocks, it->second->runs, it->second->bytes};
  return Status::OK();
}

bool PlanTable::replace(PlanID id, const std::shared_ptr<const BlockPlan>& old,
                        std::shared_ptr<const BlockPlan> fresh) {
  std::shared_ptr<const BlockPlan> gone;  // freed outside the lock (when no task holds it)
  std::lock_guard lk(plan_mu_);
  auto it = plans_.find(id);
  if (it == plans_.end() || it->second != old) return false;
  counters_.plan_bytes.fetch_add(fresh->memoryBytes(), std::memory_order_relaxed);
  counters_.plan_bytes.fetch_sub(old->memoryBytes(), std::memory_order_relaxed);
  gone = std::exchange(it->second, std::move(fresh));
  return true;
}

Status PlanTable::release(PlanID id) {
  std::shared_ptr<const BlockPlan> gone;  // freed outside the lock
  std::lock_guard lk(plan_mu_);
  auto it = plans_.find(id);
  if (it == plans_.end()) return notPrepared(id);
  gone = std::move(it->second);
  plans_.erase(it);
  counters_.plan_bytes.fetch_sub(gone->memoryBytes(), std::memory_order_relaxed);
  counters_.plans_open.fetch_sub(1, std::memory_order_relaxed);
  return Status::OK();
}

size_t PlanTable::size() const {
  std::lock_guard lk(plan_mu_);
  return plans_.size();
}

}  // namespace hawser
