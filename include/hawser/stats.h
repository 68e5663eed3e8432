// hawser — what an engine reports about itself: counters per transport,
// and a diagnosis per transport (why it is or is not installed, what it
// moves, what it found on this host).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hawser {

// Named monotonic counters (or gauges, where the name says "open"/"inflight").
using Counters = std::vector<std::pair<std::string, uint64_t>>;

struct TransportStats {
  std::string transport;  // "tcp", "file", ...
  Counters counters;
};

// Metrics in the shape of the Prometheus data model (docs/metrics.md lists
// every family). Names follow Prometheus conventions: a "hawser_" prefix,
// base units (bytes, seconds), counters ending in "_total".
enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

// One labelled series of a family.
struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;  // in the family's label order
  double value = 0;  // counter, gauge
  // Histogram: cumulative counts, one per bound of the family and a last one
  // for +Inf (== count); the sum of the observed values.
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  double sum = 0;
};

struct MetricFamily {
  std::string name;  // "hawser_bytes_total", "hawser_task_duration_seconds"
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<double> bounds;  // histogram: upper bounds of the finite buckets, ascending
  std::vector<MetricSample> samples;  // sorted by label values
};

struct EngineStats {
  Counters engine;                         // batches, tasks, bytes by outcome
  std::vector<TransportStats> transports;  // one per installed transport
  std::vector<MetricFamily> metrics;       // sorted by name (docs/metrics.md)
};

// The Prometheus text exposition format (version 0.0.4) of `families`:
// "# HELP" and "# TYPE" lines, then one line per sample (histograms as
// _bucket{le=...}, _sum, _count), label values escaped. Serve it with
// Content-Type kPrometheusContentType.
std::string prometheusText(const std::vector<MetricFamily>& families);
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

struct TransportDiagnosis {
  std::string transport;
  bool installed = false;
  std::string reason;  // why not installed ("" when installed)
  int cost_rank = 0;   // lower is preferred when several can serve a request
  std::string moves;   // what it can move, e.g. "memory segments; local host memory; remote host memory"
  std::vector<std::pair<std::string, std::string>> facts;  // what it found (NICs, io_uring, ...)
};

// Which transport the engine picks for one kind of request, and why.
struct RouteExplanation {
  std::string transport;  // "" when none can serve it
  std::string why;        // the rule that decided, and each candidate refused with its reason
  // A fallback (docs/routes.md): the cheaper transport that declined the
  // peer, the reason's name ("other_pid_namespace", ...: the `reason` label
  // of hawser_route_fallbacks_total) and its words. Empty when none.
  std::string fallback_from;
  std::string fallback_reason;
  std::string fallback_detail;
};

}  // namespace hawser
