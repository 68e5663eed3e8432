// One RDMA NIC in use: its device context, protection domain, completion
// queue and completion channel. MRs live in the transport's region map (one
// lookup yields every NIC's lkey); endpoints own their QPs.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "transport/rdma/rdma_nic.h"
#include "transport/rdma/verbs_api.h"

namespace hawser::rdma {

class Endpoint;

class RdmaContext {
 public:
  RdmaContext(const VerbsApi* v, int index, NicInfo info, ibv_context* ctx);
  ~RdmaContext();
  RdmaContext(const RdmaContext&) = delete;

  // PD, completion channel, CQ of `cq_entries` (capped by the device).
  Status init(uint32_t cq_entries);

  const VerbsApi& verbs() const { return *v_; }
  const NicInfo& info() const { return info_; }
  int index() const { return index_; }
  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* channel() const { return channel_; }
  int64_t cqCapacity() const { return cq_cap_; }

  // False after a fatal async event (DEVICE_FATAL, CQ_ERR) or while the
  // port is down.
  bool usable() const { return !fatal_.load() && !port_down_.load(); }
  // The NIC (or its CQ) died: no new work goes to it. The first call
  // records when and why; flushes are awaited until flushDeadline().
  void markFatal(const std::string& why);
  bool fatal() const { return fatal_.load(); }
  std::chrono::steady_clock::time_point fatalSince() const;
  std::string fatalReason() const;
  void setPortDown(bool down) { port_down_.store(down); }
  // Its CQ is no longer polled: what was posted and never flushed was
  // failed over (worker thread only).
  bool abandoned() const { return abandoned_.load(); }
  void setAbandoned() { abandoned_.store(true); }

  // Work requests posted on this NIC whose completion is not yet polled;
  // never more than the CQ holds, so the CQ never overruns. Room is
  // reserved before posting (all endpoints of the NIC compete for it):
  // reserveCq() takes up to `want` entries atomically and returns how many
  // (0: the CQ is full); releaseCq() gives back what was reserved and not
  // posted, or what completed.
  int64_t reserveCq(int64_t want);
  void releaseCq(int64_t n) { outstanding.fetch_sub(n); }
  std::atomic<int64_t> outstanding{0};

  // Endpoints waiting for CQ room; re-kicked by the worker after it polls
  // completions of this NIC. An endpoint registers before it checks the room
  // one last time, so a completion polled in between always finds it here.
  void addStarved(const std::shared_ptr<Endpoint>& ep);
  std::vector<std::shared_ptr<Endpoint>> takeStarved();

  // Unacknowledged CQ events (acked before the CQ is destroyed).
  void ackEvents(unsigned n);

 private:
  const VerbsApi* v_;
  int index_;
  NicInfo info_;
  ibv_context* ctx_;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  int64_t cq_cap_ = 0;
  std::atomic<bool> fatal_{false};
  std::atomic<bool> port_down_{false};
  std::atomic<bool> abandoned_{false};
  mutable std::mutex fatal_mu_;
  std::chrono::steady_clock::time_point fatal_since_{};
  std::string fatal_why_;
  std::mutex starved_mu_;
  std::vector<std::shared_ptr<Endpoint>> starved_;
};

}  // namespace hawser::rdma
