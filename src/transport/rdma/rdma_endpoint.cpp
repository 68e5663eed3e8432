#include "transport/rdma/rdma_endpoint.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_testing.h"

namespace hawser::rdma {

namespace {
constexpr size_t kPostBatch = 32;
}

// ---------------------------------------------------------------- QP bring-up

Status createQp(RdmaContext& ctx, uint32_t max_wr, ibv_qp*& out) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ctx.cq();
  ia.recv_cq = ctx.cq();
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = max_wr;
  ia.cap.max_recv_wr = 1;  // one-sided only: nothing is ever received
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 0;
  out = ctx.verbs().create_qp(ctx.pd(), &ia);
  if (!out)
    return Status(Code::kIoError,
                  fmt::format("rdma {}: ibv_create_qp(max_send_wr={}): {}", ctx.info().name, max_wr,
                              std::strerror(errno)));
  return Status::OK();
}

Status qpToInit(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = nic.port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  int rc = v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0)
    return Status(Code::kIoError,
                  fmt::format("rdma {}: QP {} RESET->INIT: {}", nic.name, qp->qp_num, std::strerror(rc)));
  return Status::OK();
}

Status qpToRtr(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic, const RtrParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = p.remote_qpn;
  a.rq_psn = p.remote_psn;
  // Responder resources for incoming RDMA READs (what the peer was told).
  a.max_dest_rd_atomic = p.max_dest_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.port_num = nic.port;
  a.ah_attr.sl = p.service_level;
  a.ah_attr.src_path_bits = 0;
  if (!nic.ib()) {
    // RoCE: every packet carries a GRH addressed by GIDs.
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = p.remote_gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.sgid_index >= 0 ? p.sgid_index : nic.gid_index);
    a.ah_attr.grh.hop_limit = p.hop_limit;
    a.ah_attr.grh.traffic_class = p.traffic_class;
    a.ah_attr.grh.flow_label = 0;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = p.remote_lid;
  }
  int rc = v.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0)
    return Status(Code::kIoError, fmt::format("rdma {}: QP {} INIT->RTR (remote QPN {}, mtu {}): {}", nic.name,
                                              qp->qp_num, p.remote_qpn, mtuBytes(p.mtu), std::strerror(rc)));
  return Status::OK();
}

uint8_t responderResources(const NicInfo& nic) {
  return static_cast<uint8_t>(std::clamp(nic.dev_attr.max_qp_rd_atom, 0, 16));
}

uint8_t initiatorDepth(const NicInfo& nic) {
  return static_cast<uint8_t>(std::clamp(nic.dev_attr.max_qp_init_rd_atom, 0, 16));
}

Status qpToRts(const VerbsApi& v, ibv_qp* qp, const NicInfo& nic, uint32_t psn, uint8_t timeout, uint8_t retry_cnt,
               uint8_t rnr_retry, uint8_t max_rd_atomic) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = rnr_retry;
  a.sq_psn = psn;
  // Outstanding RDMA READs this QP may issue: within this NIC's initiator
  // depth and the responder resources of the QP at the other end.
  a.max_rd_atomic = max_rd_atomic;
  int rc = v.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0)
    return Status(Code::kIoError,
                  fmt::format("rdma {}: QP {} RTR->RTS: {}", nic.name, qp->qp_num, std::strerror(rc)));
  return Status::OK();
}

// ---------------------------------------------------------------- Endpoint

Endpoint::Endpoint(EndpointHost* host, RdmaContext* ctx, std::shared_ptr<const Peer> peer, int peer_nic,
                   std::string id)
    : host_(host), ctx_(ctx), peer_(std::move(peer)), peer_nic_(peer_nic), id_(std::move(id)) {}

Endpoint::~Endpoint() {
  std::lock_guard<std::mutex> lock(mu_);
  destroyQpsLocked();
}

void Endpoint::destroyQpsLocked() {
  if (!qps_.empty() && metrics.open) metrics.open->add(-1);
  for (Qp& q : qps_) {
    if (!q.qp) continue;
    int rc = ctx_->verbs().destroy_qp(q.qp);
    if (rc != 0) HLOG_WARN("rdma endpoint {}: ibv_destroy_qp: {}", id_, std::strerror(rc));
  }
  qps_.clear();
}

