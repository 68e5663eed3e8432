// The metrics mechanism (base/metrics.h): sharded instruments, families,
// the registry, the Prometheus text encoder, and the engine's per-peer
// traffic counting through Task::completeSlice.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "base/traffic_metrics.h"
#include "base/transport_metrics.h"
#include "common/engine_pair.h"
#include "common/util.h"
#include "hawser/stats.h"

namespace hawser::test {
namespace {

using metrics::Counter;
using metrics::FamilySpec;
using metrics::Gauge;
using metrics::Histogram;
using metrics::Registry;

TEST(Metrics, histogram_buckets_are_powers_of_two_microseconds) {
  EXPECT_EQ(Histogram::bucketOf(0), 0u);
  EXPECT_EQ(Histogram::bucketOf(1), 0u);
  EXPECT_EQ(Histogram::bucketOf(1000), 0u);  // le 1e-06 includes 1 us exactly
  EXPECT_EQ(Histogram::bucketOf(1001), 1u);
  EXPECT_EQ(Histogram::bucketOf(2000), 1u);
  EXPECT_EQ(Histogram::bucketOf(2001), 2u);
  EXPECT_EQ(Histogram::bucketOf(1000ull << 10), 10u);
  EXPECT_EQ(Histogram::bucketOf((1000ull << 10) + 1), 11u);
  EXPECT_EQ(Histogram::bucketOf(1000ull << 24), 24u);  // the last finite bucket: 16.777216 s
  EXPECT_EQ(Histogram::bucketOf((1000ull << 24) + 1), Histogram::kFinite);
  EXPECT_EQ(Histogram::bucketOf(~0ull), Histogram::kFinite);
  EXPECT_DOUBLE_EQ(Histogram::bound(0), 1e-6);
  EXPECT_DOUBLE_EQ(Histogram::bound(24), 16.777216);
  for (size_t i = 1; i < Histogram::kFinite; ++i) EXPECT_DOUBLE_EQ(Histogram::bound(i), 2 * Histogram::bound(i - 1));
}

TEST(Metrics, sharded_instruments_sum_exactly_across_threads) {
  Counter c;
  Gauge g;
  Histogram h;
  constexpr int kThreads = 12, kAdds = 50000;  // more threads than shards: some share one
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        c.add(3);
        g.add(1);
        h.observeNs(static_cast<uint64_t>(t) * 1000);
        g.add(-1);
      }
      g.add(t);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.value(), 3ull * kThreads * kAdds);
  EXPECT_EQ(g.value(), kThreads * (kThreads - 1) / 2);
  const Histogram::Snapshot s = h.snapshot();
  uint64_t total = 0;
  for (uint64_t n : s.counts) total += n;
  EXPECT_EQ(total, uint64_t(kThreads) * kAdds);
  EXPECT_EQ(s.counts[0], 2u * kAdds);  // 0 ns and 1000 ns
  EXPECT_EQ(s.sum_ns, 1000ull * kAdds * (kThreads * (kThreads - 1) / 2));
  g.set(-5);
  EXPECT_EQ(g.value(), -5);
}

constexpr FamilySpec kZeta{"test_zeta_total", "z", MetricType::kCounter, "transport,peer"};
constexpr FamilySpec kAlpha{"test_alpha", "a", MetricType::kGauge, ""};
constexpr FamilySpec kLat{"test_latency_seconds", "l", MetricType::kHistogram, "transport"};

