// The engine's own counters as metrics: what stats() keeps in
// EngineStats::engine, and the rpc listener's refused frames.
#include <string_view>

#include "base/metrics.h"
#include "base/transport_metrics.h"
#include "engine/engine_impl.h"

namespace hawser {

namespace {

using metrics::FamilySpec;
using hawser::MetricType;

struct EngineFamily {
  std::string_view counter;  // its name in EngineStats::engine
  FamilySpec spec;
};

constexpr EngineFamily kEngineFamilies[] = {
    {"batches_allocated",
     {"hawser_batches_allocated_total", "Batches allocated", MetricType::kCounter, ""}},
    {"batches_open", {"hawser_batches_open", "Batches allocated and not yet freed", MetricType::kGauge, ""}},
    {"tasks_submitted", {"hawser_tasks_submitted_total", "Tasks accepted by submit", MetricType::kCounter, ""}},
    {"submits_refused",
     {"hawser_submits_refused_total", "Submit calls refused before any I/O (bad request, capacity)",
      MetricType::kCounter, ""}},
    {"sync_timeouts",
     {"hawser_sync_timeouts_total", "Synchronous transfers that ran past their timeout", MetricType::kCounter, ""}},
    {"orphan_batches",
     {"hawser_orphan_batches", "Batches given up on by a synchronous transfer, kept until their I/O ends",
      MetricType::kGauge, ""}},
    {"orphan_batches_reaped",
     {"hawser_orphan_batches_reaped_total", "Orphan batches freed once their I/O ended", MetricType::kCounter, ""}},
};

}  // namespace

void appendEngineMetrics(EngineStats& s, uint64_t rpc_refused_frames) {
  for (const auto& [name, value] : s.engine)
    for (const EngineFamily& f : kEngineFamilies)
      if (f.counter == name) metrics::appendSample(s.metrics, f.spec, {}, static_cast<double>(value));
  // The control-plane listener refuses frames for every transport that
  // uses it (bad hello, wrong auth token): counted as transport "rpc".
  metrics::appendSample(s.metrics, metrics::kRefusedFrames, {"rpc"}, static_cast<double>(rpc_refused_frames));
}

}  // namespace hawser
