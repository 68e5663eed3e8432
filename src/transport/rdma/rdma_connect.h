// The rdma handshake: an rpc call on the transport's own channel by which
// an endpoint's QPs (active side) and the peer's freshly created QPs
// (passive side) learn each other's QPN/PSN and NIC address, and agree on
// what both ends of an RC pair must program alike: the path MTU (the
// passive side decides, from both sides' bounds), the READ depth (each side
// issues at most as many READs as the other serves), and on RoCE the GIDs
// (one of each side, of one type and address family: the passive side picks
// from the requester's list). A release call lets the passive side destroy
// the QPs of an endpoint that its requester closed. The messages are JSON
// objects; their keys are the wire format (version 2).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "rpc/rpc.h"
#include "transport/rdma/rdma_nic.h"

namespace hawser::rdma {

inline const rpc::Channel kRdmaHandshakeCall = rpc::channel("rdma.handshake");
inline const rpc::Channel kRdmaReleaseCall = rpc::channel("rdma.release");
inline constexpr int kHandshakeVersion = 2;

// One side's QPs and the NIC they live on.
struct QpSet {
  std::vector<uint32_t> qpn;  // "qpn"
  std::vector<uint32_t> psn;  // "psn": the first PSN each QP sends
  ibv_gid gid{};              // "gid": the GID its QPs send from (reply; RoCE)
  uint16_t lid = 0;           // "lid"
  // "mtu", bytes. Request: the requester's bound (its active MTU, at most
  // its rdma.mtu); reply: the path MTU both sides program.
  int mtu = 0;
  int rd_atom = 0;       // "rd_atom": READs each of its QPs serves at once (max_dest_rd_atomic)
  int init_rd_atom = 0;  // "init_rd_atom": READs each of its QPs may issue at once, at most
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
  std::vector<GidChoice> gids;  // "gids": RoCE: the requester's usable GIDs, preferred first
};

struct HandshakeReply {
  std::string nic;
  QpSet qps;
  int gid_index = -1;    // "gid_index": RoCE: the requester's GID its QPs must send from
  std::string gid_type;  // "gid_type": of qps.gid ("RoCE v2" | "RoCE v1"); "IB" on InfiniBand
};

// The requester closed an endpoint: its passive QPs can go.
struct ReleaseRequest {
  std::string from;      // "from": the requester's "host:port"
  std::string instance;  // "instance": the requester's install nonce
  std::string key;       // "key": the endpoint id
};

std::string encode(const HandshakeRequest& r);
std::string encode(const HandshakeReply& r);
std::string encode(const ReleaseRequest& r);
// kInvalidArgument saying what is missing or malformed (or another version).
Status decode(const std::string& text, HandshakeRequest& out);
Status decode(const std::string& text, HandshakeReply& out);
Status decode(const std::string& text, ReleaseRequest& out);

}  // namespace hawser::rdma
