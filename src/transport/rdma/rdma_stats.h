// Process-wide counters of the rdma transport (all engines of the process),
// for tests, `hawser bench` and debugging. "By NIC" arrays are indexed by the
// engine's local NIC index (or, for peer_nic_wrs, the peer's NIC index).
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::rdma {

struct Stats {
  static constexpr int kMaxNics = 16;
  std::atomic<uint64_t> handshakes_sent{0};    // endpoints connected by this process (attempts)
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

  void reset() {
    for (auto* c : {&handshakes_sent, &handshakes_served, &passive_released, &endpoints_created, &slice_retries,
                    &slice_requeues, &slices_failed, &slices_refused, &cq_waits, &slices_abandoned, &nic_failures, &gpu_dmabuf_regs,
                    &gpu_peer_memory_regs})
      *c = 0;
    for (auto* a : {wrs_posted, peer_nic_wrs, wc_errors, wc_flushes, retries_to})
      for (int i = 0; i < kMaxNics; ++i) a[i] = 0;
  }
};

Stats& stats();

}  // namespace hawser::rdma