void Endpoint::linkPosted(Slice* s) {
  s->posted_prev = nullptr;
  s->posted_next = posted_;
  if (posted_) posted_->posted_prev = s;
  posted_ = s;
}

void Endpoint::unlinkPosted(Slice* s) {
  if (s->posted_prev) s->posted_prev->posted_next = s->posted_next;
  if (s->posted_next) s->posted_next->posted_prev = s->posted_prev;
  if (posted_ == s) posted_ = s->posted_next;
  s->posted_prev = s->posted_next = nullptr;
}

Endpoint::State Endpoint::state() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

uint32_t Endpoint::outstanding() {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_;
}

bool Endpoint::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_ == 0 && waiting_.empty() && state_ != State::kConnecting;
}

void Endpoint::deliver(Outcome& o) {
  if (o.connect) host_->connectAsync(shared_from_this());
  for (Slice* s : o.canceled) host_->sliceCanceled(s);
  for (auto& [s, why] : o.failed) host_->sliceFailed(s, why, o.peer_gone ? kPeerGone : -1);
}

void Endpoint::settleLocked(Outcome& o) {
  if (state_ != State::kDraining || outstanding_ != 0) return;
  destroyQpsLocked();
  if (!waiting_.empty()) {
    state_ = State::kConnecting;
    o.connect = true;
  } else {
    state_ = State::kIdle;
  }
}

void Endpoint::postLocked(Outcome& o) {
  const uint32_t max_wr = host_->maxWrPerQp();
  std::array<ibv_send_wr, kPostBatch> wrs;
  std::array<ibv_sge, kPostBatch> sges;
  std::array<Slice*, kPostBatch> batch;
  if (state_ == State::kConnected && !waiting_.empty() && ctx_->fatal()) {
    // The NIC died (or its CQ): what would be posted now might never
    // complete. Stop here; the slices go elsewhere.
    Status why(Code::kUnavailable, fmt::format("rdma {}: {}", ctx_->info().name, ctx_->fatalReason()));
    for (Slice* s : waiting_) o.failed.emplace_back(s, why);
    waiting_.clear();
    if (metrics.failures) metrics.failures->add();
    state_ = State::kDraining;
  }
  while (state_ == State::kConnected && !waiting_.empty()) {
    // A QP with room, round-robin.
    size_t qi = qps_.size();
    for (size_t k = 0; k < qps_.size(); ++k) {
      size_t i = (rr_ + k) % qps_.size();
      if (qps_[i].outstanding < max_wr) {
        qi = i;
        break;
      }
    }
    if (qi == qps_.size()) return;  // every QP full: completions will post more
    Qp& q = qps_[qi];
    const int64_t want = static_cast<int64_t>(std::min<size_t>({kPostBatch, max_wr - q.outstanding, waiting_.size()}));
    // Room in the NIC's CQ, taken before posting: every endpoint of the NIC
    // posts into the same CQ, concurrently.
    int64_t room = ctx_->reserveCq(want);
    if (room == 0) {
      testing::call(testing::on_cq_full, *ctx_);
      // Wait for the worker's kick: registered first, then one more look, so
      // that room freed in between is not missed.
      ctx_->addStarved(shared_from_this());
      host_->counters().cq_waits++;
      room = ctx_->reserveCq(want);
      if (room == 0) return;
    }
    rr_ = qi + 1;
    size_t n = 0;
    while (n < static_cast<size_t>(room) && !waiting_.empty()) {
      Slice* s = waiting_.front();
      waiting_.pop_front();
      if (host_->sliceCanceledFlag(s)) {
        o.canceled.push_back(s);
        continue;
      }
      s->qp_index = static_cast<uint32_t>(qi);
      ibv_sge& g = sges[n];
      g.addr = s->local_addr;
      g.length = s->length;
      g.lkey = s->lkey;
      ibv_send_wr& w = wrs[n];
      std::memset(&w, 0, sizeof(w));
      w.wr_id = reinterpret_cast<uint64_t>(s);
      w.sg_list = &g;
      w.num_sge = 1;
      w.opcode = s->is_read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr.rdma.remote_addr = s->remote_addr;
      w.wr.rdma.rkey = s->rkey;
      if (n > 0) wrs[n - 1].next = &w;
      batch[n] = s;
      ++n;
    }
    size_t posted = n;
    if (n > 0) {
      ibv_send_wr* bad = nullptr;
      int rc = ibv_post_send(q.qp, &wrs[0], &bad);
      if (rc != 0) {
        posted = 0;
        while (posted < n && &wrs[posted] != bad) ++posted;
        Status why(Code::kIoError, fmt::format("ibv_post_send on {} QP {}: {}", ctx_->info().name, q.qp->qp_num,
                                               std::strerror(rc)));
        for (size_t i = posted; i < n; ++i) o.failed.emplace_back(batch[i], why);
        HLOG_WARN("rdma endpoint {}: {}; draining", id_, why.message());
        if (state_ == State::kConnected && metrics.failures) metrics.failures->add();
        state_ = State::kDraining;
      }
    }
    if (static_cast<int64_t>(posted) < room) ctx_->releaseCq(room - static_cast<int64_t>(posted));
    for (size_t i = 0; i < posted; ++i) linkPosted(batch[i]);
    q.outstanding += static_cast<uint32_t>(posted);
    outstanding_ += static_cast<uint32_t>(posted);
    if (ctx_->index() < Stats::kMaxNics) host_->counters().wrs_posted[ctx_->index()] += posted;
    if (peer_nic_ < Stats::kMaxNics) host_->counters().peer_nic_wrs[peer_nic_] += posted;
  }
  // A post that failed with nothing outstanding has nothing left to flush.
  settleLocked(o);
}

