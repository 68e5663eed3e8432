#include "engine/route_fallbacks.h"

#include "base/log.h"

namespace hawser {

void RouteFallbacks::note(const std::string& peer, const Route& from, const Route& to, const RouteDecline& why,
                          uint64_t n) {
  const RouteReason reason = why.reason;
  metrics::Counter* c = nullptr;
  bool first = false;
  {
    std::lock_guard lk(mu_);
    auto key = std::make_tuple(from.name, to.name, reason);
    auto it = counters_.find(key);
    if (it == counters_.end()) {
      c = registry_->counters(kRouteFallbacks).with({from.name, to.name, routeReasonName(reason)});
      counters_.emplace(std::move(key), c);
    } else {
      c = it->second;
    }
    first = logged_.emplace(peer, from.name, reason).second;
  }
  c->add(n);
  if (first)
    HLOG_WARN("segment '{}': requests go over {}, not {}: {}: {} (counted in hawser_route_fallbacks_total; "
              "logged once per peer and reason)",
              peer, to.name, from.name, routeReasonName(reason), why.text);
}

}  // namespace hawser
