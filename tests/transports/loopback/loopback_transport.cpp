#include "loopback_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/segment_desc.h"
#include "base/config.h"
#include "loopback_config.h"

namespace hawser::loopback {

namespace {

// A task is one slice per loopback.max_copy bytes: one memcpy each.
struct Work final : PreparedWork {
  std::deque<LoopbackTransport::Copy> copies;
};

class Batch final : public SubBatch {
 public:
  explicit Batch(LoopbackTransport* t) : t_(t) {}
  ~Batch() override {
    while (inflight_.load() != 0) std::this_thread::yield();  // the engine frees only idle sub-batches
  }
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override {
    auto w = std::make_unique<Work>();
    const uint64_t max_copy = t_->maxCopy();
    for (Task* task : tasks) {
      const uint64_t length = task->request().length;
      const uint64_t slices = length == 0 ? 1 : (length + max_copy - 1) / max_copy;
      task->setSliceCount(static_cast<uint32_t>(slices));
      for (uint64_t i = 0; i < slices; ++i)
        w->copies.push_back({task, &inflight_, i * max_copy, std::min(max_copy, length - i * max_copy)});
    }
    w->slices = w->copies.size();
    out = std::move(w);
    return Status::OK();
  }
  void post(std::unique_ptr<PreparedWork> work) override {
    auto& w = static_cast<Work&>(*work);
    inflight_.fetch_add(static_cast<int>(w.copies.size()));
    t_->enqueue(w.copies);
  }
  void cancel() override {}  // a memcpy is never worth stopping
  bool idle() const override { return inflight_.load() == 0; }

 private:
  LoopbackTransport* t_;
  std::atomic<int> inflight_{0};
};

}  // namespace

Status LoopbackTransport::install(const TransportContext& ctx) {
  static const Config defaults;
  const LoopbackConfig cfg(ctx.config ? *ctx.config : defaults);
  int workers = 0;
  Status s;
  if (!(s = cfg.getInt("loopback.workers", workers)).ok() || !(s = cfg.getSize("loopback.max_copy", max_copy_)).ok())
    return s;
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { run(); });
  return Status::OK();
}

void LoopbackTransport::shutdown() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  workers_.clear();
}

Status LoopbackTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  Status s = decodeLoopbackPeer(seg, why);
  if (!s.ok()) return s;
  out = std::make_shared<PeerHandle>();
  return Status::OK();
}

Status LoopbackTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<Batch>(this);
  return Status::OK();
}

Counters LoopbackTransport::stats() const { return {{"copies", copies_.load()}, {"bytes", bytes_.load()}}; }

void LoopbackTransport::enqueue(std::deque<Copy>& copies) {
  {
    std::lock_guard lk(mu_);
    for (auto& c : copies) queue_.push_back(c);
  }
  cv_.notify_one();
}

void LoopbackTransport::run() {
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Copy c = queue_.front();
    queue_.pop_front();
    lk.unlock();
    const TransferRequest& r = c.task->request();
    auto* remote = reinterpret_cast<char*>(r.target_offset) + c.offset;
    char* local = static_cast<char*>(r.source) + c.offset;
    if (r.opcode == OpCode::kRead)
      std::memcpy(local, remote, c.length);
    else
      std::memcpy(remote, local, c.length);
    copies_.fetch_add(1);
    bytes_.fetch_add(c.length);
    c.inflight->fetch_sub(1);
    c.task->completeSlice(TransferState::kCompleted, c.length);
    lk.lock();
  }
}

}  // namespace hawser::loopback

namespace hawser {
std::unique_ptr<Transport> makeLoopbackTransport() { return std::make_unique<loopback::LoopbackTransport>(); }

Status decodeLoopbackPeer(const SegmentDesc& seg, RouteDecline& why) {
  why = {};
  if (seg.pid != ::getpid())
    return declined(why, RouteReason::kRefused, {Code::kNotSupported, "the peer is another process"});
  return Status::OK();
}
}  // namespace hawser
