// The rdma transport's counters as named Counters, and back (rdma_stats.h).
#include "transport/rdma/rdma_stats.h"

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace hawser::rdma {

namespace {

// The scalar fields, by name, of the live counters and of snapshots: f(name,
// the field of each of `s`...).
template <typename F, typename... S>
void forEachScalar(F&& f, S&... s) {
  f("handshakes_sent", s.handshakes_sent...);
  f("handshakes_served", s.handshakes_served...);
  f("passive_released", s.passive_released...);
  f("endpoints_created", s.endpoints_created...);
  f("slice_retries", s.slice_retries...);
  f("slice_requeues", s.slice_requeues...);
  f("slices_failed", s.slices_failed...);
  f("slices_refused", s.slices_refused...);
  f("slices_abandoned", s.slices_abandoned...);
  f("nic_failures", s.nic_failures...);
  f("cq_waits", s.cq_waits...);
  f("gpu_dmabuf_regs", s.gpu_dmabuf_regs...);
  f("gpu_peer_memory_regs", s.gpu_peer_memory_regs...);
}

// The per-local-NIC arrays, by name, in the same way.
template <typename F, typename... S>
void forEachNicArray(F&& f, S&... s) {
  f("wrs_posted", s.wrs_posted...);
  f("wc_errors", s.wc_errors...);
  f("wc_flushes", s.wc_flushes...);
  f("retries_to", s.retries_to...);
}

// "<prefix><digits>" -> the index; -1 when `key` is not that or is out of range.
int statsIndexAfter(std::string_view key, std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix || key.size() == prefix.size()) return -1;
  int i = 0;
  for (char ch : key.substr(prefix.size())) {
    if (ch < '0' || ch > '9') return -1;
    i = i * 10 + (ch - '0');
    if (i >= kMaxStatsNics) return -1;
  }
  return i;
}

// Applies `op` to every field of `a` and the same field of `b`.
template <typename Op>
void combineSnapshots(StatsSnapshot& a, const StatsSnapshot& b, Op op) {
  op(a.passive_qp_sets, b.passive_qp_sets);
  forEachScalar([&op](const char*, uint64_t& v, const uint64_t& w) { op(v, w); }, a, b);
  forEachNicArray(
      [&op](const char*, uint64_t* v, const uint64_t* w) {
        for (int i = 0; i < kMaxStatsNics; ++i) op(v[i], w[i]);
      },
      a, b);
  for (int i = 0; i < kMaxStatsNics; ++i) op(a.peer_nic_wrs[i], b.peer_nic_wrs[i]);
}

}  // namespace

StatsSnapshot& StatsSnapshot::operator+=(const StatsSnapshot& o) {
  combineSnapshots(*this, o, [](uint64_t& v, uint64_t w) { v += w; });
  return *this;
}

StatsSnapshot& StatsSnapshot::operator-=(const StatsSnapshot& o) {
  combineSnapshots(*this, o, [](uint64_t& v, uint64_t w) { v -= w; });
  return *this;
}

Counters countersOf(const Stats& s, size_t nics, uint64_t passive_qp_sets) {
  Counters c;
  forEachScalar([&c](const char* name, const std::atomic<uint64_t>& v) { c.emplace_back(name, v.load()); }, s);
  c.emplace_back("passive_qp_sets", passive_qp_sets);
  for (size_t i = 0; i < nics && i < static_cast<size_t>(Stats::kMaxNics); ++i)
    forEachNicArray(
        [&c, i](const char* name, const std::atomic<uint64_t>* a) {
          c.emplace_back(fmt::format("{}.nic{}", name, i), a[i].load());
        },
        s);
  int last = -1;
  for (int i = 0; i < Stats::kMaxNics; ++i)
    if (s.peer_nic_wrs[i].load() != 0) last = i;
  for (int i = 0; i <= last; ++i) c.emplace_back(fmt::format("peer_nic_wrs.peer{}", i), s.peer_nic_wrs[i].load());
  return c;
}

StatsSnapshot statsOf(const Counters& c) {
  StatsSnapshot s;
  for (const auto& kv : c) {
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& key = kv.first;
    const uint64_t value = kv.second;
    if (key == "passive_qp_sets") s.passive_qp_sets = value;
    forEachScalar(
        [&](const char* name, uint64_t& v) {
          if (key == name) v = value;
        },
        s);
    forEachNicArray(
        [&](const char* name, uint64_t* a) {
          const int i = statsIndexAfter(key, std::string(name) + ".nic");
          if (i >= 0) a[i] = value;
        },
        s);
    const int p = statsIndexAfter(key, "peer_nic_wrs.peer");
    if (p >= 0) s.peer_nic_wrs[p] = value;
  }
  return s;
}

}  // namespace hawser::rdma
