#include "base/transport.h"

#include <charconv>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hawser {

MemoryKind memoryKindOf(const std::string& location) {
  return location.rfind("cuda", 0) == 0 ? kGpuMemory : kHostMemory;
}

namespace {

// N of "<prefix>N"; -1 for any other text.
int indexAfter(std::string_view v, std::string_view prefix) {
  if (!v.starts_with(prefix)) return -1;
  v.remove_prefix(prefix.size());
  int n = -1;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && p == v.data() + v.size() && n >= 0 ? n : -1;
}

}  // namespace

int gpuOrdinalOf(const std::string& location) { return indexAfter(location, "cuda:"); }

int hostNodeOf(const std::string& location) { return indexAfter(location, "cpu:"); }

Status SubBatch::prepareRuns(const RunWindow&, std::unique_ptr<PreparedWork>&) {
  return {Code::kNotSupported, "this transport moves block requests as a task per run"};
}

void Transport::describe(nlohmann::json& attrs) const { attrs = nlohmann::json::object(); }

Status Transport::registerRegion(const Region& r, nlohmann::json& attrs, std::shared_ptr<const Registration>& out) {
  out.reset();
  return registerMemory(reinterpret_cast<void*>(r.addr), r.length, r.location, r.remote_accessible, attrs);
}

Status Transport::registerMemory(void*, size_t, const std::string&, bool, nlohmann::json&) {
  return Status::OK();
}

Status Transport::unregisterMemory(void*, size_t) { return Status::OK(); }

Status Transport::resolveSegment(const std::string& name, SegmentDesc&) {
  return {Code::kNotSupported, "transport " + std::string(this->name()) + " resolves no segment names ('" + name + "')"};
}

Status Transport::openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) {
  Status s = openPeer(seg, out);
  why = s.ok() ? RouteDecline{} : RouteDecline{RouteReason::kRefused, s.message()};
  return s;
}

RouteDecline Transport::declinesBuffer(const PeerHandle&, int) const { return {}; }

bool Transport::variant(TransportVariant&) const { return false; }

RouteDecline Transport::variantDeclines(const PeerHandle&) const { return {}; }

RouteReason Transport::absentReason() const { return RouteReason::kNotInstalled; }

RouteDecline Transport::lacks(uint32_t property, uint32_t) const {
  return {RouteReason::kNone, std::string(name()) + " does not give " + std::string(routePropertyName(property))};
}

void Transport::diagnose(TransportDiagnosis&) const {}

Counters Transport::stats() const { return {}; }

bool Transport::moveDirect(PeerHandle&, int, std::span<const TransferRequest>, uint64_t) { return false; }

}  // namespace hawser
