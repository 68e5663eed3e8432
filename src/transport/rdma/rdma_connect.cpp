// Connections: the handshake's messages, its active side (establish(), on a
// connector thread per connecting endpoint) and its passive side (handshake(),
// on the rpc listener's connection thread).
#include "transport/rdma/rdma_connect.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "transport/rdma/rdma_json.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_transport.h"

namespace hawser::rdma {

// ---------------------------------------------------------------- messages

namespace {

using json = nlohmann::json;

void putQps(json& j, const QpSet& q) {
  j["qpn"] = q.qpn;
  j["psn"] = q.psn;
  j["gid"] = gidToString(q.gid);
  j["lid"] = q.lid;
  j["mtu"] = q.mtu;
  j["rd_atom"] = q.rd_atom;
  j["init_rd_atom"] = q.init_rd_atom;
}

// Throws (json or runtime_error) on anything missing or malformed.
void getQps(const json& j, QpSet& q) {
  const json& qpn = j.at("qpn");
  const json& psn = j.at("psn");
  if (!qpn.is_array() || !psn.is_array()) throw std::runtime_error("qpn and psn must be arrays");
  for (auto& x : qpn) q.qpn.push_back(integerValue<uint32_t>(x, "qpn"));
  for (auto& x : psn) {
    q.psn.push_back(integerValue<uint32_t>(x, "psn"));
    if (q.psn.back() > 0xffffff) throw std::runtime_error("psn above 2^24");
  }
  if (!gidFromString(j.at("gid").get<std::string>(), q.gid)) throw std::runtime_error("bad gid");
  q.lid = integerAt<uint16_t>(j, "lid");
  q.mtu = integerAt<int>(j, "mtu");
  if (mtuBytes(mtuFromBytes(q.mtu)) != q.mtu) throw std::runtime_error("mtu is not 256..4096, a power of two");
  q.rd_atom = integerAt<int>(j, "rd_atom");
  q.init_rd_atom = integerAt<int>(j, "init_rd_atom");
  if (q.rd_atom < 0 || q.rd_atom > 255 || q.init_rd_atom < 0 || q.init_rd_atom > 255)
    throw std::runtime_error("rd_atom/init_rd_atom out of 0..255");
}

void checkVersion(const json& j) {
  int v = integerAt<int>(j, "v");
  if (v != kHandshakeVersion)
    throw std::runtime_error(fmt::format("rdma handshake version {} (this engine speaks {})", v, kHandshakeVersion));
}

template <typename F>
Status parse(const std::string& text, F&& read) {
  try {
    read(json::parse(text));
  } catch (const std::exception& e) {
    return Status(Code::kInvalidArgument, e.what());
  }
  return Status::OK();
}

}  // namespace

std::string encode(const HandshakeRequest& r) {
  json j = {{"v", kHandshakeVersion},
            {"from", r.from},
            {"instance", r.instance},
            {"key", r.key},
            {"local_nic", r.local_nic},
            {"peer_nic", r.peer_nic},
            {"peer_instance", r.peer_instance},
            {"link_layer", r.link_layer}};
  putQps(j, r.qps);
  json gids = json::array();
  for (const GidChoice& g : r.gids)
    gids.push_back({{"index", g.index}, {"gid", gidToString(g.gid)}, {"type", gidTypeName(g.type)}});
  j["gids"] = std::move(gids);
  return j.dump();
}

std::string encode(const HandshakeReply& r) {
  json j = {{"v", kHandshakeVersion}, {"nic", r.nic}, {"gid_index", r.gid_index}, {"gid_type", r.gid_type}};
  putQps(j, r.qps);
  return j.dump();
}

std::string encode(const ReleaseRequest& r) {
  return json{{"v", kHandshakeVersion}, {"from", r.from}, {"instance", r.instance}, {"key", r.key}}.dump();
}

Status decode(const std::string& text, HandshakeRequest& out) {
  return parse(text, [&](const json& j) {
    checkVersion(j);
    out.from = j.at("from").get<std::string>();
    out.instance = j.at("instance").get<std::string>();
    out.key = j.at("key").get<std::string>();
    out.local_nic = j.value("local_nic", std::string());
    out.peer_nic = j.at("peer_nic").get<std::string>();
    out.peer_instance = j.at("peer_instance").get<std::string>();
    out.link_layer = j.at("link_layer").get<std::string>();
    getQps(j, out.qps);
    for (const json& g : j.at("gids")) {
      GidChoice c;
      c.index = integerAt<int>(g, "index");
      if (c.index < 0 || c.index > 255) throw std::runtime_error("gid index out of 0..255");
      if (!gidFromString(g.at("gid").get<std::string>(), c.gid)) throw std::runtime_error("bad gid in gids");
      if (!gidTypeFromName(g.at("type").get<std::string>(), c.type)) throw std::runtime_error("unknown gid type");
      out.gids.push_back(c);
    }
  });
}

Status decode(const std::string& text, HandshakeReply& out) {
  return parse(text, [&](const json& j) {
    checkVersion(j);
    out.nic = j.value("nic", std::string());
    out.gid_index = integerAt<int>(j, "gid_index");
    out.gid_type = j.at("gid_type").get<std::string>();
    getQps(j, out.qps);
  });
}

Status decode(const std::string& text, ReleaseRequest& out) {
  return parse(text, [&](const json& j) {
    checkVersion(j);
    out.from = j.at("from").get<std::string>();
    out.instance = j.at("instance").get<std::string>();
    out.key = j.at("key").get<std::string>();
  });
}

// ---------------------------------------------------------------- QP bring-up

RtrParams RdmaTransport::rtrParams() const {
  RtrParams p;
  p.min_rnr_timer = t_.min_rnr_timer;
  p.traffic_class = t_.traffic_class;
  p.service_level = t_.service_level;
  p.hop_limit = t_.hop_limit;
  return p;
}

int RdmaTransport::mtuBound(const RdmaContext& c) const {
  // A path MTU is one of the verbs sizes (256..4096, powers of two).
  return mtuBytes(mtuFromBytes(std::min(mtuBytes(c.info().active_mtu), t_.mtu)));
}

Status RdmaTransport::newQp(RdmaContext& c, std::vector<ibv_qp*>& qps) {
  ibv_qp* q = nullptr;
  Status s = createQp(c, max_wr_, q);
  if (!s.ok()) return s;
  qps.push_back(q);
  return qpToInit(*v_, q, c.info());
}

Status RdmaTransport::connectQp(RdmaContext& c, ibv_qp* q, RtrParams p, uint32_t remote_qpn, uint32_t remote_psn,
                                uint32_t psn, uint8_t max_rd_atomic) {
  p.remote_qpn = remote_qpn;
  p.remote_psn = remote_psn;
  Status s = qpToRtr(*v_, q, c.info(), p);
  if (s.ok()) s = qpToRts(*v_, q, c.info(), psn, t_.timeout, t_.retry_cnt, t_.rnr_retry, max_rd_atomic);
  return s;
}

// ---------------------------------------------------------------- active side

void RdmaTransport::connectAsync(std::shared_ptr<Endpoint> ep) {
  std::unique_lock<std::mutex> lock(conn_mu_);
  if (stopping_.load()) {
    // No new threads once shutdown collected them: establish() refuses at
    // once and the endpoint fails what waits.
    lock.unlock();
    ep->connect();
    return;
  }
  for (auto it = connectors_.begin(); it != connectors_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = connectors_.erase(it);
    } else {
      ++it;
    }
  }
  auto job = std::make_unique<ConnectJob>();
  ConnectJob* j = job.get();
  j->thread = std::thread([ep, j] {
    ep->connect();
    j->done.store(true);
  });
  connectors_.push_back(std::move(job));
}

