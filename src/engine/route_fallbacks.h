// Fallbacks that happen (engine/selection.h says what one is): each request
// that takes one is counted in hawser_route_fallbacks_total{from,to,reason},
// and the first of each peer and reason is logged as a warning.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "base/metrics.h"
#include "engine/selection.h"

namespace hawser {

inline constexpr metrics::FamilySpec kRouteFallbacks{
    "hawser_route_fallbacks_total",
    "Requests that took a costlier transport because a cheaper one declined the peer (from: the one that declined, "
    "to: the one taken, reason: why, docs/routes.md)",
    MetricType::kCounter, "from,to,reason"};

class RouteFallbacks {
 public:
  explicit RouteFallbacks(std::shared_ptr<metrics::Registry> registry) : registry_(std::move(registry)) {}

  // `n` requests to segment `peer` went over `to` because `from` declined
  // (`why`): routes by name.
  void note(const std::string& peer, const std::string& from, const std::string& to, const RouteDecline& why,
            uint64_t n);
  void note(const std::string& peer, const Route& from, const Route& to, const RouteDecline& why, uint64_t n) {
    note(peer, from.name, to.name, why, n);
  }

 private:
  std::shared_ptr<metrics::Registry> registry_;
  std::mutex mu_;
  std::map<std::tuple<std::string, std::string, RouteReason>, metrics::Counter*> counters_;  // (from, to, reason)
  std::set<std::tuple<std::string, std::string, RouteReason>> logged_;                        // (peer, from, reason)
};

}  // namespace hawser
