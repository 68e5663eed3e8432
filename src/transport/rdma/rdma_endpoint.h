// Endpoints: the RC QPs from one local NIC to one NIC of one peer engine,
// and the slices (one RDMA READ/WRITE work request each) that travel on them.
//
// An endpoint is created lazily by the first slice routed to its NIC pair.
// That slice (and every one queued meanwhile) waits while one connector
// thread creates `qps_per_peer` QPs, agrees with the peer over its rpc
// listener on everything both ends of an RC pair must program alike (crossed
// PSNs, one path MTU, READ depth within the other end's resources, GIDs of
// one type and family) and moves the QPs INIT -> RTR -> RTS; concurrent
// first use thus makes exactly one endpoint and one handshake. Slices are
// posted round-robin over the QPs, at most `max_wr` outstanding per QP and
// never more than the NIC's CQ holds (room reserved before each post). A
// failed completion or post puts the endpoint into draining: nothing more is
// posted, the QPs' remaining work flushes, and once nothing is outstanding
// the QPs are destroyed; queued slices then trigger a fresh handshake.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/transport_metrics.h"
#include "hawser/status.h"
#include "hawser/types.h"
#include "transport/rdma/rdma_context.h"

namespace hawser {
class Task;
}

namespace hawser::rdma {

// One NIC of a peer, as published in its descriptor's transports.rdma.nics.
struct PeerNic {
  std::string name;
  ibv_gid gid{};
  uint16_t lid = 0;
  bool ib = false;
  int numa = -1;
  int mtu = 4096;
  bool up = true;
};

struct Peer {
  std::string key;       // segment name + "#" + instance
  std::string segment;   // "host:port"
  std::string host;
  uint16_t port = 0;
  std::string instance;  // the peer transport's install nonce
  std::vector<PeerNic> nics;
};

class Endpoint;
struct SubBatchState;

// Per task: what every slice of it needs.
struct TaskCtx {
  Task* task = nullptr;
  std::shared_ptr<const Peer> peer;
  const uint32_t* lkeys = nullptr;  // local region, per local NIC (0 = not registered there): its registration's
  std::vector<uint32_t> rkeys;  // remote buffer, per peer NIC (0 = unusable)
  int local_numa = -1;
  int remote_numa = -1;
  uint64_t salt = 0;  // spreads tasks over NICs
};

struct Slice {
  TaskCtx* tc = nullptr;
  SubBatchState* sb = nullptr;  // its sub-batch's counters (rdma_sub_batch.h)
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint32_t length = 0;
  uint32_t index = 0;  // within the task
  bool is_read = false;
  // Routing of the current attempt.
  uint32_t attempts = 0;
  int l0 = -1, p0 = -1;  // first-choice NIC pair
  int local_nic = -1, peer_nic = -1;
  uint32_t lkey = 0, rkey = 0;
  Endpoint* ep = nullptr;
  uint32_t qp_index = 0;
  // Its endpoint's list of posted slices (rdma_endpoint.cpp).
  Slice* posted_prev = nullptr;
  Slice* posted_next = nullptr;
  // Errors seen so far (the first non-flush one is reported). Flushes
  // (another WR's error, a shutdown) use no attempt; they are bounded apart.
  Status first_error;
  bool first_is_flush = false;
  Status last_error;
  uint32_t flushes = 0;
  bool retrying = false;  // the next route() is a retry after an error (counted per NIC)
};

// What an endpoint needs from the transport.
struct Stats;

// sliceFailed's `wc_status` for a slice whose endpoint's handshake met a
// refused connection (no verbs status is negative).
constexpr int kPeerGone = -2;

class EndpointHost {
 public:
  virtual ~EndpointHost() = default;
  // Creates and connects the QPs of `ep` through a handshake with the peer
  // (blocking: runs on a connector thread). On success `qps` are in RTS.
  // `peer_gone` is set when the peer's address refused the connection:
  // nothing listens there, and no other NIC pair reaches a process that is
  // gone.
  virtual Status establish(Endpoint& ep, std::vector<ibv_qp*>& qps, bool& peer_gone) = 0;
  virtual void connectAsync(std::shared_ptr<Endpoint> ep) = 0;
  virtual void sliceDone(Slice* s) = 0;
  // A slice failed on this endpoint: retry elsewhere or finish it FAILED.
  // `wc_status` is the verbs completion status, -1 when the failure was
  // not a completion (post or handshake error), or kPeerGone.
  virtual void sliceFailed(Slice* s, const Status& why, int wc_status) = 0;
  virtual void sliceCanceled(Slice* s) = 0;
  virtual bool sliceCanceledFlag(const Slice* s) const = 0;
  virtual uint32_t maxWrPerQp() const = 0;
  // The host transport's counters (rdma_stats.h), which its endpoints count into.
  virtual Stats& counters() = 0;
};

class Endpoint : public std::enable_shared_from_this<Endpoint> {
 public:
  enum class State { kIdle, kConnecting, kConnected, kDraining, kClosed };

