// CQ workers: each polls the CQs of its share of the NICs (spinning briefly,
// then sleeping on the completion channels), hands completions to their
// endpoints and handles the NICs' async events (fatal, CQ error, port
// down/up). A NIC that died, or whose CQ did, gets rdma.flush_timeout_ms to
// flush what was posted on it; what it never flushed is then failed over to
// other NICs and its CQ is polled no more.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/rdma/rdma_stats.h"
#include "transport/rdma/rdma_testing.h"
#include "transport/rdma/rdma_transport.h"

namespace hawser::rdma {

void RdmaTransport::startWorkers() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  uint32_t w = t_.workers ? t_.workers : std::min<uint32_t>(static_cast<uint32_t>(ctxs_.size()), 4);
  w = std::max<uint32_t>(1, std::min<uint32_t>(w, static_cast<uint32_t>(ctxs_.size())));
  for (uint32_t i = 0; i < w; ++i) {
    std::vector<RdmaContext*> mine;
    for (size_t c = i; c < ctxs_.size(); c += w) mine.push_back(ctxs_[c].get());
    workers_.emplace_back([this, mine] { workerLoop(mine); });
  }
}

void RdmaTransport::stopWorkers() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    int64_t left = 0;
    for (auto& c : ctxs_) left += c->outstanding.load();
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      HLOG_ERROR("rdma shutdown: {} work request(s) never completed; destroying their QPs anyway", left);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  workers_stop_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof(one));
    (void)r;
  }
  for (auto& w : workers_) w.join();
  workers_.clear();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

void RdmaTransport::handleAsync(RdmaContext* c) {
  ibv_async_event ev;
  while (v_->get_async_event(c->ctx(), &ev) == 0) {
    const char* what = v_->event_type_str ? v_->event_type_str(ev.event_type) : "";
    switch (ev.event_type) {
      case IBV_EVENT_DEVICE_FATAL:
        HLOG_ERROR("rdma {}: async event DEVICE_FATAL ({}); NIC no longer used", c->info().name, what);
        c->markFatal("the device reported a fatal error (IBV_EVENT_DEVICE_FATAL)");
        counts_.nic_failures++;
        break;
      case IBV_EVENT_CQ_ERR:
        // The CQ overran or failed: completions are lost from now on, so the
        // NIC can carry nothing more.
        HLOG_ERROR("rdma {}: async event CQ_ERR ({}); its CQ is in error, NIC no longer used", c->info().name, what);
        c->markFatal("its completion queue failed (IBV_EVENT_CQ_ERR)");
        counts_.nic_failures++;
        break;
      case IBV_EVENT_PORT_ERR:
        HLOG_WARN("rdma {}: port {} down ({})", c->info().name, ev.element.port_num, what);
        c->setPortDown(true);
        break;
      case IBV_EVENT_PORT_ACTIVE:
        HLOG_INFO("rdma {}: port {} active again", c->info().name, ev.element.port_num);
        c->setPortDown(false);
        break;
      default:
        HLOG_WARN("rdma {}: async event {} ({})", c->info().name, static_cast<int>(ev.event_type), what);
        break;
    }
    v_->ack_async_event(&ev);
  }
}

void RdmaTransport::abandonIfOverdue(RdmaContext* c) {
  if (!c->fatal() || c->abandoned()) return;
  if (std::chrono::steady_clock::now() - c->fatalSince() < std::chrono::milliseconds(t_.flush_timeout_ms)) return;
  c->setAbandoned();
  const Status why(Code::kIoError, fmt::format("rdma {}: {}; no completion came within rdma.flush_timeout_ms ({} ms)",
                                              c->info().name, c->fatalReason(), t_.flush_timeout_ms));
  for (auto& ep : endpointsOf())
    if (&ep->context() == c) ep->abandon(why);
  c->takeStarved();  // nothing frees room here any more
}

void RdmaTransport::workerLoop(std::vector<RdmaContext*> ctxs) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  auto drain = [&](RdmaContext* c) {
    int total = 0;
    if (c->abandoned()) return 0;
    for (;;) {
      int n = ibv_poll_cq(c->cq(), kBatch, wc);
      if (n < 0) {
        HLOG_ERROR("rdma {}: ibv_poll_cq failed ({})", c->info().name, n);
        break;
      }
      for (int i = 0; i < n; ++i) {
        auto* s = reinterpret_cast<Slice*>(wc[i].wr_id);
        s->ep->complete(s, wc[i]);
      }
      total += n;
      if (n < kBatch) break;
    }
    if (total > 0) {
      for (auto& ep : c->takeStarved()) ep->kick();
      testing::call(testing::after_drain, *c);
    }
    return total;
  };
  std::vector<pollfd> fds;
  for (RdmaContext* c : ctxs) {
    fds.push_back(pollfd{c->channel()->fd, POLLIN, 0});
    fds.push_back(pollfd{c->ctx()->async_fd, POLLIN, 0});
  }
  fds.push_back(pollfd{wake_fd_, POLLIN, 0});
  while (!workers_stop_.load()) {
    int got = 0;
    for (RdmaContext* c : ctxs) abandonIfOverdue(c);
    for (RdmaContext* c : ctxs) got += drain(c);
    if (got > 0) continue;
    // Spin briefly: completions of a busy NIC arrive microseconds apart.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(t_.poll_spin_us);
    while (got == 0 && std::chrono::steady_clock::now() < spin_until && !workers_stop_.load()) {
      for (RdmaContext* c : ctxs) got += drain(c);
      if (got == 0) std::this_thread::yield();
    }
    if (got > 0) continue;
    // Sleep on the completion channels: arm, re-poll (a completion may have
    // landed before the arm), then wait.
    for (RdmaContext* c : ctxs) ibv_req_notify_cq(c->cq(), 0);
    for (RdmaContext* c : ctxs) got += drain(c);
    if (got > 0) continue;
    for (auto& f : fds) f.revents = 0;
    int rc = ::poll(fds.data(), fds.size(), 200);
    if (rc <= 0) continue;
    for (size_t i = 0; i < ctxs.size(); ++i) {
      RdmaContext* c = ctxs[i];
      if (fds[2 * i].revents & POLLIN) {
        ibv_cq* cq = nullptr;
        void* cq_ctx = nullptr;
        unsigned events = 0;
        while (v_->get_cq_event(c->channel(), &cq, &cq_ctx) == 0) ++events;
        c->ackEvents(events);
      }
      if (fds[2 * i + 1].revents & POLLIN) handleAsync(c);
    }
    // wake_fd_ is only written at shutdown and left readable for every worker.
  }
}

}  // namespace hawser::rdma
