// An rdma sub-batch: prepare cuts slices into an RdmaWork (no I/O), post
// hands them to routing, cancel stops what is not yet posted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/transport.h"
#include "transport/rdma/rdma_endpoint.h"

namespace hawser::rdma {

class RdmaTransport;

// Tasks and slices cut by one prepare(). Slices point at their TaskCtx: both
// vectors are reserved once and never reallocate.
struct RdmaWork final : PreparedWork {
  std::vector<TaskCtx> tasks;
  std::vector<Slice> cut;  // PreparedWork::slices of them
};

// What the slices of a sub-batch reach (Slice::sb) and what must outlive any
// work request that points at them.
struct SubBatchState {
  std::atomic<int64_t> inflight{0};  // posted slices not yet finished
  std::atomic<bool> canceled{false};
  std::vector<std::unique_ptr<RdmaWork>> posted;  // post() only (the engine serialises it)
};

class RdmaSubBatch final : public SubBatch {
 public:
  explicit RdmaSubBatch(RdmaTransport* owner) : owner_(owner), st_(std::make_unique<SubBatchState>()) {}
  // Frees the slices, unless some are still in flight: then they are kept
  // (leaked), since work requests may reference them.
  ~RdmaSubBatch() override;

  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override;

 private:
  RdmaTransport* owner_;
  std::unique_ptr<SubBatchState> st_;
};

}  // namespace hawser::rdma
