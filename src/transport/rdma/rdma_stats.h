// The rdma transport's counters: one set per transport instance, owned by
// the RdmaTransport and counted by its parts (endpoints through
// EndpointHost::counters(); the handshake, routing, registration and CQ
// workers in the transport itself), so two engines in one process count
// apart. RdmaTransport::stats() reports them (countersOf); tests and tools
// read a snapshot back with statsOf(transport or engine counters). "By NIC"
// arrays are indexed by the engine's local NIC index (or, for peer_nic_wrs,
// the peer's NIC index).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hawser/stats.h"

namespace hawser::rdma {

inline constexpr int kMaxStatsNics = 16;

struct Stats {
  static constexpr int kMaxNics = kMaxStatsNics;
  std::atomic<uint64_t> handshakes_sent{0};    // endpoints connected by this transport (attempts)
  std::atomic<uint64_t> handshakes_served{0};  // passive QP sets created for peers
  std::atomic<uint64_t> passive_released{0};   // passive QP sets destroyed because their requester let go
  std::atomic<uint64_t> endpoints_created{0};
  std::atomic<uint64_t> slice_retries{0};      // slices re-routed after an error (flushes not counted)
  std::atomic<uint64_t> slice_requeues{0};     // slices re-posted after a flush (no attempt used)
  std::atomic<uint64_t> slices_failed{0};
  std::atomic<uint64_t> slices_refused{0};     // failed at once: a deterministic error (not retried)
  std::atomic<uint64_t> cq_waits{0};           // times an endpoint waited for room in its NIC's CQ
  std::atomic<uint64_t> slices_abandoned{0};   // posted on a NIC that died and never flushed them
  std::atomic<uint64_t> nic_failures{0};       // DEVICE_FATAL and CQ_ERR events handled
  std::atomic<uint64_t> gpu_dmabuf_regs{0};       // GPU regions registered through a dma-buf
  std::atomic<uint64_t> gpu_peer_memory_regs{0};  // GPU regions registered with plain ibv_reg_mr
  std::atomic<uint64_t> wrs_posted[kMaxNics] = {};    // by local NIC
  std::atomic<uint64_t> peer_nic_wrs[kMaxNics] = {};  // by the peer NIC they were sent to
  std::atomic<uint64_t> wc_errors[kMaxNics] = {};     // error completions other than flushes, by local NIC
  std::atomic<uint64_t> wc_flushes[kMaxNics] = {};    // flushed completions, by local NIC
  std::atomic<uint64_t> retries_to[kMaxNics] = {};    // retries (not requeues) routed onto this local NIC
};

// A snapshot of one transport's Stats, field by field (the meanings are
// above), for tests and tools: statsOf(engine.stats()'s "rdma" counters).
struct StatsSnapshot {
  static constexpr int kMaxNics = kMaxStatsNics;
  uint64_t handshakes_sent = 0;
  uint64_t handshakes_served = 0;
  uint64_t passive_released = 0;
  uint64_t passive_qp_sets = 0;  // passive QP sets alive now (a gauge)
  uint64_t endpoints_created = 0;
  uint64_t slice_retries = 0;
  uint64_t slice_requeues = 0;
  uint64_t slices_failed = 0;
  uint64_t slices_refused = 0;
  uint64_t cq_waits = 0;
  uint64_t slices_abandoned = 0;
  uint64_t nic_failures = 0;
  uint64_t gpu_dmabuf_regs = 0;
  uint64_t gpu_peer_memory_regs = 0;
  uint64_t wrs_posted[kMaxNics] = {};
  uint64_t peer_nic_wrs[kMaxNics] = {};
  uint64_t wc_errors[kMaxNics] = {};
  uint64_t wc_flushes[kMaxNics] = {};
  uint64_t retries_to[kMaxNics] = {};

  // Field-by-field sum (both engines of a pair) and difference (what was
  // counted since an earlier snapshot `o` of the same transport).
  StatsSnapshot& operator+=(const StatsSnapshot& o);
  StatsSnapshot& operator-=(const StatsSnapshot& o);
};

// The counters RdmaTransport::stats() reports: the scalars by name, the
// per-local-NIC arrays as "<name>.nic<i>" for the `nics` NICs in use, and
// peer_nic_wrs as "peer_nic_wrs.peer<i>" up to the highest peer NIC sent to.
Counters countersOf(const Stats& s, size_t nics, uint64_t passive_qp_sets);
// The inverse: a snapshot from such counters (names it does not know are
// skipped, those absent read 0).
StatsSnapshot statsOf(const Counters& c);

}  // namespace hawser::rdma
