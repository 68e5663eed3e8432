#include "engine/route_fallbacks.h"

#include "base/log.h"

namespace hawser {

void RouteFallbacks::note(const std::string& peer, const std::string& from, const std::string& to,
                          const RouteDecline& why, uint64_t n) {
  const RouteReason reason = why.reason;
  metrics::Counter* c = nullptr;
  bool first = false;
  {
    std::lock_guard lk(mu_);
    auto key = std::make_tuple(from, to, reason);
    auto it = counters_.find(key);
    if (it == counters_.end()) {
      c = registry_->counters(kRouteFallbacks).with({from, to, routeReasonName(reason)});
      counters_.emplace(std::move(key), c);
    } else {
      c = it->second;
    }
    first = logged_.emplace(peer, from, reason).second;
  }
  c->add(n);
  if (first)
    HLOG_WARN("segment '{}': requests go over {}, not {}: {}: {} (counted in hawser_route_fallbacks_total; "
              "logged once per peer and reason)",
              peer, to, from, routeReasonName(reason), why.text);
}

}  // namespace hawser
