#include "common/fake_transport.h"

#include <cstring>

#include "metadata/descriptor.h"

namespace hawser::test {

struct FakeTransport::Sub : SubBatch {
  std::vector<Slice> pending;
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

bool FakeTransport::canServe(const SegmentDesc& seg, const std::string&) const {
  return seg.kind == SegmentDesc::Kind::kMemory && seg.transports.contains("fake");
}

Status FakeTransport::allocateSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<Sub>();
  return Status::OK();
}

Status FakeTransport::prepare(SubBatch& sb, std::span<Task* const> tasks, size_t& slices) {
  auto& s = static_cast<Sub&>(sb);
  slices = 0;
  for (Task* t : tasks) {
    const auto& r = t->request();
    uint32_t n = 0;
    for (uint64_t off = 0; off < r.length; off += slice_size_, ++n) {
      uint64_t len = std::min<uint64_t>(slice_size_, r.length - off);
      s.pending.push_back(Slice{t, t->localAddr() + off, r.target_offset + off, len, n});
    }
    t->setSliceCount(n);
    slices += n;
  }
  return Status::OK();
}

void FakeTransport::submit(SubBatch& sb) {
  auto& s = static_cast<Sub&>(sb);
  {
    std::lock_guard lk(mu_);
    for (auto& sl : s.pending) {
      s.inflight++;
      queue_.emplace_back(&s, sl);
    }
  }
  s.pending.clear();
  cv_.notify_all();
}

void FakeTransport::discard(SubBatch& sb) { static_cast<Sub&>(sb).pending.clear(); }

void FakeTransport::cancel(SubBatch& sb) {
  std::deque<std::pair<Sub*, Slice>> mine;
  {
    std::lock_guard lk(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->first == &sb) {
        mine.push_back(*it);
        it = queue_.erase(it);
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

bool FakeTransport::idle(SubBatch& sb) { return static_cast<Sub&>(sb).inflight.load() == 0; }

void FakeTransport::freeSubBatch(std::unique_ptr<SubBatch> sb) {
  freed_++;
  sb.reset();
}

void FakeTransport::setVerdict(Verdict v) {
  std::lock_guard lk(mu_);
  verdict_ = std::move(v);
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
    executed_++;
    sub->inflight--;
    sl.task->completeSlice(st, st == TransferState::kCompleted ? sl.len : 0,
                           st == TransferState::kCompleted ? Status::OK()
                                                           : Status(Code::kIoError, std::string(stateName(st))));
    lk.lock();
  }
}

}  // namespace hawser::test
