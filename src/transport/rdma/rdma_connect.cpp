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
}

// Throws (json or runtime_error) on anything missing or malformed.
void getQps(const json& j, QpSet& q) {
  const json& qpn = j.at("qpn");
  const json& psn = j.at("psn");
  if (!qpn.is_array() || !psn.is_array()) throw std::runtime_error("qpn and psn must be arrays");
  for (auto& x : qpn) q.qpn.push_back(integerValue<uint32_t>(x, "qpn"));
  for (auto& x : psn) q.psn.push_back(integerValue<uint32_t>(x, "psn"));
  if (!gidFromString(j.at("gid").get<std::string>(), q.gid)) throw std::runtime_error("bad gid");
  q.lid = integerAt<uint16_t>(j, "lid");
  q.mtu = integerAt<int>(j, "mtu");
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
  json j = {{"v", 1},
            {"from", r.from},
            {"instance", r.instance},
            {"key", r.key},
            {"local_nic", r.local_nic},
            {"peer_nic", r.peer_nic},
            {"peer_instance", r.peer_instance},
            {"link_layer", r.link_layer}};
  putQps(j, r.qps);
  return j.dump();
}

std::string encode(const HandshakeReply& r) {
  json j = {{"nic", r.nic}};
  putQps(j, r.qps);
  return j.dump();
}

Status decode(const std::string& text, HandshakeRequest& out) {
  return parse(text, [&](const json& j) {
    if (integerAt<int>(j, "v") != 1) throw std::runtime_error("unsupported version");
    out.from = j.at("from").get<std::string>();
    out.instance = j.at("instance").get<std::string>();
    out.key = j.at("key").get<std::string>();
    out.local_nic = j.value("local_nic", std::string());
    out.peer_nic = j.at("peer_nic").get<std::string>();
    out.peer_instance = j.at("peer_instance").get<std::string>();
    out.link_layer = j.at("link_layer").get<std::string>();
    getQps(j, out.qps);
  });
}

Status decode(const std::string& text, HandshakeReply& out) {
  return parse(text, [&](const json& j) {
    out.nic = j.value("nic", std::string());
    getQps(j, out.qps);
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

Status RdmaTransport::newQp(RdmaContext& c, std::vector<ibv_qp*>& qps) {
  ibv_qp* q = nullptr;
  Status s = createQp(c, max_wr_, q);
  if (!s.ok()) return s;
  qps.push_back(q);
  return qpToInit(*v_, q, c.info());
}

Status RdmaTransport::connectQp(RdmaContext& c, ibv_qp* q, RtrParams p, uint32_t remote_qpn, uint32_t remote_psn,
                                uint32_t psn) {
  p.remote_qpn = remote_qpn;
  p.remote_psn = remote_psn;
  Status s = qpToRtr(*v_, q, c.info(), p);
  if (s.ok()) s = qpToRts(*v_, q, c.info(), psn, t_.timeout, t_.retry_cnt, t_.rnr_retry);
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

void RdmaTransport::joinConnectors() {
  std::unique_lock<std::mutex> lock(conn_mu_);
  auto jobs = std::move(connectors_);
  lock.unlock();
  for (auto& j : jobs)
    if (j->thread.joinable()) j->thread.join();
}

Status RdmaTransport::establish(Endpoint& ep, std::vector<ibv_qp*>& qps) {
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
  req.qps.mtu = mtuBytes(c.info().active_mtu);
  std::string text;
  rdma::stats().handshakes_sent++;
  Status s = rpc::call(peer.host, peer.port, kRdmaHandshakeCall.id, encode(req), text,
                       std::chrono::milliseconds(t_.connect_timeout_ms));
  if (!s.ok())
    return fail(Status(s.code(), fmt::format("rdma handshake {} -> {}@{}: {}", c.info().name, pn.name, peer.segment,
                                             s.message())));
  HandshakeReply reply;
  s = decode(text, reply);
  if (!s.ok())
    return fail(Status(Code::kRemoteError, fmt::format("rdma handshake {} -> {}@{}: malformed reply: {}",
                                                       c.info().name, pn.name, peer.segment, s.message())));
  const QpSet& r = reply.qps;
  if (r.qpn.size() != qps.size() || r.psn.size() != qps.size())
    return fail(Status(Code::kRemoteError, fmt::format("rdma handshake {} -> {}@{}: peer answered {} QPs for {}",
                                                       c.info().name, pn.name, peer.segment, r.qpn.size(), qps.size())));
  RtrParams p = rtrParams();
  p.remote_gid = r.gid;
  p.remote_lid = r.lid;
  p.mtu = mtuFromBytes(std::min({mtuBytes(c.info().active_mtu), r.mtu, t_.mtu}));
  for (size_t i = 0; i < qps.size(); ++i) {
    s = connectQp(c, qps[i], p, r.qpn[i], r.psn[i], req.qps.psn[i]);
    if (!s.ok()) return fail(s);
  }
  HLOG_DEBUG("rdma endpoint {} connected ({} QPs, mtu {})", ep.id(), qps.size(), mtuBytes(p.mtu));
  return Status::OK();
}

// ---------------------------------------------------------------- passive side

Status RdmaTransport::serveHandshakes(rpc::Server& server) {
  gate_ = std::make_shared<Gate>();
  gate_->target = this;
  return server.onCall(kRdmaHandshakeCall, [gate = gate_](const std::string& req, std::string& reply) {
    std::shared_lock lock(gate->mu);
    if (!gate->target) return Status(Code::kUnavailable, "rdma transport is not running");
    return gate->target->handshake(req, reply);
  });
}

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
  p.remote_gid = rq.gid;
  p.remote_lid = rq.lid;
  p.mtu = mtuFromBytes(std::min({mtuBytes(c->info().active_mtu), rq.mtu, t_.mtu}));
  Passive mine;
  mine.ctx = c->index();
  mine.from = r.from;
  mine.instance = r.instance;
  std::mt19937 rng(std::random_device{}());
  HandshakeReply out;
  for (size_t i = 0; i < rq.qpn.size() && s.ok(); ++i) {
    uint32_t my_psn = rng() & 0xffffff;
    s = newQp(*c, mine.qps);
    if (s.ok()) s = connectQp(*c, mine.qps.back(), p, rq.qpn[i], rq.psn[i], my_psn);
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
    rdma::stats().handshakes_served++;
  }
  out.nic = c->info().name;
  out.qps.gid = c->info().gid;
  out.qps.lid = c->info().lid;
  out.qps.mtu = mtuBytes(c->info().active_mtu);
  reply = encode(out);
  return Status::OK();
}

void RdmaTransport::destroyPassive(Passive& p) {
  for (ibv_qp* q : p.qps) {
    int rc = v_->destroy_qp(q);
    if (rc != 0) HLOG_WARN("rdma: ibv_destroy_qp (passive, from {}): {}", p.from, std::strerror(rc));
  }
  p.qps.clear();
}

}  // namespace hawser::rdma
