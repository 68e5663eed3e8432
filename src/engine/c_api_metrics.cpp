// The C API (hawser/c_api.h): the engine's metrics, as samples and as the
// Prometheus text format.
#include <cstring>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "engine/c_api_util.h"

namespace {

using namespace hawser::capi;
using hawser::MetricFamily;
using hawser::MetricSample;
using hawser::MetricType;

const char* typeName(MetricType t) {
  return t == MetricType::kCounter ? "counter" : t == MetricType::kGauge ? "gauge" : "histogram";
}

// One flattened sample before its strings are handed out.
struct Flat {
  std::string name;
  const char* type;
  std::vector<std::pair<std::string, std::string>> labels;
  double value;
};

std::vector<Flat> flatten(const std::vector<MetricFamily>& families) {
  std::vector<Flat> out;
  for (const MetricFamily& f : families) {
    const char* type = typeName(f.type);
    for (const MetricSample& s : f.samples) {
      if (f.type != MetricType::kHistogram) {
        out.push_back({f.name, type, s.labels, s.value});
        continue;
      }
      for (size_t i = 0; i <= f.bounds.size() && i < s.buckets.size(); ++i) {
        auto labels = s.labels;
        labels.emplace_back("le", i < f.bounds.size() ? fmt::format("{}", f.bounds[i]) : "+Inf");
        out.push_back({f.name + "_bucket", type, std::move(labels), static_cast<double>(s.buckets[i])});
      }
      out.push_back({f.name + "_sum", type, s.labels, s.sum});
      out.push_back({f.name + "_count", type, s.labels, static_cast<double>(s.count)});
    }
  }
  return out;
}

}  // namespace

extern "C" {

int hawser_metrics(hawser_engine_t* engine, hawser_metric_t* out, size_t* count) {
  thread_local Strings strings;
  thread_local std::vector<std::vector<hawser_kv_t>> labels;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    const std::vector<Flat> flat = flatten(engine->engine.stats().metrics);
    int rc = 0;
    if (!fitsOrReport(out, count, flat.size(), "metrics", &rc)) return rc;
    strings.clear();
    labels.assign(flat.size(), {});
    for (size_t i = 0; i < flat.size(); ++i) {
      for (const auto& [k, v] : flat[i].labels) labels[i].push_back(hawser_kv_t{strings.keep(k), strings.keep(v)});
      out[i] = hawser_metric_t{strings.keep(flat[i].name), flat[i].type, labels[i].data(), labels[i].size(),
                               flat[i].value};
    }
    *count = flat.size();
    return 0;
  });
}

int hawser_metrics_text(hawser_engine_t* engine, char* buf, size_t* len) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!len) return nullArg("len");
    const std::string text = hawser::prometheusText(engine->engine.stats().metrics);
    int rc = 0;
    if (!fitsOrReport(buf, len, text.size() + 1, "metrics_text", &rc)) return rc;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    *len = text.size() + 1;
    return 0;
  });
}

}  // extern "C"
