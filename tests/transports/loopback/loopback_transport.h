// loopback: moves bytes between engines of one process with memcpy on a
// worker thread. The smallest complete transport (see README.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "base/transport.h"

namespace hawser {
// Its descriptor decoder, beside its factory (makeLoopbackTransport): the
// engine's list of built-in transports finds it by that name
// (engine/transport_list.h). All it reads of a peer: its process.
Status decodeLoopbackPeer(const SegmentDesc& seg, RouteDecline& why);
}  // namespace hawser

namespace hawser::loopback {

class LoopbackTransport final : public Transport {
 public:
  ~LoopbackTransport() override { shutdown(); }

  const char* name() const override { return "loopback"; }
  TransportCaps caps() const override {
    return {.memory_segments = true, .same_host_only = true, .cost_rank = 5};
  }
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  // Serves only segments of engines in this process.
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  Counters stats() const override;

  // One slice of a task: `length` bytes at `offset` into it.
  struct Copy {
    Task* task;
    std::atomic<int>* inflight;
    uint64_t offset, length;
  };
  void enqueue(std::deque<Copy>& copies);
  uint64_t maxCopy() const { return max_copy_; }

 private:
  void run();
  uint64_t max_copy_ = 0;  // loopback.max_copy
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // loopback.workers
  std::atomic<uint64_t> copies_{0}, bytes_{0};
};

}  // namespace hawser::loopback
