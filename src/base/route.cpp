#include "base/route.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

namespace hawser {

std::string_view routeReasonName(RouteReason r) {
  switch (r) {
    case RouteReason::kNone: return "none";
    case RouteReason::kNotInstalled: return "not_installed";
    case RouteReason::kNoDevice: return "no_device";
    case RouteReason::kOtherHost: return "other_host";
    case RouteReason::kOtherNetNamespace: return "other_net_namespace";
    case RouteReason::kOtherPidNamespace: return "other_pid_namespace";
    case RouteReason::kOtherMountNamespace: return "other_mount_namespace";
    case RouteReason::kPermissionDenied: return "permission_denied";
    case RouteReason::kPeerLacksTransport: return "peer_lacks_transport";
    case RouteReason::kPeerIncompatible: return "peer_incompatible";
    case RouteReason::kPeerGone: return "peer_gone";
    case RouteReason::kNoIpcHandle: return "no_ipc_handle";
    case RouteReason::kCompatMode: return "compat_mode";
    case RouteReason::kUnsupportedFile: return "unsupported_file";
    case RouteReason::kRefused: return "refused";
  }
  return "refused";
}

namespace {

struct Named {
  std::string_view name;
  uint32_t bit;
};
constexpr Named kTransports[] = {{"tcp", kRouteTcp},
                                 {"shm", kRouteShm},
                                 {"rdma", kRouteRdma},
                                 {"nvlink", kRouteNvlink},
                                 {"file", kRouteFile},
                                 {"nvmeof", kRouteFile}};
constexpr Named kProperties[] = {{"zero_copy", kZeroCopy}, {"no_staging", kNoStaging}, {"same_host", kSameHost}};

template <size_t N>
std::string namesOf(const Named (&table)[N], uint32_t bits) {
  std::string out;
  uint32_t seen = 0;
  for (const Named& n : table)
    if ((bits & n.bit) && !(seen & n.bit)) {
      seen |= n.bit;
      if (!out.empty()) out += ',';
      out += n.name;
    }
  return out;
}

template <size_t N>
Status parseNames(const Named (&table)[N], std::string_view text, const char* what, uint32_t& out) {
  out = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view w = text.substr(pos, end - pos);
    while (!w.empty() && (w.front() == ' ' || w.front() == '\t')) w.remove_prefix(1);
    while (!w.empty() && (w.back() == ' ' || w.back() == '\t')) w.remove_suffix(1);
    if (!w.empty()) {
      uint32_t bit = 0;
      for (const Named& n : table)
        if (n.name == w) bit = n.bit;
      if (!bit) {
        std::vector<std::string_view> known;
        for (const Named& n : table) known.push_back(n.name);
        return {Code::kInvalidArgument,
                fmt::format("'{}' is not a {} (one of: {})", w, what, fmt::join(known, ", "))};
      }
      out |= bit;
    }
    pos = end + 1;
  }
  return Status::OK();
}

}  // namespace

uint32_t routeTransportBit(std::string_view transport) {
  for (const Named& n : kTransports)
    if (n.name == transport) return n.bit;
  return 0;
}

std::string_view routePropertyName(uint32_t property) {
  for (const Named& n : kProperties)
    if (n.bit == property) return n.name;
  return "";
}

std::string routePropertyNames(uint32_t properties) { return namesOf(kProperties, properties); }

std::string routeTransportNames(uint32_t transports) { return namesOf(kTransports, transports); }

Status parseRouteTransports(std::string_view text, uint32_t& out) {
  return parseNames(kTransports, text, "transport a route contract can name", out);
}

Status parseRouteProperties(std::string_view text, uint32_t& out) {
  return parseNames(kProperties, text, "route property", out);
}

Status parseRouteContract(std::string_view transports, std::string_view require, RouteContract& out) {
  RouteContract c;
  c.set = true;
  Status s = parseRouteTransports(transports, c.transports);
  if (s.ok()) s = parseRouteProperties(require, c.require);
  if (s.ok()) out = c;
  return s;
}

}  // namespace hawser
