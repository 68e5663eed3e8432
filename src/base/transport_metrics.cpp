#include "base/transport_metrics.h"

namespace hawser::metrics {

ConnectionMetrics ConnectionMetrics::of(Registry& r, std::string_view transport, std::string_view peer) {
  ConnectionMetrics m;
  m.open = r.gauges(kConnections).with({transport, peer});
  m.connects = r.counters(kConnects).with({transport, peer});
  m.connect_failures = r.counters(kConnectFailures).with({transport, peer});
  m.failures = r.counters(kConnectionFailures).with({transport, peer});
  return m;
}

ServedMetrics ServedMetrics::of(Registry& r, std::string_view transport) {
  ServedMetrics m;
  constexpr std::string_view dirs[2] = {"read", "write"};
  for (int i = 0; i < 2; ++i) {
    m.bytes[i] = r.counters(kServedBytes).with({transport, dirs[i]});
    m.requests[i] = r.counters(kServedRequests).with({transport, dirs[i]});
  }
  m.refused = r.counters(kRefusedRequests).with({transport});
  m.refused_frames = r.counters(kRefusedFrames).with({transport});
  m.accepted = r.counters(kAcceptedConnections).with({transport});
  m.open = r.gauges(kServedConnections).with({transport});
  return m;
}

}  // namespace hawser::metrics
