// The shm transport: host memory of another process on the same host,
// copied by the kernel from one address space to the other
// (process_vm_readv/writev, "cross-memory attach"), no network hop.
//
// Target: publishes its pid, a random nonce, the address of a word holding
// that nonce (the probe) and the fd of its registration table (shm_table.h,
// a memfd listing its remote-accessible host memory, rewritten on every
// register/unregister). The target takes no part in a copy.
//
// Initiator: openPeer reads the probe word with process_vm_readv (EPERM:
// the kernel refuses cross-memory attach to that process; kNotSupported with
// the reason, and the engine falls back to the next transport), checks it
// holds the nonce (the pid is that process), opens a pidfd and maps the
// peer's table through /proc/<pid>/fd. Each task is cut into slices of at
// most shm.split_bytes and bound to the registration that holds its range
// (its generation in the table); consecutive slices of one prepare (a block
// request's window of runs) are grouped, up to shm.max_iov of them and
// shm.split_bytes in all, and each group is moved by one
// process_vm_readv/writev call with an iovec per slice, by one of
// shm.threads workers, after announcing it in the peer's table (the
// target's unregister waits for it). A peer that exits (its pidfd becomes
// readable, or a copy answers ESRCH) is marked dead at once: its table is
// unmapped, its slices fail kUnavailable.
//
// Files: shm_transport.cpp (install, peers, workers, sub-batches),
// shm_table.{h,cpp} (the registration table). Trust model, tunables and
// figures: docs/shm.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/transport.h"
#include "transport/shm/shm_table.h"

namespace hawser {

namespace shm {
struct Peer;
struct Slice;
struct Group;
struct Scratch;
class SubBatchImpl;
}  // namespace shm

struct ShmSettings {
  uint32_t threads = 0;             // shm.threads (0: min(4, CPUs))
  uint64_t split_bytes = 512 << 10; // shm.split_bytes
  uint32_t max_iov = 1024;          // shm.max_iov (IOV_MAX)
};

class ShmTransport final : public Transport {
 public:
  ShmTransport();
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  TransportCaps caps() const override;
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  // Remote-accessible host memory goes into the registration table.
  Status registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                        nlohmann::json& attrs) override;
  Status unregisterMemory(void* addr, size_t length) override;
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  void diagnose(TransportDiagnosis& out) const override;
  Counters stats() const override;

  static Status loadSettings(const Config& config, ShmSettings& out);
  const ShmSettings& settings() const { return settings_; }

 private:
  friend class shm::SubBatchImpl;
  void enqueue(std::vector<shm::Group*>& groups);
  void cancelQueued(shm::SubBatchImpl* sb);
  void work(unsigned worker);
  void watch();
  void runGroup(unsigned worker, shm::Group* g, shm::Scratch& scratch);
  void peerGone(int pidfd);

  ShmSettings settings_;
  bool installed_ = false;
  std::atomic<bool> stopping_{false};
  uint64_t nonce_ = 0;
  shm::TableWriter table_;

  // Workers and their queue.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<shm::Group*> queue_;
  std::vector<std::thread> workers_;

  // Peers by "pid/nonce"; the watcher waits on their pidfds.
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::weak_ptr<shm::Peer>> peers_;
  std::unordered_map<int, std::weak_ptr<shm::Peer>> by_pidfd_;
  int epfd_ = -1;
  int evfd_ = -1;
  std::thread watcher_;

  struct Counts {
    std::atomic<uint64_t> slices_completed{0};
    std::atomic<uint64_t> slices_failed{0};
    std::atomic<uint64_t> bytes_read{0};
    std::atomic<uint64_t> bytes_written{0};
    std::atomic<uint64_t> copy_calls{0};    // process_vm_readv/writev calls (each moves a group of slices)
    std::atomic<uint64_t> refused{0};       // not in the target's live table
    std::atomic<uint64_t> peers_opened{0};
    std::atomic<uint64_t> peers_refused{0};  // openPeer said no (CMA refused, wrong process)
    std::atomic<uint64_t> peers_gone{0};     // peers seen exiting
  };
  std::unique_ptr<Counts> counts_;
};

}  // namespace hawser
