#include "common/fake_transport.h"

#include <cstring>

#include "metadata/descriptor.h"

namespace hawser::test {

struct FakeTransport::Work : PreparedWork {
  std::vector<Slice> slices_;
};

struct FakeTransport::Sub : SubBatch {
  explicit Sub(FakeTransport* o) : owner(o) {}
  ~Sub() override { owner->freed_++; }

  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override {
    auto w = std::make_unique<Work>();
    for (Task* t : tasks) {
      const auto& r = t->request();
      uint32_t n = 0;
      for (uint64_t off = 0; off < r.length; off += owner->slice_size_, ++n) {
        uint64_t len = std::min<uint64_t>(owner->slice_size_, r.length - off);
        w->slices_.push_back(Slice{t, t->localAddr() + off, r.target_offset + off, len, n, t->region()});
      }
      t->setSliceCount(n);
    }
    w->slices = w->slices_.size();
    out = std::move(w);
    return Status::OK();
  }

  void post(std::unique_ptr<PreparedWork> work) override {
    auto& w = static_cast<Work&>(*work);
    {
      std::lock_guard lk(owner->mu_);
      for (auto& sl : w.slices_) {
        inflight++;
        owner->queue_.emplace_back(this, sl);
      }
    }
    owner->cv_.notify_all();
  }

  void cancel() override {
    std::deque<std::pair<Sub*, Slice>> mine;
    {
      std::lock_guard lk(owner->mu_);
      if (!owner->cancelable_) return;
      for (auto it = owner->queue_.begin(); it != owner->queue_.end();) {
        if (it->first == this) {
          mine.push_back(*it);
          it = owner->queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& [sub, sl] : mine) {
      sub->inflight--;
      sl.task->completeSlice(TransferState::kCanceled, 0, Status(Code::kTimeout, "canceled by test"));
    }
  }

  bool idle() const override { return inflight.load() == 0; }

  FakeTransport* owner;
  std::atomic<int> inflight{0};
};

Status FakeTransport::install(const TransportContext&) {
  worker_ = std::thread([this] { loop(); });
  return Status::OK();
}

void FakeTransport::shutdown() {
  {
    std::lock_guard lk(mu_);
    if (stop_) return;
    stop_ = true;
    hold_ = false;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Status FakeTransport::registerRegion(const Region& region, nlohmann::json&, std::shared_ptr<const Registration>& out) {
  auto r = std::make_shared<Registered>();
  r->addr = region.addr;
  r->length = region.length;
  std::lock_guard lk(mu_);
  registered_[region.addr] = r;
  out = std::move(r);
  return Status::OK();
}

Status FakeTransport::unregisterMemory(void* addr, size_t) {
  std::lock_guard lk(mu_);
  auto it = registered_.find(reinterpret_cast<uint64_t>(addr));
  if (it == registered_.end()) return {Code::kNotRegistered, "fake: not a registered region"};
  it->second->torn_down.store(true);
  registered_.erase(it);
  return Status::OK();
}

std::shared_ptr<const FakeTransport::Registered> FakeTransport::registeredAt(uint64_t addr) {
  std::lock_guard lk(mu_);
  auto it = registered_.find(addr);
  return it == registered_.end() ? nullptr : it->second;
}

Status FakeTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  if (seg.kind != SegmentDesc::Kind::kMemory || !seg.transports.contains("fake"))
    return {Code::kNotSupported, "the peer has no fake transport"};
  out = std::make_shared<PeerHandle>();
  return Status::OK();
}

Status FakeTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<Sub>(this);
  return Status::OK();
}

void FakeTransport::setVerdict(Verdict v) {
  std::lock_guard lk(mu_);
  verdict_ = std::move(v);
}

void FakeTransport::setCancelable(bool on) {
  std::lock_guard lk(mu_);
  cancelable_ = on;
}

void FakeTransport::hold(bool on) {
  {
    std::lock_guard lk(mu_);
    hold_ = on;
  }
  cv_.notify_all();
}

void FakeTransport::loop() {
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || (!hold_ && !queue_.empty()); });
    if (queue_.empty() && stop_) return;
    auto [sub, sl] = queue_.front();
    queue_.pop_front();
    Verdict v = verdict_;
    lk.unlock();
    TransferState st = v ? v(sl) : TransferState::kCompleted;
    if (st == TransferState::kCompleted) {
      auto* local = reinterpret_cast<char*>(sl.local);
      auto* remote = reinterpret_cast<char*>(sl.remote);
      if (sl.task->request().opcode == OpCode::kRead) std::memcpy(local, remote, sl.len);
      else std::memcpy(remote, local, sl.len);
    }
    sl.region = LocalRegion{};  // the task alone holds its region once its slice ends
    executed_++;
    sub->inflight--;
    sl.task->completeSlice(st, st == TransferState::kCompleted ? sl.len : 0,
                           st == TransferState::kCompleted ? Status::OK()
                                                           : Status(Code::kIoError, std::string(stateName(st))));
    lk.lock();
  }
}

}  // namespace hawser::test
