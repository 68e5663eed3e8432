// Which transport serves a request: one function, one table.
//
// Every transport reports its caps (base/transport.h). For a request the
// candidates are the installed transports that
//   1. serve the segment's kind (memory or file),
//   2. move the kind of the local buffer (host or GPU memory),
//   3. move the kind of the remote buffer (memory segments),
//   4. are on the same host as the peer, when the transport needs that,
//   5. decoded the peer's descriptor (openPeer succeeded);
// the one with the lowest cost rank wins (ties: by name). The ranks the
// transports declare:
//
//   | transport | rank | moves                                        |
//   | nvlink    |  10  | GPU memory between GPUs of one host          |
//   | shm       |  20  | host memory between processes of one host    |
//   | rdma      |  30  | host memory over RDMA NICs                   |
//   | tcp       |  40  | host memory over TCP, any two hosts          |
//   | file      |  50  | file segments (io_uring, else POSIX, within) |
//
// Config key `transport` (HAWSER_TRANSPORT) forces one transport for memory
// segments; file segments still go to the transport that serves files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/traffic_metrics.h"
#include "base/transport.h"
#include "hawser/status.h"
#include "metadata/descriptor.h"

namespace hawser {

// One transport's view of an open segment.
struct Route {
  Transport* transport = nullptr;
  TransportCaps caps;                // transport->caps(), taken once when the view is made
  std::shared_ptr<PeerHandle> peer;  // null when the transport refused the peer
  Status refusal;                    // why (when peer is null)
  std::shared_ptr<metrics::PeerTraffic> traffic;  // where its tasks are counted (when peer is set)
};

// An open segment's descriptor and every installed transport's view of it.
struct SegmentView {
  std::shared_ptr<const SegmentDesc> desc;
  bool same_host = false;  // the owner shares this engine's host id
  std::vector<Route> routes;
};

struct RouteQuery {
  uint32_t local_kind = kHostMemory;
  uint32_t remote_kind = kHostMemory;  // memory segments only
};

// The route for `q` on `view`, or nullptr; `why` (optional) says why, naming
// each candidate passed over. On the submit path `why` is asked for only
// once no route was found (it formats a message per candidate).
const Route* selectRoute(const SegmentView& view, const RouteQuery& q, const std::string& forced,
                         std::string* why = nullptr);

}  // namespace hawser
