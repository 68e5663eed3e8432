// The C API (hawser/c_api.h): introspection (transports, stats, diagnosis,
// routes) and the names of codes and states.
#include <string>
#include <vector>

#include "engine/c_api_util.h"
#include "hawser/config.h"

namespace {

using namespace hawser::capi;
using hawser::Code;

}  // namespace

extern "C" {

int hawser_transports(hawser_engine_t* engine, const char** out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    std::vector<std::string> names = engine->engine.transports();
    int rc = 0;
    if (!fitsOrReport(out, count, names.size(), "transports", &rc)) return rc;
    strings.clear();
    for (size_t i = 0; i < names.size(); ++i) out[i] = strings.keep(std::move(names[i]));
    *count = names.size();
    return 0;
  });
}

int hawser_stats(hawser_engine_t* engine, hawser_counter_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    const hawser::EngineStats st = engine->engine.stats();
    size_t needed = st.engine.size();
    for (auto& t : st.transports) needed += t.counters.size();
    int rc = 0;
    if (!fitsOrReport(out, count, needed, "stats", &rc)) return rc;
    strings.clear();
    size_t n = 0;
    for (auto& [name, value] : st.engine) out[n++] = hawser_counter_t{"", strings.keep(name), value};
    for (auto& t : st.transports) {
      const char* transport = strings.keep(t.transport);
      for (auto& [name, value] : t.counters) out[n++] = hawser_counter_t{transport, strings.keep(name), value};
    }
    *count = n;
    return 0;
  });
}

int hawser_diagnose(hawser_engine_t* engine, hawser_diagnosis_t* out, size_t* count) {
  thread_local Strings strings;
  thread_local std::vector<std::vector<hawser_kv_t>> facts;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    const std::vector<hawser::TransportDiagnosis> ds = engine->engine.diagnose();
    int rc = 0;
    if (!fitsOrReport(out, count, ds.size(), "diagnose", &rc)) return rc;
    strings.clear();
    facts.assign(ds.size(), {});
    for (size_t i = 0; i < ds.size(); ++i) {
      const hawser::TransportDiagnosis& d = ds[i];
      for (auto& [k, v] : d.facts) facts[i].push_back(hawser_kv_t{strings.keep(k), strings.keep(v)});
      out[i] = hawser_diagnosis_t{strings.keep(d.transport), d.installed ? 1 : 0, strings.keep(d.reason),
                                  d.cost_rank, strings.keep(d.moves), facts[i].data(), facts[i].size()};
    }
    *count = ds.size();
    return 0;
  });
}

int hawser_devices(hawser_engine_t* engine, hawser_device_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    const std::vector<hawser::TransportDiagnosis> ds = engine->engine.diagnose();
    size_t n = 0;
    for (const auto& d : ds) n += d.devices.size();
    int rc = 0;
    if (!fitsOrReport(out, count, n, "devices", &rc)) return rc;
    strings.clear();
    size_t i = 0;
    for (const auto& d : ds)
      for (const hawser::DeviceRecord& r : d.devices)
        out[i++] = hawser_device_t{strings.keep(d.transport), hawser::deviceKindName(r.kind), strings.keep(r.name),
                                   r.index, r.numa_node, strings.keep(r.pci_bus_id), r.port, strings.keep(r.mode),
                                   r.used ? 1 : 0, strings.keep(r.reason)};
    *count = n;
    return 0;
  });
}

int hawser_explain_route(hawser_engine_t* engine, hawser_segment_id_t segment, const char* local_location,
                         hawser_route_t* out) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    hawser::RouteExplanation r;
    int rc = ret(engine->engine.explainRoute(segment, local_location ? local_location : "cpu:0", r));
    if (rc != 0) return rc;
    strings.clear();
    out->transport = strings.keep(std::move(r.transport));
    out->why = strings.keep(std::move(r.why));
    return 0;
  });
}

const char* hawser_code_name(int code) {
  if (code > 0 || code < HAWSER_E_INTERNAL) return "unknown";
  return hawser::codeName(static_cast<Code>(-code)).data();  // string literals: NUL-terminated, static
}

const char* hawser_state_name(int state) {
  if (state < HAWSER_WAITING || state > HAWSER_INVALID) return "UNKNOWN";
  return hawser::stateName(static_cast<hawser::TransferState>(state)).data();  // string literals, static
}

int hawser_parse_size(const char* text, uint64_t* out) {
  return guarded([&] {
    if (!text) return nullArg("text");
    if (!out) return nullArg("out");
    auto v = hawser::parseSize(text);
    if (!v) return fail(Code::kInvalidArgument, std::string("'") + text + "' is not a size (e.g. 4096, 64K, 1MiB, 2G)");
    *out = *v;
    return 0;
  });
}

}  // extern "C"