TEST(Metrics, registry_hands_out_one_series_per_label_values_and_collects_sorted) {
  Registry r;
  Counter* a = r.counters(kZeta).with({"tcp", "b:2"});
  Counter* b = r.counters(kZeta).with({"tcp", "a:1"});
  EXPECT_EQ(a, r.counters(kZeta).with({"tcp", "b:2"}));
  EXPECT_NE(a, b);
  a->add(7);
  b->add(1);
  r.gauges(kAlpha).with({})->add(-3);
  r.histograms(kLat).with({"tcp"})->observeNs(1500);  // le 2e-06
  const std::vector<MetricFamily> fs = r.collect();
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].name, "test_alpha");
  EXPECT_EQ(fs[1].name, "test_latency_seconds");
  EXPECT_EQ(fs[2].name, "test_zeta_total");
  EXPECT_EQ(fs[0].samples.at(0).value, -3);
  ASSERT_EQ(fs[2].samples.size(), 2u);
  EXPECT_EQ(fs[2].samples[0].labels, (std::vector<std::pair<std::string, std::string>>{{"transport", "tcp"}, {"peer", "a:1"}}));
  EXPECT_EQ(fs[2].samples[0].value, 1);
  EXPECT_EQ(fs[2].samples[1].value, 7);
  const MetricSample& h = fs[1].samples.at(0);
  ASSERT_EQ(fs[1].bounds.size(), Histogram::kFinite);
  ASSERT_EQ(h.buckets.size(), Histogram::kFinite + 1);
  EXPECT_EQ(h.buckets[0], 0u);
  EXPECT_EQ(h.buckets[1], 1u);  // cumulative from here on
  EXPECT_EQ(h.buckets.back(), 1u);
  EXPECT_EQ(h.count, 1u);
  EXPECT_DOUBLE_EQ(h.sum, 1.5e-6);
}

TEST(Metrics, every_declared_family_has_a_prometheus_name_and_suffix) {
  for (const FamilySpec* s :
       {&metrics::kTransferredBytes, &metrics::kSlices, &metrics::kSliceFailures, &metrics::kTasks,
        &metrics::kTaskFailures, &metrics::kInflightSlices, &metrics::kRetries, &metrics::kSliceSeconds,
        &metrics::kTaskSeconds, &metrics::kConnections, &metrics::kConnects, &metrics::kConnectFailures,
        &metrics::kConnectionFailures, &metrics::kServedBytes, &metrics::kServedRequests, &metrics::kRefusedRequests,
        &metrics::kRefusedFrames, &metrics::kAcceptedConnections, &metrics::kServedConnections}) {
    SCOPED_TRACE(std::string(s->name));
    EXPECT_TRUE(metrics::validMetricName(s->name));
    EXPECT_TRUE(s->name.starts_with("hawser_"));
    EXPECT_EQ(s->name.ends_with("_total"), s->type == MetricType::kCounter);
    if (s->type == MetricType::kHistogram) {
      EXPECT_TRUE(s->name.ends_with("_seconds"));
    }
  }
  EXPECT_FALSE(metrics::validMetricName("1abc"));
  EXPECT_FALSE(metrics::validMetricName("a-b"));
  EXPECT_FALSE(metrics::validLabelName("a:b"));
  EXPECT_FALSE(metrics::validLabelName("__reserved"));
  EXPECT_TRUE(metrics::validLabelName("peer"));
}

// ---- the encoder -------------------------------------------------------------

MetricFamily family(std::string name, MetricType t, std::string help = "h") {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = t;
  return f;
}

MetricSample sample(std::vector<std::pair<std::string, std::string>> labels, double v) {
  MetricSample s;
  s.labels = std::move(labels);
  s.value = v;
  return s;
}

TEST(PrometheusText, escapes_label_values_and_help_text) {
  MetricFamily f = family("x_total", MetricType::kCounter, "line one\nback\\slash \"quoted\"");
  f.samples.push_back(sample({{"peer", "a\"b\\c\nd"}}, 5));
  EXPECT_EQ(prometheusText({f}),
            "# HELP x_total line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE x_total counter\n"
            "x_total{peer=\"a\\\"b\\\\c\\nd\"} 5\n");
}

TEST(PrometheusText, families_sorted_by_name_samples_by_label_values_duplicates_merged) {
  MetricFamily b = family("b_total", MetricType::kCounter);
  b.samples.push_back(sample({{"k", "z"}}, 1));
  b.samples.push_back(sample({{"k", "a"}}, 2));
  MetricFamily a = family("a", MetricType::kGauge);
  a.samples.push_back(sample({}, -1.5));
  MetricFamily b2 = family("b_total", MetricType::kCounter);
  b2.samples.push_back(sample({{"k", "m"}}, 3));
  MetricFamily clash = family("a", MetricType::kCounter);  // same name, other type: dropped
  clash.samples.push_back(sample({}, 99));
  EXPECT_EQ(prometheusText({b, a, b2, clash}),
            "# HELP a h\n# TYPE a gauge\na -1.5\n"
            "# HELP b_total h\n# TYPE b_total counter\n"
            "b_total{k=\"a\"} 2\nb_total{k=\"m\"} 3\nb_total{k=\"z\"} 1\n");
}

