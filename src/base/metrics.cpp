#include "base/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>

#include "base/log.h"

namespace hawser::metrics {

namespace detail {
size_t nextShard() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kShards;
}
}  // namespace detail

uint64_t Counter::value() const {
  uint64_t v = 0;
  for (const Cell& c : cells_) v += c.v.load(std::memory_order_relaxed);
  return v;
}

void Gauge::set(int64_t v) {
  for (size_t i = 1; i < kShards; ++i) cells_[i].v.store(0, std::memory_order_relaxed);
  cells_[0].v.store(v, std::memory_order_relaxed);
}

int64_t Gauge::value() const {
  int64_t v = 0;
  for (const Cell& c : cells_) v += c.v.load(std::memory_order_relaxed);
  return v;
}

double Histogram::bound(size_t i) { return std::ldexp(1e-6, static_cast<int>(i)); }

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot out;
  for (const Shard& s : shards_) {
    for (size_t i = 0; i <= kFinite; ++i) out.counts[i] += s.buckets[i].load(std::memory_order_relaxed);
    out.sum_ns += s.sum_ns.load(std::memory_order_relaxed);
  }
  return out;
}

bool validMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool validLabelName(std::string_view name) {
  return validMetricName(name) && name.find(':') == std::string_view::npos && !name.starts_with("__");
}

namespace {

[[noreturn]] void misuse(const std::string& what) {
  HLOG_ERROR("metrics: {} (a bug in hawser)", what);
  std::abort();
}

std::vector<std::string> splitLabels(std::string_view labels) {
  std::vector<std::string> out;
  while (!labels.empty()) {
    const size_t comma = labels.find(',');
    out.emplace_back(labels.substr(0, comma));
    if (comma == std::string_view::npos) break;
    labels.remove_prefix(comma + 1);
  }
  return out;
}

void fill(const Counter& c, MetricSample& s) { s.value = static_cast<double>(c.value()); }
void fill(const Gauge& g, MetricSample& s) { s.value = static_cast<double>(g.value()); }
void fill(const Histogram& h, MetricSample& s) {
  const Histogram::Snapshot snap = h.snapshot();
  s.buckets.resize(Histogram::kFinite + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= Histogram::kFinite; ++i) s.buckets[i] = total += snap.counts[i];
  s.count = total;
  s.sum = static_cast<double>(snap.sum_ns) / 1e9;
}

}  // namespace

template <class T>
Family<T>::Family(const FamilySpec& spec) : spec_(spec), labels_(splitLabels(spec.labels)) {
  if (!validMetricName(spec.name)) misuse("'" + std::string(spec.name) + "' is not a metric name");
  for (const std::string& l : labels_)
    if (!validLabelName(l)) misuse("family " + std::string(spec.name) + ": '" + l + "' is not a label name");
}

template <class T>
T* Family<T>::with(std::initializer_list<std::string_view> values) {
  if (values.size() != labels_.size())
    misuse("family " + std::string(spec_.name) + " takes " + std::to_string(labels_.size()) + " label values, not " +
           std::to_string(values.size()));
  std::vector<std::string> key(values.begin(), values.end());
  std::lock_guard lk(mu_);
  std::unique_ptr<T>& slot = series_[std::move(key)];
  if (!slot) slot = std::make_unique<T>();
  return slot.get();
}

template <class T>
void Family<T>::collect(MetricFamily& out) const {
  out.name = std::string(spec_.name);
  out.help = std::string(spec_.help);
  out.type = spec_.type;
  if (spec_.type == MetricType::kHistogram)
    for (size_t i = 0; i < Histogram::kFinite; ++i) out.bounds.push_back(Histogram::bound(i));
  std::lock_guard lk(mu_);
  out.samples.reserve(series_.size());
  for (const auto& [values, inst] : series_) {
    MetricSample s;
    for (size_t i = 0; i < labels_.size(); ++i) s.labels.emplace_back(labels_[i], values[i]);
    fill(*inst, s);
    out.samples.push_back(std::move(s));
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Registry::Entry& Registry::entry(const FamilySpec& spec) {
  auto it = families_.find(spec.name);
  if (it != families_.end()) {
    const FamilySpec* have = it->second.counters     ? &it->second.counters->spec()
                             : it->second.gauges     ? &it->second.gauges->spec()
                                                     : &it->second.histograms->spec();
    if (have->type != spec.type || have->labels != spec.labels)
      misuse("family " + std::string(spec.name) + " declared twice with different types or labels");
    return it->second;
  }
  Entry& e = families_[std::string(spec.name)];
  e.type = spec.type;
  switch (spec.type) {
    case MetricType::kCounter: e.counters = std::make_unique<Family<Counter>>(spec); break;
    case MetricType::kGauge: e.gauges = std::make_unique<Family<Gauge>>(spec); break;
    case MetricType::kHistogram: e.histograms = std::make_unique<Family<Histogram>>(spec); break;
  }
  return e;
}

Family<Counter>& Registry::counters(const FamilySpec& spec) {
  if (spec.type != MetricType::kCounter) misuse("family " + std::string(spec.name) + " is not a counter");
  std::lock_guard lk(mu_);
  return *entry(spec).counters;
}

Family<Gauge>& Registry::gauges(const FamilySpec& spec) {
  if (spec.type != MetricType::kGauge) misuse("family " + std::string(spec.name) + " is not a gauge");
  std::lock_guard lk(mu_);
  return *entry(spec).gauges;
}

Family<Histogram>& Registry::histograms(const FamilySpec& spec) {
  if (spec.type != MetricType::kHistogram) misuse("family " + std::string(spec.name) + " is not a histogram");
  std::lock_guard lk(mu_);
  return *entry(spec).histograms;
}

std::vector<MetricFamily> Registry::collect() const {
  std::lock_guard lk(mu_);
  std::vector<MetricFamily> out;
  out.reserve(families_.size());
  for (const auto& [name, e] : families_) {
    MetricFamily f;
    if (e.counters) e.counters->collect(f);
    if (e.gauges) e.gauges->collect(f);
    if (e.histograms) e.histograms->collect(f);
    out.push_back(std::move(f));
  }
  return out;
}

void appendSample(std::vector<MetricFamily>& families, const FamilySpec& spec,
                  std::initializer_list<std::string_view> labels, double value) {
  const std::vector<std::string> names = splitLabels(spec.labels);
  if (labels.size() != names.size())
    misuse("family " + std::string(spec.name) + " takes " + std::to_string(names.size()) + " label values");
  auto it = std::lower_bound(families.begin(), families.end(), spec.name,
                             [](const MetricFamily& f, std::string_view n) { return f.name < n; });
  if (it == families.end() || it->name != spec.name) {
    MetricFamily f;
    f.name = std::string(spec.name);
    f.help = std::string(spec.help);
    f.type = spec.type;
    it = families.insert(it, std::move(f));
  }
  MetricSample s;
  size_t i = 0;
  for (std::string_view v : labels) s.labels.emplace_back(names[i++], std::string(v));
  s.value = value;
  auto at = std::upper_bound(it->samples.begin(), it->samples.end(), s,
                             [](const MetricSample& a, const MetricSample& b) { return a.labels < b.labels; });
  it->samples.insert(at, std::move(s));
}

}  // namespace hawser::metrics
