// The C API's notifications (hawser/c_api.h, "Notifications").
#include <string>
#include <vector>

#include "engine/c_api_util.h"

namespace {

using namespace hawser::capi;
using hawser::Code;

static_assert(HAWSER_NOTIFY_WAITING == int(hawser::NotifyState::kWaiting) &&
              HAWSER_NOTIFY_SENDING == int(hawser::NotifyState::kSending) &&
              HAWSER_NOTIFY_DELIVERED == int(hawser::NotifyState::kDelivered) &&
              HAWSER_NOTIFY_NOT_SENT == int(hawser::NotifyState::kNotSent) &&
              HAWSER_NOTIFY_FAILED == int(hawser::NotifyState::kFailed));
static_assert(HAWSER_NOTIFY_KIND_DELIVERED == int(hawser::NotifyKind::kDelivered) &&
              HAWSER_NOTIFY_KIND_FAILED == int(hawser::NotifyKind::kFailed));

int notificationToCpp(const hawser_notification_t* n, hawser::Notification& out) {
  if (!n) return nullArg("notify");
  if (!n->name && n->name_len) return nullArg("notify->name");
  if (!n->message && n->message_len) return nullArg("notify->message");
  out.name.assign(n->name ? n->name : "", n->name_len);
  out.message.assign(n->message ? n->message : "", n->message_len);
  return 0;
}

// Moves what the engine received into the handle's list `list` for this
// call, then hands out all of it (each entry through `convert`, its strings
// kept in `strings`) or, when `out` is NULL or too small, none of it.
template <class Out, class Convert>
int takeNotifies(hawser_engine_t* engine, bool with_failures,
                 std::vector<hawser::ReceivedNotification> hawser_engine::*list, Out* out, size_t* count,
                 const char* what, Strings& strings, Convert convert) {
  if (!engine) return nullArg("engine");
  if (!count) return nullArg("count");
  auto& pending = engine->*list;
  std::vector<hawser::ReceivedNotification> fresh;
  int rc = ret(engine->engine.getNotifies(fresh, with_failures));
  if (rc != 0) return rc;
  std::lock_guard lk(engine->notify_mu);
  for (auto& n : fresh) pending.push_back(std::move(n));
  if (!fitsOrReport(out, count, pending.size(), what, &rc)) return rc;
  strings.clear();
  for (size_t i = 0; i < pending.size(); ++i) out[i] = convert(pending[i], strings);
  *count = pending.size();
  pending.clear();
  return 0;
}

}  // namespace

extern "C" {

int hawser_submit_with_notify(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                              size_t count, const hawser_notification_t* notify) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    hawser::Notification n;
    if (int rc = notificationToCpp(notify, n); rc != 0) return rc;
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    return ret(engine->engine.submitTransfer(batch, reqs, n));
  });
}

int hawser_send_notify(hawser_engine_t* engine, hawser_segment_id_t target, const hawser_notification_t* notify) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    hawser::Notification n;
    if (int rc = notificationToCpp(notify, n); rc != 0) return rc;
    return ret(engine->engine.sendNotify(target, n));
  });
}

int hawser_get_notifies(hawser_engine_t* engine, hawser_received_notification_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    return takeNotifies(engine, false, &hawser_engine::notify_pending, out, count, "notifications", strings,
                        [](const hawser::ReceivedNotification& n, Strings& keep) {
                          const char* peer = keep.keep(n.peer);
                          const char* name = keep.keep(n.name);
                          const char* msg = keep.keep(n.message);
                          return hawser_received_notification_t{peer, name, n.name.size(), msg, n.message.size()};
                        });
  });
}

int hawser_get_notify_outcomes(hawser_engine_t* engine, hawser_notify_outcome_t* out, size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    return takeNotifies(engine, true, &hawser_engine::outcome_pending, out, count, "notification outcomes", strings,
                        [](const hawser::ReceivedNotification& n, Strings& keep) {
                          const char* peer = keep.keep(n.peer);
                          const char* name = keep.keep(n.name);
                          const char* msg = keep.keep(n.message);
                          return hawser_notify_outcome_t{peer,
                                                         name,
                                                         n.name.size(),
                                                         msg,
                                                         n.message.size(),
                                                         static_cast<int>(n.kind),
                                                         -static_cast<int>(n.error.code()),
                                                         keep.keep(n.error.message())};
                        });
  });
}

int hawser_notify_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_notify_status_t* out,
                         size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    std::vector<hawser::NotifyStatus> st;
    int rc = ret(engine->engine.getNotifyStatus(batch, st));
    if (rc != 0) return rc;
    if (!fitsOrReport(out, count, st.size(), "notification statuses", &rc)) return rc;
    strings.clear();
    for (size_t i = 0; i < st.size(); ++i)
      out[i] = hawser_notify_status_t{static_cast<int>(st[i].s), -static_cast<int>(st[i].error.code()),
                                      st[i].error.ok() ? "" : strings.keep(st[i].error.toString())};
    *count = st.size();
    return 0;
  });
}

int hawser_transfer_sync_with_notify(hawser_engine_t* engine, const hawser_request_t* requests, size_t count,
                                     const hawser_notification_t* notify, int64_t timeout_ms,
                                     hawser_status_t* statuses) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    hawser::Notification n;
    if (int rc = notificationToCpp(notify, n); rc != 0) return rc;
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    std::vector<hawser::TransferStatus> sts;
    int rc = ret(engine->engine.transferSync(reqs, n, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms),
                                             statuses ? &sts : nullptr));
    if (statuses && sts.size() == count) {
      strings.clear();
      for (size_t i = 0; i < count; ++i) toC(sts[i], &statuses[i], strings);
    }
    return rc;
  });
}

const char* hawser_notify_state_name(int state) {
  if (state < HAWSER_NOTIFY_WAITING || state > HAWSER_NOTIFY_FAILED) return "UNKNOWN";
  return hawser::notifyStateName(static_cast<hawser::NotifyState>(state)).data();
}

}  // extern "C"