void RdmaTransport::sendRelease(const Endpoint& ep, bool wait) {
  const Peer& peer = ep.peer();
  ReleaseRequest r{self_, instance_, ep.id()};
  std::string host = peer.host, segment = peer.segment;
  const uint16_t port = peer.port;
  auto send = [r, host, port, segment, timeout = std::min<uint32_t>(t_.connect_timeout_ms, 1000)] {
    std::string reply;
    Status s = rpc::call(host, port, kRdmaReleaseCall.id, encode(r), reply, std::chrono::milliseconds(timeout));
    if (!s.ok()) HLOG_DEBUG("rdma release of {} at {}: {}", r.key, segment, s.message());
  };
  std::unique_lock<std::mutex> lock(conn_mu_);
  if (wait || stopping_.load()) {
    lock.unlock();
    send();
    return;
  }
  auto job = std::make_unique<ConnectJob>();
  ConnectJob* j = job.get();
  j->thread = std::thread([send, j] {
    send();
    j->done.store(true);
  });
  connectors_.push_back(std::move(job));
}

void RdmaTransport::joinConnectors() {
  std::unique_lock<std::mutex> lock(conn_mu_);
  auto jobs = std::move(connectors_);
  lock.unlock();
  for (auto& j : jobs)
    if (j->thread.joinable()) j->thread.join();
}