void Endpoint::submit(std::vector<Slice*>& slices) {
  Outcome o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kClosed) {
      Status why(Code::kUnavailable, "rdma transport is shutting down");
      for (Slice* s : slices) o.failed.emplace_back(s, why);
    } else {
      for (Slice* s : slices) {
        s->ep = this;
        waiting_.push_back(s);
      }
      if (state_ == State::kIdle) {
        state_ = State::kConnecting;
        o.connect = true;
      } else if (state_ == State::kConnected) {
        postLocked(o);
      } else {
        settleLocked(o);
      }
    }
  }
  slices.clear();
  deliver(o);
}

void Endpoint::kick() {
  Outcome o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    postLocked(o);
  }
  deliver(o);
}

void Endpoint::complete(Slice* s, const ibv_wc& wc) {
  Outcome o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->qp_index < qps_.size() && qps_[s->qp_index].outstanding > 0) qps_[s->qp_index].outstanding--;
    if (outstanding_ > 0) outstanding_--;
    unlinkPosted(s);
    ctx_->releaseCq(1);
    if (wc.status != IBV_WC_SUCCESS && state_ == State::kConnected) {
      // The QP is in the error state now: stop posting, let the rest flush,
      // then re-establish.
      HLOG_WARN("rdma endpoint {}: completion {} on QP {}; re-establishing", id_,
                wcStatusName(wc.status), wc.qp_num);
      if (metrics.failures) metrics.failures->add();
      state_ = State::kDraining;
    }
    if (state_ == State::kConnected) {
      postLocked(o);
    } else if (state_ == State::kDraining) {
      settleLocked(o);
    } else if (state_ == State::kClosed && outstanding_ == 0) {
      destroyQpsLocked();
    }
  }
  deliver(o);
  const int nic = ctx_->index();
  if (wc.status == IBV_WC_SUCCESS) {
    host_->sliceDone(s);
  } else {
    Stats& counts = host_->counters();
    if (nic < Stats::kMaxNics) (wc.status == IBV_WC_WR_FLUSH_ERR ? counts.wc_flushes : counts.wc_errors)[nic]++;
    // Only status, wr_id, qp_num and vendor_err are defined on an error
    // completion: nothing else of `wc` is read.
    const char* text = ctx_->verbs().wc_status_str ? ctx_->verbs().wc_status_str(wc.status) : "";
    Status why(Code::kIoError, fmt::format("{} ({}, vendor_err {:#x}) on {} -> {}@{}", wcStatusName(wc.status), text,
                                           wc.vendor_err, ctx_->info().name, peer_->nics[peer_nic_].name,
                                           peer_->segment));
    host_->sliceFailed(s, why, wc.status);
  }
}

