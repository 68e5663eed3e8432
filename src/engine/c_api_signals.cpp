// The C API's signals and notification outcomes (hawser/c_api.h, "Signals").
#include <chrono>
#include <string>
#include <vector>

#include "engine/c_api_util.h"

namespace {

using namespace hawser::capi;
using hawser::Code;

static_assert(HAWSER_SIGNAL_COMPLETED == int(hawser::SignalState::kCompleted) &&
              HAWSER_SIGNAL_FAILED == int(hawser::SignalState::kFailed) &&
              HAWSER_SIGNAL_TIMEOUT == int(hawser::SignalState::kTimeout));
static_assert(HAWSER_SIGNAL_REASON_NONE == int(hawser::SignalReason::kNone) &&
              HAWSER_SIGNAL_REASON_TRANSFER_FAILED == int(hawser::SignalReason::kTransferFailed) &&
              HAWSER_SIGNAL_REASON_CANCELED == int(hawser::SignalReason::kCanceled) &&
              HAWSER_SIGNAL_REASON_REFUSED == int(hawser::SignalReason::kRefused) &&
              HAWSER_SIGNAL_REASON_PEER_LOST == int(hawser::SignalReason::kPeerLost) &&
              HAWSER_SIGNAL_REASON_OVERFLOW == int(hawser::SignalReason::kOverflow));
static_assert(HAWSER_NOTIFY_KIND_DELIVERED == int(hawser::NotifyKind::kDelivered) &&
              HAWSER_NOTIFY_KIND_FAILED == int(hawser::NotifyKind::kFailed));

}  // namespace

extern "C" {

int hawser_submit_with_signal(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                              size_t count, const char* signal) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    if (!signal) return nullArg("signal");
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    return ret(engine->engine.submitTransfer(batch, reqs, hawser::Signal{signal}));
  });
}

int hawser_wait_signal(hawser_engine_t* engine, const char* peer, const char* name, uint64_t expected,
                       int64_t timeout_ms, hawser_signal_result_t* out) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!peer) return nullArg("peer");
    if (!name) return nullArg("name");
    if (!out) return nullArg("out");
    const auto timeout = timeout_ms < 0 ? std::chrono::milliseconds::max() : std::chrono::milliseconds(timeout_ms);
    hawser::SignalResult r;
    int rc = ret(engine->engine.waitSignal(peer, name, expected, timeout, r));
    if (rc != 0) return rc;
    strings.clear();
    *out = hawser_signal_result_t{static_cast<int>(r.s), static_cast<int>(r.reason), strings.keep(r.peer), r.landed,
                                  -static_cast<int>(r.error.code()), strings.keep(r.error.message())};
    return 0;
  });
}

int hawser_get_notify_outcomes(hawser_engine_t* engine, hawser_notify_outcome_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    std::vector<hawser::ReceivedNotification> fresh;
    int rc = ret(engine->engine.getNotifies(fresh, true));
    if (rc != 0) return rc;
    std::lock_guard lk(engine->notify_mu);
    auto& pending = engine->outcome_pending;
    for (auto& n : fresh) pending.push_back(std::move(n));
    if (!fitsOrReport(out, count, pending.size(), "notification outcomes", &rc)) return rc;
    strings.clear();
    for (size_t i = 0; i < pending.size(); ++i) {
      const auto& n = pending[i];
      const char* peer = strings.keep(n.peer);
      const char* name = strings.keep(n.name);
      const char* msg = strings.keep(n.message);
      out[i] = hawser_notify_outcome_t{peer,
                                       name,
                                       n.name.size(),
                                       msg,
                                       n.message.size(),
                                       static_cast<int>(n.kind),
                                       -static_cast<int>(n.error.code()),
                                       strings.keep(n.error.message())};
    }
    *count = pending.size();
    pending.clear();
    return 0;
  });
}

const char* hawser_signal_state_name(int state) {
  if (state < HAWSER_SIGNAL_COMPLETED || state > HAWSER_SIGNAL_TIMEOUT) return "UNKNOWN";
  return hawser::signalStateName(static_cast<hawser::SignalState>(state)).data();
}

const char* hawser_signal_reason_name(int reason) {
  if (reason < HAWSER_SIGNAL_REASON_NONE || reason > HAWSER_SIGNAL_REASON_OVERFLOW) return "UNKNOWN";
  return hawser::signalReasonName(static_cast<hawser::SignalReason>(reason)).data();
}

}  // extern "C"
