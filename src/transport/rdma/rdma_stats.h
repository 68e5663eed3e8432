// Process-wide counters of the rdma transport (all engines of the process),
// for tests, `hawser bench` and debugging.
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::rdma {

struct Stats {
  static constexpr int kMaxNics = 16;
  std::atomic<uint64_t> handshakes_sent{0};    // endpoints connected by this process (attempts)
  std::atomic<uint64_t> handshakes_served{0};  // passive QP sets created for peers
  std::atomic<uint64_t> endpoints_created{0};
  std::atomic<uint64_t> slice_retries{0};      // slices re-routed after an error
  std::atomic<uint64_t> slices_failed{0};
  std::atomic<uint64_t> gpu_dmabuf_regs{0};       // GPU regions registered through a dma-buf
  std::atomic<uint64_t> gpu_peer_memory_regs{0};  // GPU regions registered with plain ibv_reg_mr
  std::atomic<uint64_t> wrs_posted[kMaxNics] = {};  // by local NIC index

  void reset() {
    handshakes_sent = 0;
    handshakes_served = 0;
    endpoints_created = 0;
    slice_retries = 0;
    slices_failed = 0;
    gpu_dmabuf_regs = 0;
    gpu_peer_memory_regs = 0;
    for (auto& w : wrs_posted) w = 0;
  }
};

Stats& stats();

}  // namespace hawser::rdma
