// A peer as the rdma transport sees it: its descriptor's rdma attributes
// decoded once, when the segment is opened (or its descriptor changes).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/transport.h"
#include "hawser/status.h"
#include "transport/rdma/rdma_endpoint.h"

namespace hawser::rdma {

class RdmaTransport;

// One buffer of the peer's segment (same index as SegmentDesc::buffers).
struct RemoteBuffer {
  std::vector<uint32_t> rkeys;  // per peer NIC (0 = unusable there)
  int numa = -1;                // N of a "cpu:N" location, else -1
  Status refusal;               // not ok: requests to it are refused with this
};

// The descriptor decoder: transports.rdma of `seg` (instance, NICs) into
// `peer`, and each buffer's attrs.rdma.rkey into `buffers`. kNotSupported
// (base/peer_entry.h) for a segment that is not a memory segment (reason
// kRefused) or publishes no transports.rdma (kPeerLacksTransport), and
// naming the field when the NIC list is absent or malformed
// (kPeerIncompatible); a buffer's bad keys only refuse requests to that
// buffer. Never throws.
Status decodePeer(const SegmentDesc& seg, Peer& peer, std::vector<RemoteBuffer>& buffers, RouteDecline& why);

// What the engine keeps with the open segment and hands to its tasks. While
// any handle on a peer (segment name + instance) lives, its endpoints keep
// their QPs; when the last one goes, idle endpoints give them back.
class PeerRef final : public PeerHandle {
 public:
  PeerRef(RdmaTransport* owner, std::shared_ptr<const Peer> peer, std::vector<RemoteBuffer> buffers)
      : peer(std::move(peer)), buffers(std::move(buffers)), owner_(owner) {}
  ~PeerRef() override;

  const std::shared_ptr<const Peer> peer;
  const std::vector<RemoteBuffer> buffers;

 private:
  RdmaTransport* owner_;
};

}  // namespace hawser::rdma

namespace hawser {
// rdma::decodePeer as the engine's list of transports names it (beside the
// factory, makeRdmaTransport; engine/transport_list.h).
Status decodeRdmaPeer(const SegmentDesc& seg, RouteDecline& why);
}  // namespace hawser
