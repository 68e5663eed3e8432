// The rdma handshake: an rpc call on the transport's own channel by which
// an endpoint's QPs (active side) and the peer's freshly created QPs
// (passive side) learn each other's QPN/PSN and NIC address (GID, LID, MTU).
// The messages are JSON objects; their keys are the wire format.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "rpc/rpc.h"

namespace hawser::rdma {

inline const rpc::Channel kRdmaHandshakeCall = rpc::channel("rdma.handshake");

// One side's QPs and the NIC they live on.
struct QpSet {
  std::vector<uint32_t> qpn;  // "qpn"
  std::vector<uint32_t> psn;  // "psn"
  ibv_gid gid{};              // "gid"
  uint16_t lid = 0;           // "lid"
  int mtu = 0;                // "mtu" (bytes, the NIC's active MTU)
};

struct HandshakeRequest {
  std::string from;           // the requester's "host:port"
  std::string instance;       // the requester's install nonce
  std::string key;            // the requester's endpoint id
  std::string local_nic;      // the requester's NIC
  std::string peer_nic;       // the NIC asked for here
  std::string peer_instance;  // the instance the requester believes it talks to
  std::string link_layer;     // "ib" | "eth"
  QpSet qps;
};

struct HandshakeReply {
  std::string nic;
  QpSet qps;
};

std::string encode(const HandshakeRequest& r);
std::string encode(const HandshakeReply& r);
// kInvalidArgument saying what is missing or malformed.
Status decode(const std::string& text, HandshakeRequest& out);
Status decode(const std::string& text, HandshakeReply& out);

}  // namespace hawser::rdma
