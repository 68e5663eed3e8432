// hawser::prometheusText (hawser/stats.h): the Prometheus text exposition
// format, version 0.0.4.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "hawser/stats.h"

namespace hawser {

namespace {

// HELP text: backslash and line feed escaped.
void appendHelp(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

// A label value: backslash, double quote and line feed escaped.
void appendLabelValue(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

// Integers exactly, other values as the shortest text that reads back the same.
std::string formatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 9.0e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// name{a="x",b="y"[,le="..."]} value
void appendSample(std::string& out, std::string_view name, std::string_view suffix, const Labels& labels,
                  const char* le, std::string_view value) {
  out += name;
  out += suffix;
  if (!labels.empty() || le) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out += ',';
      first = false;
      out += k;
      out += "=\"";
      appendLabelValue(out, v);
      out += '"';
    }
    if (le) {
      if (!first) out += ',';
      out += "le=\"";
      out += le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

const char* typeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

bool byLabels(const MetricSample& a, const MetricSample& b) { return a.labels < b.labels; }

}  // namespace

std::string prometheusText(const std::vector<MetricFamily>& families) {
  // Sorted by name; families of one name and type merged (two engines of a
  // process), a later one of another type dropped (a name has one TYPE line).
  std::vector<const MetricFamily*> order;
  for (const MetricFamily& f : families) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string out;
  for (size_t i = 0; i < order.size();) {
    const MetricFamily& f = *order[i];
    std::vector<MetricSample> samples = f.samples;
    size_t j = i + 1;
    for (; j < order.size() && order[j]->name == f.name; ++j)
      if (order[j]->type == f.type && order[j]->bounds == f.bounds)
        samples.insert(samples.end(), order[j]->samples.begin(), order[j]->samples.end());
    i = j;
    std::stable_sort(samples.begin(), samples.end(), byLabels);
    out += "# HELP ";
    out += f.name;
    out += ' ';
    appendHelp(out, f.help);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += typeName(f.type);
    out += '\n';
    for (const MetricSample& s : samples) {
      if (f.type != MetricType::kHistogram) {
        appendSample(out, f.name, "", s.labels, nullptr, formatValue(s.value));
        continue;
      }
      // Cumulative buckets ending in +Inf, then _sum and _count.
      for (size_t b = 0; b < f.bounds.size() && b < s.buckets.size(); ++b)
        appendSample(out, f.name, "_bucket", s.labels, formatValue(f.bounds[b]).c_str(),
                     fmt::format("{}", s.buckets[b]));
      appendSample(out, f.name, "_bucket", s.labels, "+Inf", fmt::format("{}", s.count));
      appendSample(out, f.name, "_sum", s.labels, nullptr, formatValue(s.sum));
      appendSample(out, f.name, "_count", s.labels, nullptr, fmt::format("{}", s.count));
    }
  }
  return out;
}

}  // namespace hawser
