// What a transport counts itself, in families every transport shares: its
// connections to each peer (initiator side) and what it serves to peers
// (target side: bytes and requests by direction, refused requests, frames
// that closed their connection, connections accepted and open). Traffic per
// peer is counted by the engine for all transports (base/traffic_metrics.h).
#pragma once

#include <string_view>

#include "base/metrics.h"

namespace hawser::metrics {

// Initiator side (labels: transport, peer = the address connected to).
inline constexpr FamilySpec kConnections{"hawser_connections",
                                         "Connections open to a peer (tcp data connections, rdma endpoints)",
                                         MetricType::kGauge, "transport,peer"};
inline constexpr FamilySpec kConnects{"hawser_connects_total", "Connections established to a peer",
                                      MetricType::kCounter, "transport,peer"};
inline constexpr FamilySpec kConnectFailures{"hawser_connect_failures_total", "Connection attempts to a peer that failed",
                                             MetricType::kCounter, "transport,peer"};
inline constexpr FamilySpec kConnectionFailures{
    "hawser_connection_failures_total",
    "Established connections lost (end of stream, reset, timeout, malformed response)", MetricType::kCounter,
    "transport,peer"};

// Target side (labels: transport; direction = what the peer asked: read or write).
inline constexpr FamilySpec kServedBytes{"hawser_served_bytes_total", "Bytes served to peers' requests",
                                         MetricType::kCounter, "transport,direction"};
inline constexpr FamilySpec kServedRequests{"hawser_served_requests_total", "Peers' requests served",
                                            MetricType::kCounter, "transport,direction"};
inline constexpr FamilySpec kRefusedRequests{
    "hawser_refused_requests_total",
    "Peers' requests refused with an error reply (range outside a remote-accessible region, ...)",
    MetricType::kCounter, "transport"};
inline constexpr FamilySpec kRefusedFrames{
    "hawser_refused_frames_total",
    "Frames that closed their connection (bad magic, version, type or length; failed authentication)",
    MetricType::kCounter, "transport"};
inline constexpr FamilySpec kAcceptedConnections{"hawser_accepted_connections_total",
                                                 "Connections accepted from peers", MetricType::kCounter, "transport"};
inline constexpr FamilySpec kServedConnections{"hawser_served_connections", "Connections from peers being served",
                                               MetricType::kGauge, "transport"};

// One peer's connections, as one transport sees them.
struct ConnectionMetrics {
  Gauge* open = nullptr;
  Counter* connects = nullptr;
  Counter* connect_failures = nullptr;
  Counter* failures = nullptr;
  static ConnectionMetrics of(Registry& r, std::string_view transport, std::string_view peer);
};

// The serving side of one transport.
struct ServedMetrics {
  Counter* bytes[2] = {};     // [0] peers' reads, [1] peers' writes
  Counter* requests[2] = {};
  Counter* refused = nullptr;
  Counter* refused_frames = nullptr;
  Counter* accepted = nullptr;
  Gauge* open = nullptr;
  static ServedMetrics of(Registry& r, std::string_view transport);
};

}  // namespace hawser::metrics