void Endpoint::connect() {
  std::vector<ibv_qp*> qps;
  bool peer_gone = false;
  Status st = host_->establish(*this, qps, peer_gone);
  Outcome o;
  o.peer_gone = peer_gone && !st.ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (st.ok() && state_ == State::kConnecting) {
      qps_.clear();
      for (ibv_qp* q : qps) qps_.push_back(Qp{q, 0});
      state_ = State::kConnected;
      handshaken_ = true;
      if (metrics.open) {
        metrics.connects->add();
        metrics.open->add(1);
      }
      rr_ = 0;
      postLocked(o);
    } else {
      for (ibv_qp* q : qps) ctx_->verbs().destroy_qp(q);
      if (!st.ok() && metrics.connect_failures) metrics.connect_failures->add();
      if (st.ok()) st = Status(Code::kUnavailable, "rdma transport is shutting down");
      if (state_ != State::kClosed) state_ = State::kIdle;
      for (Slice* s : waiting_) o.failed.emplace_back(s, st);
      waiting_.clear();
    }
  }
  deliver(o);
}

void Endpoint::purgeCanceled() {
  Outcome o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (host_->sliceCanceledFlag(*it)) {
        o.canceled.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  deliver(o);
}

void Endpoint::close() {
  Outcome o;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kClosed;
    Status why(Code::kUnavailable, "rdma transport is shutting down");
    for (Slice* s : waiting_) o.failed.emplace_back(s, why);
    waiting_.clear();
    // Flush what the NIC still holds: every posted WR completes (FLUSH_ERR).
    for (Qp& q : qps_) {
      if (!q.qp) continue;
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      ctx_->verbs().modify_qp(q.qp, &a, IBV_QP_STATE);
    }
    if (outstanding_ == 0) destroyQpsLocked();
  }
  deliver(o);
}

void Endpoint::abandon(const Status& why) {
  Outcome o;
  uint32_t lost = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Stop the QPs before their slices are reused elsewhere; the device is
    // gone or its CQ broken, so nothing more completes here.
    for (Qp& q : qps_) {
      if (!q.qp) continue;
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      ctx_->verbs().modify_qp(q.qp, &a, IBV_QP_STATE);
    }
    for (Slice* s = posted_; s;) {
      Slice* next = s->posted_next;
      s->posted_prev = s->posted_next = nullptr;
      o.failed.emplace_back(s, why);
      s = next;
      ++lost;
    }
    posted_ = nullptr;
    ctx_->releaseCq(outstanding_);
    outstanding_ = 0;
    for (Qp& q : qps_) q.outstanding = 0;
    if (state_ == State::kConnected && metrics.failures) metrics.failures->add();
    if (state_ != State::kClosed) state_ = State::kDraining;
    settleLocked(o);
    if (state_ == State::kClosed) destroyQpsLocked();
  }
  if (lost) {
    HLOG_ERROR("rdma endpoint {}: {} slice(s) never completed: {}", id_, lost, why.message());
    host_->counters().slices_abandoned += lost;
  }
  deliver(o);
}

bool Endpoint::destroyIfIdle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (outstanding_ != 0 || !waiting_.empty() || state_ == State::kConnecting) return false;
  destroyQpsLocked();
  if (state_ != State::kClosed) state_ = State::kIdle;
  const bool tell = handshaken_;
  handshaken_ = false;
  return tell;
}

bool Endpoint::takeHandshaken() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool was = handshaken_;
  handshaken_ = false;
  return was;
}

}  // namespace hawser::rdma