TEST(PrometheusText, histogram_has_cumulative_buckets_ending_in_inf_then_sum_and_count) {
  MetricFamily f = family("lat_seconds", MetricType::kHistogram);
  f.bounds = {1e-6, 2e-6, 0.25};
  MetricSample s;
  s.labels = {{"transport", "tcp"}};
  s.buckets = {1, 3, 3, 4};
  s.count = 4;
  s.sum = 0.5;
  f.samples.push_back(s);
  EXPECT_EQ(prometheusText({f}),
            "# HELP lat_seconds h\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{transport=\"tcp\",le=\"1e-06\"} 1\n"
            "lat_seconds_bucket{transport=\"tcp\",le=\"2e-06\"} 3\n"
            "lat_seconds_bucket{transport=\"tcp\",le=\"0.25\"} 3\n"
            "lat_seconds_bucket{transport=\"tcp\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{transport=\"tcp\"} 0.5\n"
            "lat_seconds_count{transport=\"tcp\"} 4\n");
}

TEST(PrometheusText, values_integers_exact_floats_shortest_and_specials) {
  MetricFamily f = family("v", MetricType::kGauge);
  f.samples.push_back(sample({{"i", "1"}}, 1099511627776.0));  // 1 TiB: no exponent
  f.samples.push_back(sample({{"i", "2"}}, 0.1));
  f.samples.push_back(sample({{"i", "3"}}, std::numeric_limits<double>::infinity()));
  f.samples.push_back(sample({{"i", "4"}}, -std::numeric_limits<double>::infinity()));
  f.samples.push_back(sample({{"i", "5"}}, std::nan("")));
  EXPECT_EQ(prometheusText({f}),
            "# HELP v h\n# TYPE v gauge\n"
            "v{i=\"1\"} 1099511627776\nv{i=\"2\"} 0.1\nv{i=\"3\"} +Inf\nv{i=\"4\"} -Inf\nv{i=\"5\"} NaN\n");
}

TEST(Metrics, append_sample_keeps_families_and_samples_sorted) {
  std::vector<MetricFamily> fs;
  fs.push_back(family("b", MetricType::kGauge));
  metrics::appendSample(fs, kAlpha, {}, 4);
  metrics::appendSample(fs, kZeta, {"tcp", "z"}, 2);
  metrics::appendSample(fs, kZeta, {"tcp", "a"}, 1);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].name, "b");
  EXPECT_EQ(fs[1].name, "test_alpha");
  EXPECT_EQ(fs[2].name, "test_zeta_total");
  ASSERT_EQ(fs[2].samples.size(), 2u);
  EXPECT_EQ(fs[2].samples[0].labels[1].second, "a");
  EXPECT_EQ(fs[2].samples[0].labels[0].first, "transport");
}

// ---- per-peer traffic, counted by the engine ---------------------------------------

double valueOf(const EngineStats& st, const std::string& name, const std::map<std::string, std::string>& want) {
  return test::metricValue(st, name, want);
}

