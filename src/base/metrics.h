// Metrics: counters, gauges and latency histograms in labelled families,
// kept in one Registry per engine and read out as hawser::MetricFamily
// (hawser/stats.h) for stats(), `hawser bench --json` and the Prometheus
// endpoint of `hawser serve --metrics`.
//
// The hot path is an instrument pointer looked up once (Family::with, under
// the family's mutex: at install, when a peer is opened) and then bumped
// with relaxed atomics on a per-thread shard, so threads that count the same
// series do not share a cache line and nothing locks per slice.
//
// Families are declared once as a FamilySpec constant next to what counts
// them (base/traffic_metrics.h, base/transport_metrics.h); the registry
// creates a family on first use and hands the same one to every later user.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/cache_line.h"
#include "hawser/stats.h"

namespace hawser::metrics {

// Shards per instrument; a thread uses one (assigned round-robin at its
// first count), so up to this many threads count without contention.
inline constexpr size_t kShards = 8;
namespace detail {
size_t nextShard();
// This thread's shard + 1; 0 until its first count (constant-initialized:
// no guard on the hot path).
inline thread_local size_t t_shard = 0;
}  // namespace detail
inline size_t threadShard() {
  size_t s = detail::t_shard;
  if (__builtin_expect(s == 0, 0)) s = detail::t_shard = detail::nextShard() + 1;
  return s - 1;
}

// A monotonic count.
class Counter {
 public:
  void add(uint64_t n = 1) { addAt(threadShard(), n); }
  // With the caller's threadShard() (several adds, one lookup).
  void addAt(size_t shard, uint64_t n) { cells_[shard].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const;

 private:
  struct alignas(kFalseSharingBytes) Cell {
    std::atomic<uint64_t> v{0};
  };
  Cell cells_[kShards];
};

// A value that goes up and down (slices in flight, open connections).
class Gauge {
 public:
  void add(int64_t n) { addAt(threadShard(), n); }
  void addAt(size_t shard, int64_t n) { cells_[shard].v.fetch_add(n, std::memory_order_relaxed); }
  // For a gauge only ever set (never added to) by one writer at a time.
  void set(int64_t v);
  int64_t value() const;

 private:
  struct alignas(kFalseSharingBytes) Cell {
    std::atomic<int64_t> v{0};
  };
  Cell cells_[kShards];
};

// Durations in fixed log-scale buckets: upper bounds 1 us x 2^k for
// k = 0 .. kFinite-1 (1 us .. 16.8 s), then +Inf.
class Histogram {
 public:
  static constexpr size_t kFinite = 25;
  // Upper bound of bucket i (i < kFinite), in seconds.
  static double bound(size_t i);
  // The bucket a duration of `ns` nanoseconds falls in (kFinite: +Inf):
  // the smallest k with ns <= 1000 * 2^k, i.e. with ceil(ns / 1000) <= 2^k.
  static size_t bucketOf(uint64_t ns) {
    const uint64_t us = ns / 1000 + (ns % 1000 != 0);
    if (us <= 1) return 0;
    const size_t k = static_cast<size_t>(64 - __builtin_clzll(us - 1));
    return k < kFinite ? k : kFinite;
  }

  // `n` observations of `ns` each.
  void observeNs(uint64_t ns, uint64_t n = 1) { observeNsAt(threadShard(), ns, n); }
  // With the caller's threadShard().
  void observeNsAt(size_t shard, uint64_t ns, uint64_t n = 1) {
    Shard& s = shards_[shard];
    s.buckets[bucketOf(ns)].fetch_add(n, std::memory_order_relaxed);
    s.sum_ns.fetch_add(ns * n, std::memory_order_relaxed);
  }

  struct Snapshot {
    std::array<uint64_t, kFinite + 1> counts{};  // per bucket, not cumulative
    uint64_t sum_ns = 0;
  };
  Snapshot snapshot() const;

 private:
  struct alignas(kFalseSharingBytes) Shard {
    std::atomic<uint64_t> buckets[kFinite + 1] = {};
    std::atomic<uint64_t> sum_ns{0};
  };
  Shard shards_[kShards];
};

// What a family is: declared once, as a constant (names and labels are
// Prometheus names: [a-zA-Z_:][a-zA-Z0-9_:]* and [a-zA-Z_][a-zA-Z0-9_]*).
struct FamilySpec {
  std::string_view name;  // counters end in "_total"; base units (bytes, seconds)
  std::string_view help;
  MetricType type;
  std::string_view labels;  // label names, comma-separated ("transport,peer,direction"); "" for none
};

// True when `name` is a valid metric name (label: a valid label name).
bool validMetricName(std::string_view name);
bool validLabelName(std::string_view name);

// The series of one family, by label values. Instruments live as long as
// the registry; pointers handed out stay valid.
template <class T>
class Family {
 public:
  explicit Family(const FamilySpec& spec);
  // The series with these label values (as many as the spec has labels),
  // created at the first call.
  T* with(std::initializer_list<std::string_view> values);
  const FamilySpec& spec() const { return spec_; }
  // Fills `out` (sorted by label values).
  void collect(MetricFamily& out) const;

 private:
  FamilySpec spec_;
  std::vector<std::string> labels_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_;
};

class Registry {
 public:
  // The family of `spec`, created at first use. A second spec of the same
  // name must be the same constant (type and labels): anything else is a bug
  // and aborts.
  Family<Counter>& counters(const FamilySpec& spec);
  Family<Gauge>& gauges(const FamilySpec& spec);
  Family<Histogram>& histograms(const FamilySpec& spec);

  // Every family, sorted by name.
  std::vector<MetricFamily> collect() const;

 private:
  struct Entry {
    MetricType type;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
  };
  Entry& entry(const FamilySpec& spec);

  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> families_;
};

// Adds one sample of a value kept elsewhere (a snapshot taken at collection)
// to `families` (sorted by name), in the family of `spec`, created there if
// missing. `labels`: one value per label of the spec.
void appendSample(std::vector<MetricFamily>& families, const FamilySpec& spec,
                  std::initializer_list<std::string_view> labels, double value);

}  // namespace hawser::metrics
