// `hawser bench`'s batch latencies (tools/latency_histogram.h): every value
// lands in the bucket whose range holds it, buckets are within 0.8 % of
// their values, and quantiles of known samples come out within that.
#include <gtest/gtest.h>

#include <cstdint>

#include "tools/latency_histogram.h"

using hawser::tools::LatencyHistogram;

TEST(LatencyHistogram, every_value_lands_in_the_bucket_whose_range_holds_it_and_buckets_are_within_0_8_percent) {
  for (uint64_t v = 0; v < (uint64_t{1} << 42); v = v < 4096 ? v + 1 : v + v / 37 + 1) {
    const size_t b = LatencyHistogram::bucketOf(v);
    ASSERT_LT(b, LatencyHistogram::kBuckets - 1) << v;
    const uint64_t lo = LatencyHistogram::lowerOf(b), hi = LatencyHistogram::lowerOf(b + 1);
    ASSERT_LE(lo, v) << "bucket " << b;
    ASSERT_LT(v, hi) << "bucket " << b;
    ASSERT_LE(static_cast<double>(hi - lo), 1.0 + static_cast<double>(lo) / 128.0) << v;
    const uint64_t mid = LatencyHistogram::middleOf(b);
    ASSERT_TRUE(lo <= mid && mid < hi) << v;
  }
  EXPECT_EQ(LatencyHistogram::bucketOf(0), 0u);
  EXPECT_EQ(LatencyHistogram::bucketOf(127), 127u);
  EXPECT_EQ(LatencyHistogram::bucketOf(uint64_t{1} << 50), LatencyHistogram::kBuckets - 1) << "longer: the last";
  EXPECT_EQ(LatencyHistogram::bucketOf(UINT64_MAX), LatencyHistogram::kBuckets - 1);
  // The last bucket is the top one of the 2^42 octave, and takes everything longer.
  const uint64_t last_lower = LatencyHistogram::lowerOf(LatencyHistogram::kBuckets - 1);
  EXPECT_EQ(last_lower, (uint64_t{1} << 43) - (uint64_t{1} << 35));
  EXPECT_EQ(LatencyHistogram::bucketOf(last_lower), LatencyHistogram::kBuckets - 1);
  EXPECT_EQ(LatencyHistogram::bucketOf(last_lower - 1), LatencyHistogram::kBuckets - 2);
  EXPECT_EQ(LatencyHistogram::bucketOf(uint64_t{1} << 43), LatencyHistogram::kBuckets - 1);
}

TEST(LatencyHistogram, quantiles_of_known_samples_come_out_within_a_bucket) {
  LatencyHistogram h;
  EXPECT_EQ(h.quantileUs(0.5), 0.0) << "no samples";
  for (uint64_t ns = 1000; ns <= 100000; ++ns) h.record(ns);  // 1 .. 100 us, evenly
  EXPECT_EQ(h.count(), 99001u);
  EXPECT_NEAR(h.quantileUs(0.50), 50.5, 50.5 * 0.008);
  EXPECT_NEAR(h.quantileUs(0.99), 99.0, 99.0 * 0.008);
  EXPECT_NEAR(h.quantileUs(0.0), 1.0, 0.008);
  EXPECT_NEAR(h.quantileUs(1.0), 100.0, 100.0 * 0.008);
}

TEST(LatencyHistogram, merged_threads_count_as_one) {
  LatencyHistogram a, b;
  for (int i = 0; i < 99; ++i) a.record(2000);  // 2 us
  b.record(3'000'000);                          // one batch of 3 ms
  a.merge(b);
  EXPECT_EQ(a.count(), 100u);
  EXPECT_NEAR(a.quantileUs(0.5), 2.0, 2.0 * 0.008);
  EXPECT_NEAR(a.quantileUs(1.0), 3000.0, 3000.0 * 0.008);
}
