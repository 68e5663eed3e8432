// Metrics as JSON for `hawser bench --json`: one object per family,
// {"type", "help", "samples": [{"labels": {...}, "value"} or, for
// histograms, {"labels", "count", "sum", "buckets": {"<le>": cumulative}}]}.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "hawser/stats.h"

namespace hawser::tools {

nlohmann::json metricsJson(const std::vector<MetricFamily>& families);

}  // namespace hawser::tools