  Endpoint(EndpointHost* host, RdmaContext* ctx, std::shared_ptr<const Peer> peer, int peer_nic, std::string id);
  ~Endpoint();

  RdmaContext& context() const { return *ctx_; }
  const Peer& peer() const { return *peer_; }
  int peerNic() const { return peer_nic_; }
  const std::string& id() const { return id_; }

  // Queues slices and posts what fits; starts the handshake on first use.
  void submit(std::vector<Slice*>& slices);
  // Completion of a slice posted here (worker thread).
  void complete(Slice* s, const ibv_wc& wc);
  // Connector thread body.
  void connect();
  // Posts what waits, if connected (after the CQ had no room).
  void kick();
  // Removes waiting slices of canceled sub-batches and finishes them.
  void purgeCanceled();
  // Shutdown: fail what waits, flush what is posted (QPs to ERR).
  void close();
  // The NIC died (or its CQ) and did not flush what was posted here within
  // rdma.flush_timeout_ms: the QPs go to ERR and are destroyed, and every
  // slice still posted fails with `why` (retried elsewhere). Only from the
  // worker that polls this NIC's CQ, which polls it no more afterwards.
  void abandon(const Status& why);
  // Outstanding (posted, not completed) work requests.
  uint32_t outstanding();
  bool idle();
  State state();
  // Destroys the QPs if nothing is outstanding (the last handle on the peer
  // went); true when it did and the peer holds QPs for them (tell it).
  bool destroyIfIdle();
  // Whether the peer holds passive QPs for this endpoint (a handshake
  // succeeded since the last release); clears the mark.
  bool takeHandshaken();

  // Its connection counters (peer label: the segment), set by the transport
  // before first use: a connection is a set of QPs (hawser_connections).
  metrics::ConnectionMetrics metrics;

 private:
  struct Qp {
    ibv_qp* qp = nullptr;
    uint32_t outstanding = 0;
  };
  // What a step under mu_ decided, acted upon once mu_ is released.
  struct Outcome {
    std::vector<std::pair<Slice*, Status>> failed;  // to retry elsewhere or fail
    std::vector<Slice*> canceled;
    bool connect = false;  // start a handshake
    bool peer_gone = false;  // `failed` met a peer whose address refused the handshake
  };
  void deliver(Outcome& o);
  // Locked helpers.
  void postLocked(Outcome& o);
  // Draining and nothing outstanding: destroy the QPs, reconnect if slices
  // wait, else idle.
  void settleLocked(Outcome& o);
  void destroyQpsLocked();
  void linkPosted(Slice* s);
  void unlinkPosted(Slice* s);

  EndpointHost* host_;
  RdmaContext* ctx_;
  std::shared_ptr<const Peer> peer_;
  int peer_nic_;
  std::string id_;

  std::mutex mu_;
  State state_ = State::kIdle;
  std::vector<Qp> qps_;
  std::deque<Slice*> waiting_;
  Slice* posted_ = nullptr;  // posted, completion not yet handled (intrusive list)
  bool handshaken_ = false;  // the peer holds passive QPs for this endpoint
  size_t rr_ = 0;
  uint32_t outstanding_ = 0;
};

// Moves a fresh QP RESET -> INIT (port, pkey 0, remote read/write access).
Status qpToInit(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic);
// INIT -> RTR towards (remote QPN, PSN, GID/LID) with `mtu`, from the GID
// at `sgid_index` (-1: the NIC's chosen one), serving `max_dest_rd_atomic`
// READs at once.
struct RtrParams {
  uint32_t remote_qpn = 0;
  uint32_t remote_psn = 0;
  ibv_gid remote_gid{};
  uint16_t remote_lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  int sgid_index = -1;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  uint8_t hop_limit = 64;
};
Status qpToRtr(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic, const RtrParams& p);
// RTR -> RTS with the local PSN, the timeout/retry attributes and the
// number of READs it may have outstanding (max_rd_atomic).
Status qpToRts(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic, uint32_t psn, uint8_t timeout, uint8_t retry_cnt,
               uint8_t rnr_retry, uint8_t max_rd_atomic);
// What this NIC can program: READs it serves at once per QP (responder
// resources, max_qp_rd_atom) and READs it may issue at once per QP
// (initiator depth, max_qp_init_rd_atom), both at most 16.
uint8_t responderResources(const NicInfo& nic);
uint8_t initiatorDepth(const NicInfo& nic);
// An RC QP on `ctx` (send and recv CQ = the NIC's CQ).
Status createQp(RdmaContext& ctx, uint32_t max_wr, ibv_qp*& out);

}  // namespace hawser::rdma
