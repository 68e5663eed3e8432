// A test transport for engine-level tests: serves memory segments of engines
// in the same process with memcpy on a worker thread. Slices can be held
// (gate) or made to end in a chosen state, to pin the engine's bookkeeping.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "base/transport.h"

namespace hawser::test {

class FakeTransport : public Transport {
 public:
  // What it keeps of a registered region (Transport::registerRegion), and
  // whether unregisterMemory tore it down since.
  struct Registered : Registration {
    uint64_t addr = 0, length = 0;
    mutable std::atomic<bool> torn_down{false};
  };
  struct Slice {
    Task* task;
    uint64_t local, remote, len;
    uint32_t index;  // slice index within its task
    // The task's region and registration as prepare() was handed them (Task::region()).
    LocalRegion region;
  };
  // Decides how a slice ends: return kCompleted to copy, anything else to fail it.
  using Verdict = std::function<TransferState(const Slice&)>;

  explicit FakeTransport(size_t slice_size = 4096) : slice_size_(slice_size) {}
  ~FakeTransport() override { shutdown(); }

  const char* name() const override { return "fake"; }
  // Cheaper than every real transport, so engine tests run on it.
  TransportCaps caps() const override { return {.memory_segments = true, .cost_rank = 1}; }
  Status install(const TransportContext&) override;
  void shutdown() override;
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override;
  Status unregisterMemory(void* addr, size_t length) override;
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status newSubBatch(size_t, std::unique_ptr<SubBatch>& out) override;

  void setVerdict(Verdict v);
  void hold(bool on);  // while on, slices wait in the queue
  // When off, cancel() leaves queued slices alone: I/O that cannot be stopped.
  void setCancelable(bool on);
  uint64_t slicesExecuted() const { return executed_.load(); }
  uint64_t subBatchesFreed() const { return freed_.load(); }
  // The registration of the region starting at `addr` (null if none).
  std::shared_ptr<const Registered> registeredAt(uint64_t addr);

 private:
  struct Sub;
  struct Work;
  void loop();
  size_t slice_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Sub*, Slice>> queue_;
  bool hold_ = false, stop_ = false, cancelable_ = true;
  Verdict verdict_;
  std::thread worker_;
  std::atomic<uint64_t> executed_{0}, freed_{0};
  std::map<uint64_t, std::shared_ptr<Registered>> registered_;  // under mu_
};

}  // namespace hawser::test