TEST(TrafficMetrics, bytes_slices_tasks_and_latency_per_peer_and_direction_are_exact) {
  EnginePair p(1 << 20, 1 << 20, true, 4096);
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  const std::string peer = p.target.segmentName();
  const uint64_t w = 3 * 4096 + 17, r = 5 * 4096;  // 4 and 5 slices
  fillPattern(p.local(), w, 7);
  std::vector<TransferRequest> reqs = {{OpCode::kWrite, p.local(), p.seg, p.remote(), w},
                                       {OpCode::kRead, p.local(100000), p.seg, p.remote(200000), r},
                                       {OpCode::kRead, p.local(300000), p.seg, p.remote(400000), r}};
  ASSERT_TRUE(p.init.transferSync(reqs, std::chrono::seconds(10)).ok());
  const EngineStats st = p.init.stats();
  const std::map<std::string, std::string> wr = {{"transport", "fake"}, {"peer", peer}, {"direction", "write"}};
  const std::map<std::string, std::string> rd = {{"transport", "fake"}, {"peer", peer}, {"direction", "read"}};
  EXPECT_EQ(valueOf(st, "hawser_transferred_bytes_total", wr), double(w));
  EXPECT_EQ(valueOf(st, "hawser_transferred_bytes_total", rd), double(2 * r));
  EXPECT_EQ(valueOf(st, "hawser_slices_total", wr), 4);
  EXPECT_EQ(valueOf(st, "hawser_slices_total", rd), 10);
  EXPECT_EQ(valueOf(st, "hawser_tasks_total", wr), 1);
  EXPECT_EQ(valueOf(st, "hawser_tasks_total", rd), 2);
  EXPECT_EQ(valueOf(st, "hawser_inflight_slices", {{"transport", "fake"}, {"peer", peer}}), 0);
  EXPECT_EQ(valueOf(st, "hawser_task_duration_seconds", {{"transport", "fake"}, {"direction", "read"}}), 2);
  EXPECT_EQ(valueOf(st, "hawser_slice_duration_seconds", {{"transport", "fake"}, {"direction", "write"}}), 4);
  EXPECT_EQ(valueOf(st, "hawser_slice_failures_total", wr), -1);  // no failure series exists yet
  EXPECT_EQ(valueOf(st, "hawser_tasks_submitted_total", {}), 3);
}

TEST(TrafficMetrics, in_flight_slices_count_while_held_and_failures_count_by_code) {
  EnginePair p(1 << 20, 1 << 20, true, 4096);
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  const std::string peer = p.target.segmentName();
  p.fake_init->hold(true);
  BatchID b = kInvalidBatch;
  ASSERT_TRUE(p.init.allocateBatchID(4, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kWrite, p.local(), p.seg, p.remote(), 6 * 4096}}).ok());
  EXPECT_EQ(valueOf(p.init.stats(), "hawser_inflight_slices", {{"transport", "fake"}, {"peer", peer}}), 6);
  // Every second slice fails (kIoError), the rest complete.
  p.fake_init->setVerdict([](const FakeTransport::Slice& s) {
    return s.index % 2 ? TransferState::kFailed : TransferState::kCompleted;
  });
  p.fake_init->hold(false);
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(10)).ok());
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
  const EngineStats st = p.init.stats();
  const std::map<std::string, std::string> wr = {{"transport", "fake"}, {"peer", peer}, {"direction", "write"}};
  EXPECT_EQ(valueOf(st, "hawser_inflight_slices", {{"transport", "fake"}, {"peer", peer}}), 0);
  EXPECT_EQ(valueOf(st, "hawser_transferred_bytes_total", wr), 3 * 4096);
  auto with = [&](std::string code) {
    auto m = wr;
    m["code"] = code;
    return m;
  };
  EXPECT_EQ(valueOf(st, "hawser_slice_failures_total", with("io_error")), 3);
  EXPECT_EQ(valueOf(st, "hawser_task_failures_total", with("io_error")), 1);
  EXPECT_EQ(valueOf(st, "hawser_tasks_total", wr), 1);
}

TEST(TrafficMetrics, peers_past_the_limit_share_the_other_series) {
  metrics::TrafficTable table(std::make_shared<Registry>(), 2);
  auto a = table.get("tcp", "a");
  auto b = table.get("tcp", "b");
  auto c = table.get("tcp", "c");
  auto d = table.get("tcp", "d");
  EXPECT_EQ(a, table.get("tcp", "a"));
  EXPECT_EQ(a->peer(), "a");
  EXPECT_EQ(b->peer(), "b");
  EXPECT_EQ(c->peer(), metrics::kOtherPeers);
  EXPECT_EQ(c, d);
}

}  // namespace
}  // namespace hawser::test
