// What the engine counts for every transport alike, per peer: bytes, slices
// and tasks by direction, failures by status code, slices in flight,
// retries, and the latency of slices and tasks. Every task carries the
// PeerTraffic of the (transport, peer) it was routed to; Task::completeSlice
// (and completeWhole, failSlices) counts, so no transport counts traffic
// itself (docs/metrics.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/metrics.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser::metrics {

// The families (labels: transport, peer = the segment name, direction =
// read|write, code = hawser::codeName of the status).
inline constexpr FamilySpec kTransferredBytes{
    "hawser_transferred_bytes_total", "Bytes moved by completed slices, per transport, peer and direction",
    MetricType::kCounter, "transport,peer,direction"};
inline constexpr FamilySpec kSlices{"hawser_slices_total", "Slices ended (completed or not)", MetricType::kCounter,
                                    "transport,peer,direction"};
inline constexpr FamilySpec kSliceFailures{"hawser_slice_failures_total", "Slices that ended without completing, by code",
                                           MetricType::kCounter, "transport,peer,direction,code"};
inline constexpr FamilySpec kTasks{"hawser_tasks_total", "Tasks (requests) ended (completed or not)",
                                   MetricType::kCounter, "transport,peer,direction"};
inline constexpr FamilySpec kTaskFailures{"hawser_task_failures_total", "Tasks that ended without completing, by code",
                                          MetricType::kCounter, "transport,peer,direction,code"};
inline constexpr FamilySpec kInflightSlices{"hawser_inflight_slices", "Slices posted and not yet ended",
                                            MetricType::kGauge, "transport,peer"};
inline constexpr FamilySpec kRetries{"hawser_retries_total",
                                     "Slices a transport retried (another QP, NIC or connection) after an error",
                                     MetricType::kCounter, "transport,peer"};
inline constexpr FamilySpec kSliceSeconds{
    "hawser_slice_duration_seconds", "Time from a task's submission to the end of each of its slices",
    MetricType::kHistogram, "transport,direction"};
inline constexpr FamilySpec kTaskSeconds{"hawser_task_duration_seconds",
                                         "Time from a task's submission to the end of its last slice",
                                         MetricType::kHistogram, "transport,direction"};

// The peer label of peers past the table's limit.
inline constexpr std::string_view kOtherPeers = "_other";

// One (transport, peer)'s series. Thread-safe; the hot-path calls are
// relaxed atomic adds on the calling thread's shard.
class PeerTraffic {
 public:
  PeerTraffic(std::shared_ptr<Registry> registry, std::string transport, std::string peer);

  static int dir(OpCode op) { return op == OpCode::kRead ? 0 : 1; }

  void slicesPosted(uint32_t n) { inflight_->add(n); }
  // One slice ended: `bytes` count when `code` is kOk; `ns` since submission.
  // `shard`: the caller's threadShard().
  void sliceEnded(size_t shard, int dir, Code code, uint64_t bytes, uint64_t ns) {
    slicesEnded(shard, dir, code, 1, bytes, ns);
  }
  // `n` slices ended alike at once (`bytes` in all).
  void slicesEnded(size_t shard, int dir, Code code, uint32_t n, uint64_t bytes, uint64_t ns) {
    Dir& d = dir_[dir];
    d.slices->addAt(shard, n);
    if (code == Code::kOk) d.bytes->addAt(shard, bytes);
    else failure(d.slice_failures, kSliceFailures, dir, code)->addAt(shard, n);
    inflight_->addAt(shard, -static_cast<int64_t>(n));
    d.slice_seconds->observeNsAt(shard, ns, n);
  }
  void taskEnded(size_t shard, int dir, Code code, uint64_t ns) {
    Dir& d = dir_[dir];
    d.tasks->addAt(shard, 1);
    if (code != Code::kOk) failure(d.task_failures, kTaskFailures, dir, code)->addAt(shard, 1);
    d.task_seconds->observeNsAt(shard, ns);
  }
  // `n` tasks ended COMPLETED at once, each `ns` after its submission.
  void tasksEnded(size_t shard, int dir, uint32_t n, uint64_t ns) {
    Dir& d = dir_[dir];
    d.tasks->addAt(shard, n);
    d.task_seconds->observeNsAt(shard, ns, n);
  }
  // `n` tasks of one slice each moved at once, never posted (moved
  // directly, Transport::moveDirect): ended COMPLETED `ns` after they were
  // handed over, `bytes` in all.
  void movedDirect(size_t shard, int dir, uint32_t n, uint64_t bytes, uint64_t ns) {
    Dir& d = dir_[dir];
    d.slices->addAt(shard, n);
    d.bytes->addAt(shard, bytes);
    d.slice_seconds->observeNsAt(shard, ns, n);
    d.tasks->addAt(shard, n);
    d.task_seconds->observeNsAt(shard, ns, n);
  }
  void retried() { retries_->add(); }

  const std::string& transport() const { return transport_; }
  const std::string& peer() const { return peer_; }

 private:
  static constexpr size_t kCodes = static_cast<size_t>(Code::kInternal) + 1;
  struct Dir {
    Counter* bytes = nullptr;
    Counter* slices = nullptr;
    Counter* tasks = nullptr;
    Histogram* slice_seconds = nullptr;
    Histogram* task_seconds = nullptr;
    std::atomic<Counter*> slice_failures[kCodes] = {};  // looked up at a code's first failure
    std::atomic<Counter*> task_failures[kCodes] = {};
  };
  Counter* failure(std::atomic<Counter*>* slots, const FamilySpec& spec, int dir, Code code);

  std::shared_ptr<Registry> registry_;  // keeps the series alive while a task holds this
  std::string transport_, peer_;
  Dir dir_[2];
  Gauge* inflight_ = nullptr;
  Counter* retries_ = nullptr;
};

// An engine's PeerTraffic per (transport, peer), kept for the engine's life
// (counters never go backwards). Past `max_peers` peers, new peers share
// the series of peer "_other".
class TrafficTable {
 public:
  // Declares every traffic family at once, so a scrape lists them (HELP,
  // TYPE) before the first transfer.
  TrafficTable(std::shared_ptr<Registry> registry, size_t max_peers);
  std::shared_ptr<PeerTraffic> get(const std::string& transport, const std::string& peer);

 private:
  std::shared_ptr<Registry> registry_;
  size_t max_peers_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<PeerTraffic>> peers_;
  size_t named_ = 0;  // entries with a peer's own name
};

}  // namespace hawser::metrics
