#include "py_metrics.h"

#include <limits>

namespace py = pybind11;

namespace hawser::pymod {

namespace {

const char* typeName(MetricType t) {
  return t == MetricType::kCounter ? "counter" : t == MetricType::kGauge ? "gauge" : "histogram";
}

py::dict labelsOf(const MetricSample& s) {
  py::dict d;
  for (const auto& [k, v] : s.labels) d[py::str(k)] = v;
  return d;
}

// {name: {"type", "help", "samples": [{"labels", "value"} | {"labels", "count", "sum", "buckets"}]}},
// buckets a list of (upper bound, cumulative count) ending with (inf, count).
py::dict metricsDict(const std::vector<MetricFamily>& families) {
  py::dict out;
  for (const MetricFamily& f : families) {
    py::list samples;
    for (const MetricSample& s : f.samples) {
      py::dict d;
      d["labels"] = labelsOf(s);
      if (f.type == MetricType::kHistogram) {
        d["count"] = s.count;
        d["sum"] = s.sum;
        py::list buckets;
        for (size_t i = 0; i < f.bounds.size() && i < s.buckets.size(); ++i)
          buckets.append(py::make_tuple(f.bounds[i], s.buckets[i]));
        buckets.append(py::make_tuple(std::numeric_limits<double>::infinity(), s.count));
        d["buckets"] = buckets;
      } else {
        d["value"] = s.value;
      }
      samples.append(d);
    }
    py::dict fam;
    fam["type"] = typeName(f.type);
    fam["help"] = f.help;
    fam["samples"] = samples;
    out[py::str(f.name)] = fam;
  }
  return out;
}

}  // namespace

void bindMetrics(py::class_<PyEngine>& cls) {
  cls.def(
         "get_stats",
         [](PyEngine& e) -> py::object {
           EngineStats st;
           if (!e.stats(st, "get_stats")) return py::none();
           py::dict engine, transports;
           for (const auto& [k, v] : st.engine) engine[py::str(k)] = v;
           for (const TransportStats& t : st.transports) {
             py::dict c;
             for (const auto& [k, v] : t.counters) c[py::str(k)] = v;
             transports[py::str(t.transport)] = c;
           }
           py::dict out;
           out["engine"] = engine;
           out["transports"] = transports;
           return out;
         },
         "{'engine': {counter: value}, 'transports': {name: {counter: value}}}, or None (last_error() says why).")
      .def(
          "get_metrics",
          [](PyEngine& e) -> py::object {
            EngineStats st;
            if (!e.stats(st, "get_metrics")) return py::none();
            return metricsDict(st.metrics);
          },
          "The engine's metrics (docs/metrics.md): {family: {'type', 'help', 'samples': [{'labels': {...}, "
          "'value'} or, for histograms, {'labels', 'count', 'sum', 'buckets': [(upper_bound, cumulative)...]}]}}, "
          "or None (last_error() says why).")
      .def(
          "metrics_text",
          [](PyEngine& e) -> py::object {
            EngineStats st;
            if (!e.stats(st, "metrics_text")) return py::none();
            return py::str(prometheusText(st.metrics));
          },
          "The metrics in the Prometheus text format 0.0.4, or None (last_error() says why).");
}

}  // namespace hawser::pymod