Status RdmaTransport::establish(Endpoint& ep, std::vector<ibv_qp*>& qps, bool& peer_gone) {
  peer_gone = false;
  RdmaContext& c = ep.context();
  const Peer& peer = ep.peer();
  const PeerNic& pn = peer.nics[static_cast<size_t>(ep.peerNic())];
  if (stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  if (!c.usable()) return Status(Code::kUnavailable, fmt::format("local NIC {} is down", c.info().name));
  auto fail = [&](Status s) {
    for (ibv_qp* q : qps) v_->destroy_qp(q);
    qps.clear();
    return s;
  };
  std::mt19937 rng(std::random_device{}());
  HandshakeRequest req;
  for (uint32_t i = 0; i < t_.qps_per_peer; ++i) {
    Status s = newQp(c, qps);
    if (!s.ok()) return fail(s);
    req.qps.qpn.push_back(qps.back()->qp_num);
    req.qps.psn.push_back(rng() & 0xffffff);
  }
  req.from = self_;
  req.instance = instance_;
  req.key = ep.id();
  req.local_nic = c.info().name;
  req.peer_nic = pn.name;
  req.peer_instance = peer.instance;
  req.link_layer = c.info().ib() ? "ib" : "eth";
  req.qps.gid = c.info().gid;
  req.qps.lid = c.info().lid;
  req.qps.mtu = mtuBound(c);
  req.qps.rd_atom = responderResources(c.info());
  req.qps.init_rd_atom = initiatorDepth(c.info());
  if (!c.info().ib()) req.gids = c.info().gids;
  std::string text;
  counts_.handshakes_sent++;
  auto where = [&] { return fmt::format("rdma handshake {} -> {}@{}", c.info().name, pn.name, peer.segment); };
  Status s = rpc::call(peer.host, peer.port, kRdmaHandshakeCall.id, encode(req), text,
                       std::chrono::milliseconds(t_.connect_timeout_ms), &peer_gone);
  if (!s.ok()) return fail(Status(s.code(), fmt::format("{}: {}", where(), s.message())));
  HandshakeReply reply;
  s = decode(text, reply);
  if (!s.ok())
    return fail(Status(Code::kRemoteError, fmt::format("{}: malformed reply: {}", where(), s.message())));
  const QpSet& r = reply.qps;
  if (r.qpn.size() != qps.size() || r.psn.size() != qps.size())
    return fail(Status(Code::kRemoteError,
                       fmt::format("{}: peer answered {} QPs for {}", where(), r.qpn.size(), qps.size())));
  // The peer chose the path MTU within our bound, and (RoCE) which of our
  // GIDs our QPs send from: both ends then program the same.
  if (r.mtu > req.qps.mtu)
    return fail(Status(Code::kRemoteError, fmt::format("{}: peer chose path MTU {}, above this side's bound {}",
                                                       where(), r.mtu, req.qps.mtu)));
  RtrParams p = rtrParams();
  p.remote_gid = r.gid;
  p.remote_lid = r.lid;
  p.mtu = mtuFromBytes(r.mtu);
  p.max_dest_rd_atomic = static_cast<uint8_t>(req.qps.rd_atom);
  if (!c.info().ib()) {
    auto mine = std::find_if(req.gids.begin(), req.gids.end(), [&](const GidChoice& g) { return g.index == reply.gid_index; });
    if (mine == req.gids.end())
      return fail(Status(Code::kRemoteError,
                         fmt::format("{}: peer chose GID index {}, which this side did not offer", where(), reply.gid_index)));
    p.sgid_index = mine->index;
  }
  // READs in flight per QP: within our initiator depth and what the peer's
  // QPs serve.
  const uint8_t depth = static_cast<uint8_t>(std::min(req.qps.init_rd_atom, r.rd_atom));
  for (size_t i = 0; i < qps.size(); ++i) {
    s = connectQp(c, qps[i], p, r.qpn[i], r.psn[i], req.qps.psn[i], depth);
    if (!s.ok()) return fail(s);
  }
  HLOG_DEBUG("rdma endpoint {} connected ({} QPs, mtu {}, READ depth {}, sgid[{}] -> {} {})", ep.id(), qps.size(),
             r.mtu, depth, p.sgid_index, gidToString(r.gid), reply.gid_type);
  return Status::OK();
}

// ---------------------------------------------------------------- passive side

Status RdmaTransport::serveHandshakes(ChannelRegistry& server) {
  gate_ = std::make_shared<Gate>();
  gate_->target = this;
  Status s = server.onCall(kRdmaHandshakeCall, [gate = gate_](const std::string& req, std::string& reply) {
    std::shared_lock lock(gate->mu);
    if (!gate->target) return Status(Code::kUnavailable, "rdma transport is not running");
    return gate->target->handshake(req, reply);
  });
  if (!s.ok()) return s;
  return server.onCall(kRdmaReleaseCall, [gate = gate_](const std::string& req, std::string& reply) {
    std::shared_lock lock(gate->mu);
    if (!gate->target) return Status(Code::kUnavailable, "rdma transport is not running");
    return gate->target->release(req, reply);
  });
}

namespace {

std::string gidList(const std::vector<GidChoice>& gids) {
  std::vector<std::string> out;
  for (const GidChoice& g : gids) out.push_back(fmt::format("{} {}", gidTypeName(g.type), gidFamily(g.gid)));
  return out.empty() ? "none" : fmt::format("{}", fmt::join(out, ", "));
}

}  // namespace

Status RdmaTransport::handshake(const std::string& request, std::string& reply) {
  if (stopping_.load()) return Status(Code::kUnavailable, "rdma transport is shutting down");
  HandshakeRequest r;
  Status s = decode(request, r);
  if (!s.ok()) return Status(Code::kInvalidArgument, fmt::format("malformed rdma handshake: {}", s.message()));
  if (r.peer_instance != instance_)
    return Status(Code::kUnavailable, fmt::format("rdma handshake for instance {}, but this engine is {} (the "
                                                  "requester's descriptor is stale)",
                                                  r.peer_instance, instance_));
  const QpSet& rq = r.qps;
  if (rq.qpn.empty() || rq.qpn.size() > 64 || rq.qpn.size() != rq.psn.size())
    return Status(Code::kInvalidArgument,
                  fmt::format("rdma handshake: {} QPNs and {} PSNs", rq.qpn.size(), rq.psn.size()));
  RdmaContext* c = nullptr;
  for (auto& x : ctxs_)
    if (x->info().name == r.peer_nic) c = x.get();
  if (!c)
    return Status(Code::kInvalidArgument, fmt::format("rdma handshake names NIC '{}', not used here", r.peer_nic));
  if (!c->usable()) return Status(Code::kUnavailable, fmt::format("rdma NIC {} is down", r.peer_nic));
  if ((r.link_layer == "ib") != c->info().ib())
    return Status(Code::kInvalidArgument, fmt::format("rdma handshake: link layer {} cannot reach {} ({})",
                                                      r.link_layer, r.peer_nic, c->info().ib() ? "ib" : "eth"));
  RtrParams p = rtrParams();
  p.remote_lid = rq.lid;
  p.remote_gid = rq.gid;
  HandshakeReply out;
  out.gid_type = "IB";
  out.qps.gid = c->info().gid;
  if (!c->info().ib()) {
    // One GID of each side, of the same RoCE version and address family:
    // packets of another version or family never reach the other QP.
    size_t ti = 0, mi = 0;
    if (!pickGidPair(r.gids, c->info().gids, ti, mi))
      return Status(Code::kNotSupported,
                    fmt::format("rdma handshake: {} ({}) and {} ({}) share no RoCE GID type and address family",
                                r.local_nic, gidList(r.gids), r.peer_nic, gidList(c->info().gids)));
    p.remote_gid = r.gids[ti].gid;
    p.sgid_index = c->info().gids[mi].index;
    out.gid_index = r.gids[ti].index;
    out.qps.gid = c->info().gids[mi].gid;
    out.gid_type = gidTypeName(c->info().gids[mi].type);
  }
  // One path MTU for both ends: the smaller of both sides' bounds.
  const int path = std::min(mtuBound(*c), rq.mtu);
  p.mtu = mtuFromBytes(path);
  p.max_dest_rd_atomic = responderResources(c->info());
  const uint8_t depth = static_cast<uint8_t>(std::min<int>(initiatorDepth(c->info()), rq.rd_atom));
  Passive mine;
  mine.ctx = c->index();
  mine.from = r.from;
  mine.instance = r.instance;
  std::mt19937 rng(std::random_device{}());
  for (size_t i = 0; i < rq.qpn.size() && s.ok(); ++i) {
    uint32_t my_psn = rng() & 0xffffff;
    s = newQp(*c, mine.qps);
    if (s.ok()) s = connectQp(*c, mine.qps.back(), p, rq.qpn[i], rq.psn[i], my_psn, depth);
    if (s.ok()) {
      out.qps.qpn.push_back(mine.qps.back()->qp_num);
      out.qps.psn.push_back(my_psn);
    }
  }
  if (!s.ok()) {
    destroyPassive(mine);
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(passive_mu_);
    // A re-established endpoint replaces its old QPs; a restarted peer
    // (new instance) leaves all of its old ones behind.
    const std::string key = r.from + "|" + r.key;
    for (auto it = passive_.begin(); it != passive_.end();) {
      if (it->second.from == r.from && (it->first == key || it->second.instance != r.instance)) {
        destroyPassive(it->second);
        it = passive_.erase(it);
      } else {
        ++it;
      }
    }
    passive_[key] = std::move(mine);
    counts_.handshakes_served++;
  }
  out.nic = c->info().name;
  out.qps.lid = c->info().lid;
  out.qps.mtu = path;
  out.qps.rd_atom = p.max_dest_rd_atomic;
  out.qps.init_rd_atom = initiatorDepth(c->info());
  reply = encode(out);
  return Status::OK();
}

Status RdmaTransport::release(const std::string& request, std::string& reply) {
  ReleaseRequest r;
  Status s = decode(request, r);
  if (!s.ok()) return Status(Code::kInvalidArgument, fmt::format("malformed rdma release: {}", s.message()));
  std::lock_guard<std::mutex> lock(passive_mu_);
  auto it = passive_.find(r.from + "|" + r.key);
  if (it != passive_.end() && it->second.instance == r.instance) {
    destroyPassive(it->second);
    passive_.erase(it);
    counts_.passive_released++;
  }
  reply.clear();
  return Status::OK();
}

size_t RdmaTransport::passiveSets() const {
  std::lock_guard<std::mutex> lock(passive_mu_);
  return passive_.size();
}

void RdmaTransport::destroyPassive(Passive& p) {
  for (ibv_qp* q : p.qps) {
    int rc = v_->destroy_qp(q);
    if (rc != 0) HLOG_WARN("rdma: ibv_destroy_qp (passive, from {}): {}", p.from, std::strerror(rc));
  }
  p.qps.clear();
}

}  // namespace hawser::rdma
