// Peers: openPeer decodes a descriptor once into a PeerRef; endpoints (one
// per local NIC x peer NIC) are made on first use and keep their QPs while a
// handle on the peer lives.
#include "transport/rdma/rdma_peer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_integer.h"
#include "base/peer_entry.h"
#include "base/segment_desc.h"
#include "transport/rdma/rdma_json.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_transport.h"

namespace hawser::rdma {

namespace {

using json = nlohmann::json;

Status decodeNics(const SegmentDesc& seg, const json& attrs, std::vector<PeerNic>& out, RouteDecline& why) {
  auto nics = attrs.find("nics");
  if (nics == attrs.end() || !nics->is_array() || nics->empty())
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}': transports.rdma.nics is missing or empty", seg.name)});
  for (size_t i = 0; i < nics->size(); ++i) {
    const json& n = (*nics)[i];
    PeerNic pn;
    try {
      pn.name = n.at("name").get<std::string>();
      pn.ib = n.at("link_layer").get<std::string>() == "ib";
      if (!gidFromString(n.at("gid").get<std::string>(), pn.gid))
        return declined(why, RouteReason::kPeerIncompatible,
                        {Code::kNotSupported,
                         fmt::format("segment '{}': transports.rdma.nics[{}].gid is malformed", seg.name, i)});
      pn.lid = integerAt<uint16_t>(n, "lid");
      pn.numa = integerOr<int>(n, "numa", -1);
      pn.mtu = integerOr<int>(n, "mtu", 4096);
      pn.up = n.value("up", true);
    } catch (const std::exception& e) {
      return declined(why, RouteReason::kPeerIncompatible,
                      {Code::kNotSupported, fmt::format("segment '{}': transports.rdma.nics[{}]: {}", seg.name, i, e.what())});
    }
    out.push_back(std::move(pn));
  }
  return Status::OK();
}

RemoteBuffer decodeBuffer(const SegmentDesc& seg, const BufferDesc& buf, size_t nics) {
  RemoteBuffer rb;
  rb.numa = hostNodeOf(buf.location);
  auto at = buf.attrs.find("rdma");
  const json* rk = nullptr;
  if (at != buf.attrs.end() && at->is_object()) {
    auto f = at->find("rkey");
    if (f != at->end()) rk = &*f;
  }
  if (!rk) {
    rb.refusal = Status(Code::kOutOfRange,
                        fmt::format("buffer {:#x} of segment '{}' has no rdma rkey (not remote-accessible over rdma)",
                                    buf.addr, seg.name));
    return rb;
  }
  if (!rk->is_array() || rk->size() != nics) {
    rb.refusal = Status(Code::kMetadataError, fmt::format("buffer {:#x} of segment '{}': attrs.rdma.rkey must list "
                                                          "{} keys",
                                                          buf.addr, seg.name, nics));
    return rb;
  }
  for (const json& k : *rk) {
    uint32_t key = 0;
    if (!k.is_number_unsigned() || !jsonInteger(k, "attrs.rdma.rkey", key).ok()) {
      rb.rkeys.clear();
      rb.refusal = Status(Code::kMetadataError,
                          fmt::format("buffer {:#x} of segment '{}': attrs.rdma.rkey holds a non-key value", buf.addr,
                                      seg.name));
      return rb;
    }
    rb.rkeys.push_back(key);
  }
  return rb;
}

std::string linkName(bool ib) { return ib ? "ib" : "eth"; }

}  // namespace

Status decodePeer(const SegmentDesc& seg, Peer& peer, std::vector<RemoteBuffer>& buffers, RouteDecline& why) {
  const json* entry = nullptr;
  Status es = memoryPeerEntry(seg, "rdma", entry, why);
  if (!es.ok()) return es;
  const json& a = *entry;
  auto inst = a.find("instance");
  peer.instance = inst != a.end() && inst->is_string() ? inst->get<std::string>() : std::string();
  peer.key = seg.name + "#" + peer.instance;
  peer.segment = seg.name;
  peer.host = seg.host;
  peer.port = seg.rpc_port;
  peer.nics.clear();
  Status s = decodeNics(seg, a, peer.nics, why);
  if (!s.ok()) return s;
  buffers.clear();
  for (const BufferDesc& b : seg.buffers) buffers.push_back(decodeBuffer(seg, b, peer.nics.size()));
  return Status::OK();
}

