#include "transport/rdma/rdma_context.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"

namespace hawser::rdma {

RdmaContext::RdmaContext(const VerbsApi* v, int index, NicInfo info, ibv_context* ctx)
    : v_(v), index_(index), info_(std::move(info)), ctx_(ctx) {}

RdmaContext::~RdmaContext() {
  if (cq_) {
    int rc = v_->destroy_cq(cq_);
    if (rc != 0) HLOG_WARN("rdma {}: ibv_destroy_cq: {}", info_.name, std::strerror(rc));
  }
  if (channel_) v_->destroy_comp_channel(channel_);
  if (pd_) {
    int rc = v_->dealloc_pd(pd_);
    if (rc != 0) HLOG_WARN("rdma {}: ibv_dealloc_pd: {}", info_.name, std::strerror(rc));
  }
  if (ctx_) v_->close_device(ctx_);
}

Status RdmaContext::init(uint32_t cq_entries) {
  pd_ = v_->alloc_pd(ctx_);
  if (!pd_) return Status(Code::kIoError, fmt::format("rdma {}: ibv_alloc_pd: {}", info_.name, std::strerror(errno)));
  channel_ = v_->create_comp_channel(ctx_);
  if (!channel_)
    return Status(Code::kIoError,
                  fmt::format("rdma {}: ibv_create_comp_channel: {}", info_.name, std::strerror(errno)));
  // The worker waits on the channel with poll(); never block in get_cq_event.
  int fl = fcntl(channel_->fd, F_GETFL);
  if (fl >= 0) fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK);
  fl = fcntl(ctx_->async_fd, F_GETFL);
  if (fl >= 0) fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
  int cqe = static_cast<int>(std::min<int64_t>(cq_entries, info_.dev_attr.max_cqe > 0 ? info_.dev_attr.max_cqe : cq_entries));
  cq_ = v_->create_cq(ctx_, cqe, this, channel_, 0);
  if (!cq_)
    return Status(Code::kIoError,
                  fmt::format("rdma {}: ibv_create_cq({}): {}", info_.name, cqe, std::strerror(errno)));
  cq_cap_ = std::max(1, cq_->cqe);
  return Status::OK();
}

int64_t RdmaContext::reserveCq(int64_t want) {
  int64_t cur = outstanding.load();
  for (;;) {
    const int64_t room = cq_cap_ - cur;
    if (room <= 0 || want <= 0) return 0;
    const int64_t take = std::min(want, room);
    if (outstanding.compare_exchange_weak(cur, cur + take)) return take;
  }
}

void RdmaContext::markFatal(const std::string& why) {
  std::lock_guard<std::mutex> lock(fatal_mu_);
  if (fatal_.load()) return;
  fatal_since_ = std::chrono::steady_clock::now();
  fatal_why_ = why;
  fatal_.store(true);
}

std::chrono::steady_clock::time_point RdmaContext::fatalSince() const {
  std::lock_guard<std::mutex> lock(fatal_mu_);
  return fatal_since_;
}

std::string RdmaContext::fatalReason() const {
  std::lock_guard<std::mutex> lock(fatal_mu_);
  return fatal_why_;
}

void RdmaContext::addStarved(const std::shared_ptr<Endpoint>& ep) {
  std::lock_guard<std::mutex> lock(starved_mu_);
  for (auto& e : starved_)
    if (e == ep) return;
  starved_.push_back(ep);
}

std::vector<std::shared_ptr<Endpoint>> RdmaContext::takeStarved() {
  std::lock_guard<std::mutex> lock(starved_mu_);
  std::vector<std::shared_ptr<Endpoint>> out;
  out.swap(starved_);
  return out;
}

void RdmaContext::ackEvents(unsigned n) {
  if (n) v_->ack_cq_events(cq_, n);
}

}  // namespace hawser::rdma
