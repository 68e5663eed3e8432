// Batch latencies of `hawser bench`, counted in place: log-linear buckets
// (128 a power of two of nanoseconds, each within 0.8 % of its values) in a
// table allocated once. A thread records a batch with one increment on a
// line it already has, where a growing list of every sample would fault in
// new pages and copy itself on the thread being timed.
#pragma once

#include <cstdint>
#include <vector>

namespace hawser::tools {

class LatencyHistogram {
 public:
  LatencyHistogram() : counts_(kBuckets, 0) {}

  void record(uint64_t ns) {
    counts_[bucketOf(ns)]++;
    n_++;
  }
  void merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    n_ += o.n_;
  }
  uint64_t count() const { return n_; }
  // The p-quantile (0..1) in microseconds: the middle of the bucket that
  // holds the sample of rank p * (count - 1), rounded; 0 with no samples.
  double quantileUs(double p) const {
    if (n_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(p * static_cast<double>(n_ - 1) + 0.5);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen > rank) return static_cast<double>(middleOf(i)) / 1000.0;
    }
    return static_cast<double>(middleOf(kBuckets - 1)) / 1000.0;
  }

  // Bucket i holds [lowerOf(i), lowerOf(i + 1)): exact below 128 ns, then 128
  // buckets of equal width per power of two, up to 2^43 ns (2.4 hours); the
  // last bucket, the top one of 2^42's, also counts everything longer.
  static constexpr unsigned kSub = 7;  // log2 of the buckets per power of two
  static constexpr unsigned kTop = 42;
  static constexpr size_t kBuckets = (kTop - kSub + 1) * (1u << kSub) + (1u << kSub);
  static size_t bucketOf(uint64_t ns) {
    if (ns < (1u << kSub)) return static_cast<size_t>(ns);
    const unsigned msb = 63u - static_cast<unsigned>(__builtin_clzll(ns));
    if (msb > kTop) return kBuckets - 1;
    return (msb - kSub + 1) * (1u << kSub) + static_cast<size_t>((ns >> (msb - kSub)) & ((1u << kSub) - 1));
  }
  static uint64_t lowerOf(size_t i) {
    if (i < (1u << kSub)) return i;
    const unsigned msb = static_cast<unsigned>(i >> kSub) + kSub - 1;
    return (static_cast<uint64_t>((1u << kSub) + (i & ((1u << kSub) - 1)))) << (msb - kSub);
  }
  static uint64_t middleOf(size_t i) {
    if (i < (1u << kSub)) return i;
    const unsigned msb = static_cast<unsigned>(i >> kSub) + kSub - 1;
    return lowerOf(i) + ((uint64_t{1} << (msb - kSub)) >> 1);
  }

 private:
  std::vector<uint64_t> counts_;
  uint64_t n_ = 0;
};

}  // namespace hawser::tools