Status RdmaTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  return openRoute(seg, out, why);
}

Status RdmaTransport::openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) {
  why = {};
  if (!installed_ || stopping_.load()) return transportNotRunning("rdma", why);
  auto peer = std::make_shared<Peer>();
  std::vector<RemoteBuffer> buffers;
  Status s = decodePeer(seg, *peer, buffers, why);
  if (!s.ok()) return s;
  // Some pair must share a link layer (IB and RoCE do not talk).
  bool reachable = false;
  std::vector<std::string> here, there;
  for (auto& c : ctxs_) {
    if (!c->usable()) continue;
    here.push_back(c->info().name + " " + linkName(c->info().ib()));
    for (const PeerNic& n : peer->nics) reachable |= n.up && n.ib == c->info().ib();
  }
  if (!reachable) {
    for (const PeerNic& n : peer->nics) there.push_back(n.name + " " + linkName(n.ib) + (n.up ? "" : " down"));
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported,
                     fmt::format("segment '{}': no usable NIC here ({}) shares a link layer with an up NIC there ({})",
                                 seg.name, here.empty() ? "none" : fmt::format("{}", fmt::join(here, ", ")),
                                 fmt::join(there, ", "))});
  }
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    peer_handles_[peer->key]++;
  }
  out = std::make_shared<PeerRef>(this, std::move(peer), std::move(buffers));
  return Status::OK();
}

}  // namespace hawser::rdma

namespace hawser {

Status decodeRdmaPeer(const SegmentDesc& seg, RouteDecline& why) {
  rdma::Peer peer;
  std::vector<rdma::RemoteBuffer> buffers;
  return rdma::decodePeer(seg, peer, buffers, why);
}

}  // namespace hawser

namespace hawser::rdma {

PeerRef::~PeerRef() { owner_->releasePeer(peer->key); }

void RdmaTransport::releasePeer(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(ep_mu_);
    auto it = peer_handles_.find(key);
    if (it == peer_handles_.end()) return;  // after shutdown
    if (--it->second > 0) return;
    peer_handles_.erase(it);
  }
  // Idle endpoints to this peer give their QPs back. The Endpoint objects
  // stay (a completion being handled may still point at one; a later use
  // reconnects); they are freed with the transport.
  // The peer is told, so it destroys its side too.
  for (auto& ep : endpointsOf(&key))
    if (ep->destroyIfIdle()) sendRelease(*ep, false);
}

std::shared_ptr<Endpoint> RdmaTransport::endpointFor(const std::shared_ptr<const Peer>& peer, int l, int p) {
  std::lock_guard<std::mutex> lock(ep_mu_);
  auto key = std::make_tuple(peer->key, l, p);
  auto it = endpoints_.find(key);
  if (it != endpoints_.end()) return it->second;
  std::string id = fmt::format("{}/{}:{}>{}@{}", instance_, l, ctxs_[l]->info().name, peer->nics[p].name, peer->key);
  auto ep = std::make_shared<Endpoint>(this, ctxs_[l].get(), peer, p, id);
  ep->metrics = metrics::ConnectionMetrics::of(*metrics_, "rdma", peer->segment);
  counts_.endpoints_created++;
  endpoints_[key] = ep;
  return ep;
}

std::vector<std::shared_ptr<Endpoint>> RdmaTransport::endpointsOf(const std::string* key) {
  std::vector<std::shared_ptr<Endpoint>> eps;
  std::lock_guard<std::mutex> lock(ep_mu_);
  for (auto& [k, ep] : endpoints_)
    if (!key || std::get<0>(k) == *key) eps.push_back(ep);
  return eps;
}

}  // namespace hawser::rdma
