#include "base/transport.h"

#include <charconv>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hawser {

MemoryKind memoryKindOf(const std::string& location) {
  return location.rfind("cuda", 0) == 0 ? kGpuMemory : kHostMemory;
}

int gpuOrdinalOf(const std::string& location) {
  std::string_view v(location);
  if (!v.starts_with("cuda:")) return -1;
  v.remove_prefix(5);
  int n = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && p == v.data() + v.size() && n >= 0 ? n : -1;
}

Status SubBatch::prepareRuns(const RunWindow&, std::unique_ptr<PreparedWork>&) {
  return {Code::kNotSupported, "this transport moves block requests as a task per run"};
}

void Transport::describe(nlohmann::json& attrs) const { attrs = nlohmann::json::object(); }

Status Transport::registerMemory(void*, size_t, const std::string&, bool, nlohmann::json&) {
  return Status::OK();
}

Status Transport::unregisterMemory(void*, size_t) { return Status::OK(); }

Status Transport::resolveSegment(const std::string& name, SegmentDesc&) {
  return {Code::kNotSupported, "transport " + std::string(this->name()) + " resolves no segment names ('" + name + "')"};
}

void Transport::diagnose(TransportDiagnosis&) const {}

Counters Transport::stats() const { return {}; }

}  // namespace hawser
