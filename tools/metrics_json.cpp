#include "tools/metrics_json.h"

#include <fmt/format.h>

namespace hawser::tools {

nlohmann::json metricsJson(const std::vector<MetricFamily>& families) {
  nlohmann::json out = nlohmann::json::object();
  for (const MetricFamily& f : families) {
    nlohmann::json fam;
    fam["type"] = f.type == MetricType::kCounter ? "counter" : f.type == MetricType::kGauge ? "gauge" : "histogram";
    fam["help"] = f.help;
    nlohmann::json samples = nlohmann::json::array();
    for (const MetricSample& s : f.samples) {
      nlohmann::json j;
      nlohmann::json labels = nlohmann::json::object();
      for (const auto& [k, v] : s.labels) labels[k] = v;
      j["labels"] = labels;
      if (f.type == MetricType::kHistogram) {
        j["count"] = s.count;
        j["sum"] = s.sum;
        nlohmann::json buckets = nlohmann::json::object();
        for (size_t i = 0; i < f.bounds.size() && i < s.buckets.size(); ++i)
          buckets[fmt::format("{}", f.bounds[i])] = s.buckets[i];
        buckets["+Inf"] = s.count;
        j["buckets"] = buckets;
      } else {
        j["value"] = s.value;
      }
      samples.push_back(std::move(j));
    }
    fam["samples"] = std::move(samples);
    out[f.name] = std::move(fam);
  }
  return out;
}

}  // namespace hawser::tools
