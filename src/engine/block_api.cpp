// Block requests through the engine: submit (check, then post as one task),
// prepared plans (check once, post many), their counters, and the public
// TransferEngine methods that reach them.
#include <fmt/format.h>

#include "base/log.h"
#include "engine/engine_impl.h"

namespace hawser {

Status EngineImpl::postBlocks(BatchID id, std::shared_ptr<const BlockPlan> plan, size_t* task_id,
                              const Signal* signal) {
  auto batch = findBatch(id);
  if (!batch) return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  std::string signal_host;
  uint16_t signal_port = 0;
  if (signal) {
    Status s = signalTarget(*plan->view, "", *signal, signal_host, signal_port);
    if (!s.ok()) {
      n_refused_.add(1);
      return s;
    }
  }
  std::lock_guard sl(batch->submitMutex());
  const size_t base = batch->taskCount();
  if (base >= batch->capacity()) {
    n_refused_.add(1);
    return {Code::kCapacityExceeded,
            fmt::format("batch {} holds {} of {} tasks; a block request needs one more", id, base, batch->capacity())};
  }
  const BlockPlan& p = *plan;
  Task& parent = batch->task(base);
  const Run first = p.run(0);
  TransferRequest req{p.op, reinterpret_cast<void*>(first.local), p.target, first.remote, p.bytes};
  batch->noRecycle();  // the parent task holds its view's descriptor and peer
  parent.reset(req, base, p.view->desc, p.route->peer, p.buffer >= 0 ? p.buffer : -1);
  parent.setSliceCount(static_cast<uint32_t>(p.runs));
  auto runner = std::make_shared<BlockRunner>(std::move(plan), &parent, pump_.get(), run_arrays_, block_settings_,
                                              &block_counters_);
  Status s = runner->prepareFirst();
  if (!s.ok()) {
    n_refused_.add(1);
    return s;
  }
  batch->addRunner(runner);
  if (signal)  // the block request counts as one request of the signal
    batch->addNotify(1, outbox_.track(signal_host, signal_port, p.view->desc->name, nullptr, signal->name, 1),
                     &outbox_);
  batch->commit(1, 0);  // the runner bounds its own slices (block.lanes x block.window runs)
  n_tasks_.add(1);
  block_counters_.tasks.fetch_add(1, std::memory_order_relaxed);
  if (p.fallback) fallbacks_->note(p.view->desc->name, *p.fallback, *p.route, p.fallback_why, 1);
  runner->start();
  if (task_id) *task_id = base;
  return Status::OK();
}

Status EngineImpl::submitBlocks(BatchID id, OpCode op, SegmentID target, const BlockSource& src, size_t* task_id,
                                const Signal* signal) {
  if (!findBatch(id))
    return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  auto plan = std::make_shared<BlockPlan>();
  Status s = buildBlocks(op, target, src, *plan);
  if (!s.ok()) {
    n_refused_.add(1);
    return s;
  }
  return postBlocks(id, std::move(plan), task_id, signal);
}

Status EngineImpl::submitStrided(BatchID id, OpCode op, SegmentID target, const StridedBlocks& b, size_t* task_id) {
  if (!findBatch(id))
    return {Code::kInvalidBatch, fmt::format("batch id {} is not allocated (never, or already freed)", id)};
  auto plan = std::make_shared<BlockPlan>();
  Status s = buildStrided(op, target, b, *plan);
  if (!s.ok()) {
    n_refused_.add(1);
    return s;
  }
  return postBlocks(id, std::move(plan), task_id);
}

Status EngineImpl::addPlan(BlockPlan&& plan, PlanID& out) {
  out = plans_.add(std::move(plan));
  return Status::OK();
}

Status EngineImpl::prepareBlocks(OpCode op, SegmentID target, const BlockSource& src, PlanID& out) {
  BlockPlan plan;
  Status s = buildBlocks(op, target, src, plan);
  if (!s.ok()) return s;
  return addPlan(std::move(plan), out);
}

Status EngineImpl::prepareStrided(OpCode op, SegmentID target, const StridedBlocks& b, PlanID& out) {
  BlockPlan plan;
  Status s = buildStrided(op, target, b, plan);
  if (!s.ok()) return s;
  return addPlan(std::move(plan), out);
}

Status EngineImpl::postPlan(BatchID id, PlanID plan_id, size_t* task_id, const Signal* signal) {
  Status s = checkInit();
  if (!s.ok()) return s;
  std::shared_ptr<const BlockPlan> plan;
  if (!(s = plans_.find(plan_id, plan)).ok()) return s;
  // Memory unregistered since the plan was checked: check its local side again.
  if (registry_.removals() != plan->removals) {
    s = refreshLocal(plan_id, plan);
    if (!s.ok()) {
      n_refused_.add(1);
      return {s.code(), fmt::format("plan {}: {}", plan_id, s.message())};
    }
  }
  return postBlocks(id, std::move(plan), task_id, signal);
}

Status EngineImpl::planInfo(PlanID plan_id, PlanInfo& out) const { return plans_.info(plan_id, out); }

Status EngineImpl::releasePlan(PlanID plan_id) { return plans_.release(plan_id); }

Counters EngineImpl::blockStats() const {
  const BlockCounters& c = block_counters_;
  return {{"block_tasks", c.tasks.load()},
          {"block_runs_started", c.runs_started.load()},
          {"block_runs_inflight", c.runs_in_flight.load()},
          {"block_bytes_per_inflight_run", BlockRunner::bytesPerRun()},
          {"block_window_bytes", c.window_bytes.load()},
          {"block_window_bytes_max_per_task", BlockRunner::maxWindowBytes(block_settings_)},
          {"block_plans_open", c.plans_open.load()},
          {"block_plan_bytes", c.plan_bytes.load()}};
}

// ---- the public methods ----------------------------------------------------------

Status TransferEngine::submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                                    size_t* task_id) {
  return impl_->submitBlocks(batch, op, target, BlockSource::of(blocks), task_id);
}
Status TransferEngine::submitBlocks(BatchID batch, OpCode op, SegmentID target, const BlockArrays& blocks,
                                    size_t* task_id) {
  return impl_->submitBlocks(batch, op, target, BlockSource::of(blocks), task_id);
}
Status TransferEngine::submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                                    const RouteContract& route, size_t* task_id) {
  BlockSource src = BlockSource::of(blocks);
  src.arrays.route = route;
  return impl_->submitBlocks(batch, op, target, src, task_id);
}
Status TransferEngine::submitStrided(BatchID batch, OpCode op, SegmentID target, const StridedBlocks& blocks,
                                     size_t* task_id) {
  return impl_->submitStrided(batch, op, target, blocks, task_id);
}
Status TransferEngine::prepareBlocks(OpCode op, SegmentID target, std::span<const Block> blocks, PlanID& out) {
  return impl_->prepareBlocks(op, target, BlockSource::of(blocks), out);
}
Status TransferEngine::prepareBlocks(OpCode op, SegmentID target, const BlockArrays& blocks, PlanID& out) {
  return impl_->prepareBlocks(op, target, BlockSource::of(blocks), out);
}
Status TransferEngine::prepareBlocks(OpCode op, SegmentID target, std::span<const Block> blocks,
                                     const RouteContract& route, PlanID& out) {
  BlockSource src = BlockSource::of(blocks);
  src.arrays.route = route;
  return impl_->prepareBlocks(op, target, src, out);
}
Status TransferEngine::prepareStrided(OpCode op, SegmentID target, const StridedBlocks& blocks, PlanID& out) {
  return impl_->prepareStrided(op, target, blocks, out);
}
Status TransferEngine::postPlan(BatchID batch, PlanID plan, size_t* task_id) {
  return impl_->postPlan(batch, plan, task_id);
}
Status TransferEngine::submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                                    const Signal& signal, size_t* task_id) {
  return impl_->submitBlocks(batch, op, target, BlockSource::of(blocks), task_id, &signal);
}
Status TransferEngine::postPlan(BatchID batch, PlanID plan, const Signal& signal, size_t* task_id) {
  return impl_->postPlan(batch, plan, task_id, &signal);
}
Status TransferEngine::planInfo(PlanID plan, PlanInfo& out) const { return impl_->planInfo(plan, out); }
Status TransferEngine::releasePlan(PlanID plan) { return impl_->releasePlan(plan); }

}  // namespace hawser
