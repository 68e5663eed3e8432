#include "base/transport.h"

#include <nlohmann/json.hpp>

namespace hawser {

MemoryKind memoryKindOf(const std::string& location) {
  return location.rfind("cuda", 0) == 0 ? kGpuMemory : kHostMemory;
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
