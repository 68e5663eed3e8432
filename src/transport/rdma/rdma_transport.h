// The rdma transport: ibverbs RC QPs, one-sided RDMA READ/WRITE per slice.
//
//   install      discover NICs (rdma_probe.cpp), open a context + PD + CQ on
//                each usable one, start the CQ workers, serve handshakes.
//   register     an MR on every NIC (in parallel; large regions pre-touched
//                in parallel first); per-NIC lkey[]/rkey[] go to the buffer's
//                attrs.rdma; the MRs are the region's registration, which
//                the engine keeps with the region and hands back per task.
//   openPeer     the peer's NICs and each buffer's rkey[] decoded once into a
//                PeerRef; refused (with the reason) when no NIC here shares a
//                link layer with an up NIC there.
//   prepare      per task: the remote buffer's rkey[] from the PeerRef, local
//                lkey[] from the task's region (its registration); cut slices.
//   post         route each slice to a (local NIC, peer NIC) pair: local NIC
//                by the buffer's NUMA node, slices of a task spread over the
//                candidates; the pair's endpoint posts it (rdma_endpoint.cpp).
//   completion   a worker polls the NIC's CQ; an error completion retries the
//                slice on the next NIC pair, up to rdma.retry_limit, then the
//                slice is FAILED with the verbs status named.
//
// Files, one concept each:
//   rdma_transport.cpp  install, shutdown, describe, stats, diagnose
//   rdma_memory.cpp     memory registration (and the map that tears it down)
//   rdma_peer.cpp       openPeer, peer handles, the endpoint table
//   rdma_connect.cpp    the handshake (both sides) and connector threads
//   rdma_route.cpp      NIC pair choice, retries, how a slice ends
//   rdma_worker.cpp     CQ polling and async events
//   rdma_sub_batch.cpp  prepare, post, cancel, idle
//   rdma_endpoint.cpp   QPs towards one peer NIC; rdma_context.cpp one local
//   NIC; rdma_nic.cpp tunables and NIC inspection; rdma_probe.cpp discovery.
//   rdma_testing.h     test seams (hooks, null in production)
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/transport.h"
#include "transport/rdma/rdma_context.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/rdma_memory.h"
#include "transport/rdma/rdma_nic.h"
#include "transport/rdma/rdma_probe.h"
#include "transport/rdma/rdma_stats.h"

namespace hawser::rdma {

class PeerRef;
class RdmaSubBatch;

class RdmaTransport final : public Transport, public EndpointHost {
 public:
  RdmaTransport() = default;
  ~RdmaTransport() override { shutdown(); }

  const char* name() const override { return "rdma"; }
  TransportCaps caps() const override;
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  // An MR on every NIC; returned as the region's registration
  // (MemoryRegistration), which every task in the region brings back.
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override;
  Status unregisterMemory(void* addr, size_t length) override;
  // The peer's NICs and per-buffer rkeys, decoded once. kNotSupported with
  // the reason when it publishes no (or malformed) rdma attributes, or no NIC
  // here shares a link layer with an up NIC there. Idle endpoints to the peer
  // give their QPs back once its last handle goes.
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) override;
  RouteReason absentReason() const override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  // Every NIC found and why it is (not) used; the scan's error if any.
  void diagnose(TransportDiagnosis& out) const override;
  // This transport's counters (rdma_stats.h: countersOf), per NIC index
  // where per NIC.
  Counters stats() const override;

  // EndpointHost
  Status establish(Endpoint& ep, std::vector<ibv_qp*>& qps, bool& peer_gone) override;
  void connectAsync(std::shared_ptr<Endpoint> ep) override;
  void sliceDone(Slice* s) override;
  void sliceFailed(Slice* s, const Status& why, int wc_status) override;
  void sliceCanceled(Slice* s) override;
  bool sliceCanceledFlag(const Slice* s) const override;
  uint32_t maxWrPerQp() const override { return max_wr_; }
  Stats& counters() override { return counts_; }

 private:
  friend class PeerRef;
  friend class RdmaSubBatch;

  // Lets the rpc listener's handler outlive the transport safely.
  struct Gate {
    std::shared_mutex mu;
    RdmaTransport* target = nullptr;
  };
  // QPs created for a peer's endpoint (the passive side of a handshake).
  struct Passive {
    int ctx = -1;
    std::string from, instance;
    std::vector<ibv_qp*> qps;
  };
  struct ConnectJob {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  // rdma_transport.cpp: a context on every usable NIC (kNotSupported: none).
  Status openNics();

