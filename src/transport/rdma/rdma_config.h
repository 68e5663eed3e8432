// The rdma transport's knobs: its rows of the one strict config system
// (base/knob.h has the machinery; `hawser config --prefix rdma.` lists them).
// The generated list of built-in transports registers this table (its
// hawser_transport(... CONFIG kRdmaKnobs) call); the transport reads them
// through RdmaConfig, whose keys are checked against this table when they
// compile.
//
// Adding a knob: a row below, then regenerate the docs' tables (docs/config.md):
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kRdmaKnobs[] = {
  {"rdma.verbs_lib", "HAWSER_RDMA_VERBS_LIB", KnobType::kString, "libibverbs.so.1", 0, 0, {},
   "verbs library loaded at run time"},
  {"rdma.devices", "HAWSER_RDMA_DEVICES", KnobType::kString, "", 0, 0, {},
   "comma-separated NIC names to use (empty: all)"},
  {"rdma.gid_index", "HAWSER_RDMA_GID_INDEX", KnobType::kInt, "-1", -1, 255, {},
   "RoCE GID index override (-1: auto, RoCE v2 IPv4-mapped first)"},
  {"rdma.qps_per_peer", "HAWSER_RDMA_QPS_PER_PEER", KnobType::kInt, "2", 1, 64, {},
   "RC QPs per (local NIC, peer NIC)"},
  {"rdma.max_wr", "HAWSER_RDMA_MAX_WR", KnobType::kInt, "256", 1, 65536, {},
   "outstanding work requests per QP (capped by the device)"},
  {"rdma.slice_size", "HAWSER_RDMA_SLICE_SIZE", KnobType::kSize, "64K", 1, knob_detail::G, {},
   "bytes per work request"},
  {"rdma.retry_limit", "HAWSER_RDMA_RETRY_LIMIT", KnobType::kInt, "8", 0, 1000, {},
   "retries of a failed slice on other QPs/NICs before FAILED"},
  {"rdma.workers", "HAWSER_RDMA_WORKERS", KnobType::kInt, "0", 0, 64, {},
   "CQ-polling threads (0: min(NICs, 4))"},
  {"rdma.cq_entries", "HAWSER_RDMA_CQ_ENTRIES", KnobType::kInt, "16384", 16, 1 << 22, {},
   "CQ size per NIC (capped by the device)"},
  {"rdma.mtu", "HAWSER_RDMA_MTU", KnobType::kInt, "4096", 256, 4096, {},
   "upper bound on the path MTU"},
  {"rdma.qp_timeout", "HAWSER_RDMA_QP_TIMEOUT", KnobType::kInt, "14", 0, 31, {},
   "local ACK timeout exponent (4.096 us x 2^n)"},
  {"rdma.qp_retry_cnt", "HAWSER_RDMA_QP_RETRY_CNT", KnobType::kInt, "7", 0, 7, {},
   "transport retries"},
  {"rdma.qp_rnr_retry", "HAWSER_RDMA_QP_RNR_RETRY", KnobType::kInt, "7", 0, 7, {},
   "RNR retries (7 = infinite)"},
  {"rdma.qp_min_rnr_timer", "HAWSER_RDMA_QP_MIN_RNR_TIMER", KnobType::kInt, "12", 0, 31, {},
   "minimal RNR NAK timer (12 = 0.64 ms)"},
  {"rdma.traffic_class", "HAWSER_RDMA_TRAFFIC_CLASS", KnobType::kInt, "0", 0, 255, {},
   "RoCE GRH traffic class (DSCP << 2)"},
  {"rdma.service_level", "HAWSER_RDMA_SERVICE_LEVEL", KnobType::kInt, "0", 0, 15, {},
   "IB service level / RoCE priority"},
  {"rdma.hop_limit", "HAWSER_RDMA_HOP_LIMIT", KnobType::kInt, "64", 1, 255, {},
   "RoCE v2 GRH hop limit"},
  {"rdma.pretouch_threshold", "HAWSER_RDMA_PRETOUCH_THRESHOLD", KnobType::kSize, "4G", 0, 64 * knob_detail::T, {},
   "regions this large are pre-faulted before registration"},
  {"rdma.pretouch_threads", "HAWSER_RDMA_PRETOUCH_THREADS", KnobType::kInt, "8", 1, 256, {},
   "threads that pre-fault (capped by the CPU count)"},
  {"rdma.relaxed_ordering", "HAWSER_RDMA_RELAXED_ORDERING", KnobType::kBool, "true", 0, 0, {},
   "register memory with IBV_ACCESS_RELAXED_ORDERING when available"},
  {"rdma.connect_timeout_ms", "HAWSER_RDMA_CONNECT_TIMEOUT_MS", KnobType::kDurationMs, "5000", 1, 600000, {},
   "QP handshake RPC timeout"},
  {"rdma.poll_spin_us", "HAWSER_RDMA_POLL_SPIN_US", KnobType::kInt, "50", 0, 1000000, {},
   "microseconds a CQ worker busy-polls before it sleeps on the channel"},
  {"rdma.flush_timeout_ms", "HAWSER_RDMA_FLUSH_TIMEOUT_MS", KnobType::kDurationMs, "2000", 1, 600000, {},
   "after a NIC's fatal or CQ error: wait this long for its flushes, then retry its slices elsewhere"},
};
// clang-format on

using RdmaConfig = TableConfig<kRdmaKnobs>;

}  // namespace hawser
