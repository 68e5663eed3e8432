// An rdma sub-batch: prepare checks keys and cuts slices (no I/O), post
// routes them (rdma_route.cpp), cancel stops the slices not yet posted.
#include "transport/rdma/rdma_sub_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/rdma/rdma_peer.h"
#include "transport/rdma/rdma_transport.h"

namespace hawser::rdma {

Status RdmaSubBatch::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  RdmaTransport& t = *owner_;
  if (t.stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  const uint64_t slice = t.t_.slice_size;
  auto sliceCount = [slice](uint64_t length) { return std::max<uint64_t>(1, (length + slice - 1) / slice); };

  // Pass 1: check every task and gather what its slices need.
  auto work = std::make_unique<RdmaWork>();
  work->tasks.reserve(tasks.size());
  size_t total = 0;
  for (Task* task : tasks) {
    const TransferRequest& rq = task->request();
    const auto* ref = static_cast<const PeerRef*>(task->peer());
    const int bi = task->remoteBuffer();
    if (!ref || bi < 0 || static_cast<size_t>(bi) >= ref->buffers.size())
      return Status(Code::kInternal,
                    fmt::format("requests[{}]: no rdma peer handle or remote buffer {} for it", task->id(), bi));
    const RemoteBuffer& rb = ref->buffers[static_cast<size_t>(bi)];
    if (!rb.refusal.ok()) return rb.refusal;
    TaskCtx tc;
    tc.task = task;
    tc.peer = ref->peer;
    tc.rkeys = rb.rkeys;
    tc.remote_numa = rb.numa;
    // The local region's MRs: found with the region at submit, never looked up here.
    const auto* reg = static_cast<const MemoryRegistration*>(task->region().registration);
    if (!reg || reg->deregistered.load(std::memory_order_acquire))
      return Status(Code::kNotRegistered,
                    fmt::format("local range [{:#x}, +{}) is not inside one rdma-registered region{}",
                                task->localAddr(), rq.length, reg ? " (unregistered since it was submitted)" : ""));
    tc.lkeys = reg->lkeys.data();
    tc.local_numa = reg->numa;
    const uint64_t n = sliceCount(rq.length);
    if (n > 0xffffffffull) return Status(Code::kInvalidArgument, "too many slices for one task");
    tc.salt = t.salt_.fetch_add(1, std::memory_order_relaxed);
    work->tasks.push_back(std::move(tc));
    total += n;
  }

  // Pass 2: cut.
  work->cut.reserve(total);
  for (TaskCtx& tc : work->tasks) {
    const TransferRequest& rq = tc.task->request();
    const uint64_t n = sliceCount(rq.length);
    tc.task->setSliceCount(static_cast<uint32_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      Slice& s = work->cut.emplace_back();
      s.tc = &tc;
      s.sb = st_.get();
      s.index = static_cast<uint32_t>(i);
      s.local_addr = tc.task->localAddr() + i * slice;
      s.remote_addr = rq.target_offset + i * slice;
      s.length = static_cast<uint32_t>(std::min<uint64_t>(slice, rq.length - i * slice));
      s.is_read = rq.opcode == OpCode::kRead;
    }
  }
  work->slices = total;
  out = std::move(work);
  return Status::OK();
}

void RdmaSubBatch::post(std::unique_ptr<PreparedWork> base) {
  std::unique_ptr<RdmaWork> work(static_cast<RdmaWork*>(base.release()));
  std::vector<Slice*> batch;
  batch.reserve(work->cut.size());
  for (Slice& s : work->cut) batch.push_back(&s);
  st_->posted.push_back(std::move(work));
  if (batch.empty()) return;
  st_->inflight.fetch_add(static_cast<int64_t>(batch.size()), std::memory_order_acq_rel);
  owner_->route(batch);
}

void RdmaSubBatch::cancel() {
  st_->canceled.store(true, std::memory_order_release);
  for (auto& ep : owner_->endpointsOf()) ep->purgeCanceled();
}

bool RdmaSubBatch::idle() const { return st_->inflight.load(std::memory_order_acquire) == 0; }

RdmaSubBatch::~RdmaSubBatch() {
  const int64_t left = st_->inflight.load(std::memory_order_acquire);
  if (left != 0) {
    // Work requests may still reference its slices: never free under the NIC.
    HLOG_ERROR("rdma: sub-batch freed with {} slice(s) in flight; keeping its slices", left);
    (void)st_.release();
  }
}

}  // namespace hawser::rdma
