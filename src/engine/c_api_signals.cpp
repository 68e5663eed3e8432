// The C API's signals (hawser/c_api.h, "Signals"); hawser_get_notify_outcomes
// is with the notifications (c_api_notify.cpp).
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

const char* hawser_signal_state_name(int state) {
  if (state < HAWSER_SIGNAL_COMPLETED || state > HAWSER_SIGNAL_TIMEOUT) return "UNKNOWN";
  return hawser::signalStateName(static_cast<hawser::SignalState>(state)).data();
}

const char* hawser_signal_reason_name(int reason) {
  if (reason < HAWSER_SIGNAL_REASON_NONE || reason > HAWSER_SIGNAL_REASON_OVERFLOW) return "UNKNOWN";
  return hawser::signalReasonName(static_cast<hawser::SignalReason>(reason)).data();
}

}  // extern "C"
