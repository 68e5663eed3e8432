// Routing: which (local NIC, peer NIC) pair carries a slice, and how a slice
// ends: done, canceled, refused at once (an error no other path changes), or
// failed and retried on the next pair until rdma.retry_limit, then FAILED
// naming the first verbs error; a peer whose address refuses the handshake
// is gone, and its slices fail at once. A flush (another WR's error, a drain) uses
// no attempt: the slice is posted again.
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_sub_batch.h"
#include "transport/rdma/rdma_transport.h"

namespace hawser::rdma {

bool RdmaTransport::pathUsable(const Slice* s, int l, int p) const {
  const TaskCtx& tc = *s->tc;
  const RdmaContext& c = *ctxs_[static_cast<size_t>(l)];
  const PeerNic& pn = tc.peer->nics[static_cast<size_t>(p)];
  return c.usable() && tc.lkeys[static_cast<size_t>(l)] != 0 && pn.up && tc.rkeys[static_cast<size_t>(p)] != 0 &&
         pn.ib == c.info().ib();
}

bool RdmaTransport::firstPath(Slice* s) {
  const TaskCtx& tc = *s->tc;
  const int L = static_cast<int>(ctxs_.size()), P = static_cast<int>(tc.peer->nics.size());
  const uint64_t spread = tc.salt + s->index;
  // Local NICs on the buffer's NUMA node first.
  std::vector<int> local;
  for (int l = 0; l < L; ++l)
    if (ctxs_[l]->usable() && tc.lkeys[l] != 0 && tc.local_numa >= 0 && ctxs_[l]->info().numa == tc.local_numa)
      local.push_back(l);
  if (local.empty())
    for (int l = 0; l < L; ++l)
      if (ctxs_[l]->usable() && tc.lkeys[l] != 0) local.push_back(l);
  if (local.empty()) return false;
  const int l0 = local[spread % local.size()];
  // Peer NICs near the remote buffer first; among them, the same rail.
  std::vector<int> peer;
  for (int p = 0; p < P; ++p)
    if (pathUsable(s, l0, p) && tc.remote_numa >= 0 && tc.peer->nics[p].numa == tc.remote_numa) peer.push_back(p);
  if (peer.empty())
    for (int p = 0; p < P; ++p)
      if (pathUsable(s, l0, p)) peer.push_back(p);
  if (peer.empty()) {
    // This local NIC reaches none: any usable pair.
    for (int l = 0; l < L && peer.empty(); ++l)
      for (int p = 0; p < P; ++p)
        if (pathUsable(s, l, p)) {
          s->l0 = l;
          s->p0 = p;
          return true;
        }
    return false;
  }
  int p0;
  if (peer.size() == local.size() && std::find(peer.begin(), peer.end(), l0) != peer.end()) {
    p0 = l0;  // as many NICs at both ends: rail-aligned (NIC i talks to NIC i)
  } else {
    // Unequal counts: consecutive slices walk every (local, peer) pair, so
    // the peer's NICs are striped over too.
    p0 = peer[(spread / local.size()) % peer.size()];
  }
  s->l0 = l0;
  s->p0 = p0;
  return true;
}

bool RdmaTransport::pathFor(Slice* s) {
  const int L = static_cast<int>(ctxs_.size()), P = static_cast<int>(s->tc->peer->nics.size());
  const int pairs = L * P;
  // Attempt k walks every pair, changing both NICs between consecutive
  // attempts when it can: (l0,p0), (l0+1,p0+1), (l0,p0+1), (l0+1,p0), ...
  for (int probe = 0; probe < pairs; ++probe) {
    int idx = static_cast<int>((s->attempts + static_cast<uint32_t>(probe)) % static_cast<uint32_t>(pairs));
    int l = (s->l0 + idx % L) % L;
    int p = (s->p0 + idx / L + idx % L) % P;
    if (pathUsable(s, l, p)) {
      s->local_nic = l;
      s->peer_nic = p;
      return true;
    }
  }
  return false;
}

void RdmaTransport::route(std::vector<Slice*>& slices) {
  std::map<std::tuple<const Peer*, int, int>, std::pair<std::shared_ptr<Endpoint>, std::vector<Slice*>>> groups;
  for (Slice* s : slices) {
    if (stopping_.load()) {
      finish(s, TransferState::kFailed, Status(Code::kUnavailable, "rdma transport is shutting down"));
      continue;
    }
    if (sliceCanceledFlag(s)) {
      sliceCanceled(s);
      continue;
    }
    if (s->l0 < 0 && !firstPath(s)) {
      finish(s, TransferState::kFailed,
             Status(Code::kUnavailable, fmt::format("no usable NIC pair towards segment '{}'", s->tc->peer->segment)));
      continue;
    }
    if (!pathFor(s)) {
      Status why = s->first_error.ok() ? Status(Code::kUnavailable, "no usable NIC pair left") : s->first_error;
      finish(s, TransferState::kFailed,
             Status(why.code(), fmt::format("rdma {} of {} bytes to segment '{}' failed: no usable NIC pair left "
                                            "after {} attempt(s); first error: {}",
                                            s->is_read ? "READ" : "WRITE", s->length, s->tc->peer->segment,
                                            s->attempts, why.message())));
      continue;
    }
    if (s->retrying) {
      s->retrying = false;
      if (s->local_nic < Stats::kMaxNics) counts_.retries_to[s->local_nic]++;
    }
    s->lkey = s->tc->lkeys[static_cast<size_t>(s->local_nic)];
    s->rkey = s->tc->rkeys[static_cast<size_t>(s->peer_nic)];
    auto& g = groups[std::make_tuple(s->tc->peer.get(), s->local_nic, s->peer_nic)];
    if (!g.first) g.first = endpointFor(s->tc->peer, s->local_nic, s->peer_nic);
    g.second.push_back(s);
  }
  slices.clear();
  for (auto& [k, g] : groups) g.first->submit(g.second);
}

void RdmaTransport::finish(Slice* s, TransferState st, const Status& err) {
  Task* task = s->tc->task;
  const uint64_t bytes = st == TransferState::kCompleted ? s->length : 0;
  // Not in flight any more before the engine can see the task finish, so a
  // freeBatchID right after the wait never finds it busy.
  s->sb->inflight.fetch_sub(1, std::memory_order_acq_rel);
  task->completeSlice(st, bytes, err);
}

void RdmaTransport::sliceDone(Slice* s) { finish(s, TransferState::kCompleted, Status::OK()); }

void RdmaTransport::sliceCanceled(Slice* s) {
  finish(s, TransferState::kCanceled, Status(Code::kUnavailable, "canceled before it was posted"));
}

namespace {

// Flushes one slice may see before it fails anyway (each one is another
// WR's error or a drain; this bounds a NIC that flushes without end).
constexpr uint32_t kMaxFlushes = 64;

// A completion status that no other QP or NIC pair changes, and the code a
// slice that met it fails with (kOk: retry it).
Code deterministic(int wc_status) {
  switch (wc_status) {
    case IBV_WC_REM_ACCESS_ERR: return Code::kOutOfRange;    // the target refuses this range (rkey, bounds, access)
    case IBV_WC_REM_INV_REQ_ERR: return Code::kRemoteError;  // the target refuses the request itself
    case IBV_WC_LOC_PROT_ERR: return Code::kNotRegistered;   // the local range is not (or no longer) registered
    case IBV_WC_LOC_LEN_ERR: return Code::kInvalidArgument;  // the request exceeds what the QP takes
    default: return Code::kOk;
  }
}

}  // namespace

void RdmaTransport::sliceFailed(Slice* s, const Status& why, int wc_status) {
  const bool flush = wc_status == IBV_WC_WR_FLUSH_ERR;
  if (s->first_error.ok() || (s->first_is_flush && !flush)) {
    s->first_error = why;
    s->first_is_flush = flush;
  }
  s->last_error = why;
  if (flush) {
    s->flushes++;
  } else {
    s->attempts++;
  }
  if (sliceCanceledFlag(s)) {
    sliceCanceled(s);
    return;
  }
  const char* op = s->is_read ? "READ" : "WRITE";
  const Code refused = deterministic(wc_status);
  if (refused != Code::kOk) {
    counts_.slices_refused++;
    counts_.slices_failed++;
    finish(s, TransferState::kFailed,
           Status(refused, fmt::format("rdma {} of {} bytes [{:#x} -> {:#x}] on segment '{}' refused: {} (not "
                                       "retried: no other path changes it)",
                                       op, s->length, s->local_addr, s->remote_addr, s->tc->peer->segment,
                                       why.message())));
    return;
  }
  if (wc_status == kPeerGone) {
    // Every NIC pair's handshake goes to the same rpc listener, which is
    // gone: retrying would only repeat the refusal (a killed peer's slices
    // once took rdma.retry_limit handshakes each).
    std::string msg = fmt::format("rdma {} of {} bytes [{:#x} -> {:#x}] on segment '{}' failed: the peer is gone "
                                  "({}; not retried: no NIC pair reaches it)",
                                  op, s->length, s->local_addr, s->remote_addr, s->tc->peer->segment, why.message());
    if (s->first_error.message() != why.message()) msg += fmt::format("; first: {}", s->first_error.message());
    counts_.slices_failed++;
    finish(s, TransferState::kFailed, Status(Code::kUnavailable, msg));
    return;
  }
  if (stopping_.load() || s->attempts > t_.retry_limit || s->flushes > kMaxFlushes) {
    std::string msg = fmt::format("rdma {} of {} bytes [{:#x} -> {:#x}] on segment '{}' failed after {} attempt(s): {}",
                                  op, s->length, s->local_addr, s->remote_addr, s->tc->peer->segment, s->attempts,
                                  s->first_error.message());
    if (s->attempts > 1 && s->last_error.message() != s->first_error.message())
      msg += fmt::format("; last: {}", s->last_error.message());
    if (s->flushes > kMaxFlushes) msg += fmt::format(" (flushed {} times)", s->flushes);
    if (stopping_.load()) msg += " (transport shutting down)";
    counts_.slices_failed++;
    finish(s, TransferState::kFailed, Status(s->first_error.code(), msg));
    return;
  }
  if (flush) {
    // Not this slice's fault: posted again, on the same pair once its
    // endpoint reconnected (or the next usable one).
    counts_.slice_requeues++;
  } else {
    counts_.slice_retries++;
    s->retrying = true;
    s->tc->task->countRetry();
  }
  HLOG_DEBUG("rdma: {} slice ({} attempt(s), {} flush(es)): {}", flush ? "re-posting" : "retrying", s->attempts,
             s->flushes, why.message());
  std::vector<Slice*> one{s};
  route(one);
}

bool RdmaTransport::sliceCanceledFlag(const Slice* s) const {
  return s->sb->canceled.load(std::memory_order_acquire);
}

}  // namespace hawser::rdma