  // rdma_peer.cpp
  std::shared_ptr<Endpoint> endpointFor(const std::shared_ptr<const Peer>& peer, int l, int p);
  // Every endpoint, or those towards the peer `key` (segment name#instance).
  std::vector<std::shared_ptr<Endpoint>> endpointsOf(const std::string* key = nullptr);
  void releasePeer(const std::string& key);

  // rdma_connect.cpp
  Status serveHandshakes(ChannelRegistry& server);
  Status handshake(const std::string& request, std::string& reply);
  // The requester closed an endpoint: destroy its passive QPs.
  Status release(const std::string& request, std::string& reply);
  // Tells the peer that endpoint `ep` let its QPs go (rdma.release), on a
  // connector thread; `wait` sends it now (at shutdown), bounded.
  void sendRelease(const Endpoint& ep, bool wait);
  // RTR attributes from the tunables (remote QPN/PSN/GID/LID/MTU left to fill).
  RtrParams rtrParams() const;
  // The largest path MTU this side accepts on `c`: its active MTU, at most rdma.mtu.
  int mtuBound(const RdmaContext& c) const;
  // A new QP on `c`, in INIT, appended to `qps`.
  Status newQp(RdmaContext& c, std::vector<ibv_qp*>& qps);
  // INIT -> RTR -> RTS towards one remote QP, with this side's `psn`, issuing
  // at most `max_rd_atomic` READs at once.
  Status connectQp(RdmaContext& c, ibv_qp* q, RtrParams p, uint32_t remote_qpn, uint32_t remote_psn, uint32_t psn,
                   uint8_t max_rd_atomic);
  void destroyPassive(Passive& p);
  size_t passiveSets() const;
  void joinConnectors();

  // rdma_route.cpp
  bool pathUsable(const Slice* s, int l, int p) const;
  // First-choice pair for a fresh slice; false when no pair is usable.
  bool firstPath(Slice* s);
  // Sets s->local_nic/peer_nic for attempt s->attempts; false if none usable.
  bool pathFor(Slice* s);
  void route(std::vector<Slice*>& slices);
  void finish(Slice* s, TransferState st, const Status& err);

  // rdma_worker.cpp
  void startWorkers();
  // Waits (bounded) for posted work to complete, then stops the workers.
  void stopWorkers();
  void workerLoop(std::vector<RdmaContext*> ctxs);
  void handleAsync(RdmaContext* c);
  // A NIC that died (or whose CQ did) and has not flushed its posted work
  // within rdma.flush_timeout_ms: fail that work over, poll its CQ no more.
  void abandonIfOverdue(RdmaContext* c);

  Tunables t_;
  const VerbsApi* v_ = nullptr;
  // This transport's counters: its endpoints, handshakes, routing, workers
  // and registrations count here (not per process).
  Stats counts_;
  size_t nics_counted_ = 0;  // NICs opened by install: stats() reports their counters, also after shutdown
  uint32_t max_wr_ = 256;
  std::string self_;      // "host:port" of this engine
  std::string instance_;  // nonce of this install
  std::vector<std::unique_ptr<RdmaContext>> ctxs_;
  std::atomic<bool> stopping_{false};
  bool installed_ = false;
  std::atomic<uint64_t> salt_{0};
  std::shared_ptr<Gate> gate_;

  // What install found (diagnose()).
  std::vector<NicReport> reports_;
  std::string scan_error_;

  RegionMap regions_;

  // Connection counters (base/transport_metrics.h); outlives the endpoints below.
  std::shared_ptr<metrics::Registry> metrics_ = std::make_shared<metrics::Registry>();

  std::mutex ep_mu_;
  std::map<std::string, int> peer_handles_;  // live PeerRefs per peer key
  std::map<std::tuple<std::string, int, int>, std::shared_ptr<Endpoint>> endpoints_;

  mutable std::mutex passive_mu_;
  std::map<std::string, Passive> passive_;  // "from|endpoint id" -> QPs

  std::mutex conn_mu_;
  std::list<std::unique_ptr<ConnectJob>> connectors_;

  int wake_fd_ = -1;
  std::atomic<bool> workers_stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace hawser::rdma
