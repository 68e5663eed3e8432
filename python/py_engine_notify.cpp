// PyEngine's notifications (py_engine.h): notify= as Python passes it,
// get_notifies() and wait_signal().
#include "py_engine.h"

namespace hawser::pymod {

bool PyEngine::notificationFrom(const py::handle& notify, Notification& out, const char* what) {
  if (notify.is_none()) return false;
  auto text = [what](const py::handle& v, const char* field) {
    if (py::isinstance<py::bytes>(v) || py::isinstance<py::str>(v)) return v.cast<std::string>();
    throw py::type_error(fmt::format("{}: notify {} must be str or bytes", what, field));
  };
  if (py::isinstance<py::tuple>(notify)) {
    auto t = notify.cast<py::tuple>();
    if (t.size() != 2) throw py::type_error(fmt::format("{}: a notify tuple must be (name, msg)", what));
    out = Notification{text(t[0], "name"), text(t[1], "msg")};
    return true;
  }
  if (py::isinstance<Notify>(notify)) {
    const auto& n = notify.cast<const Notify&>();
    out = Notification{n.name, n.msg};
    return true;
  }
  if (!py::hasattr(notify, "name") || !py::hasattr(notify, "msg"))
    throw py::type_error(
        fmt::format("{}: notify must be a TransferNotify(name, msg), a (name, msg) tuple or None", what));
  out = Notification{text(notify.attr("name"), "name"), text(notify.attr("msg"), "msg")};
  return true;
}

std::vector<Notify> PyEngine::getNotifies(bool with_failures) {
  std::vector<ReceivedNotification> got;
  Status s;
  {
    py::gil_scoped_release nogil;
    TransferEngine* e = nullptr;
    s = engine(e);
    if (s.ok()) s = e->getNotifies(got, with_failures);
  }
  std::vector<Notify> out;
  if (!s.ok()) {
    fail(context(s, "get_notifies"));
    return out;
  }
  for (auto& g : got) {
    out.emplace_back(std::move(g.name), std::move(g.message));
    out.back().peer = std::move(g.peer);
    out.back().failed = g.kind == NotifyKind::kFailed;
    out.back().code = -static_cast<int>(g.error.code());
    out.back().error = g.error.message();
  }
  return out;
}

SignalOutcome PyEngine::waitSignal(const std::string& peer, const std::string& name, uint64_t expected,
                                   int64_t timeout_ms) {
  SignalResult r;
  Status s;
  {
    py::gil_scoped_release nogil;
    TransferEngine* e = nullptr;
    s = engine(e);
    const auto timeout = timeout_ms < 0 ? std::chrono::milliseconds::max() : std::chrono::milliseconds(timeout_ms);
    if (s.ok()) s = e->waitSignal(peer, name, expected, timeout, r);
  }
  SignalOutcome out;
  if (!s.ok()) {
    fail(context(s, "wait_signal"));
    out.state = "INVALID";
    out.code = -static_cast<int>(s.code());
    out.error = s.message();
    return out;
  }
  out.state = signalStateName(r.s);
  out.reason = signalReasonName(r.reason);
  out.peer = r.peer;
  out.landed = r.landed;
  out.code = -static_cast<int>(r.error.code());
  out.error = r.error.message();
  return out;
}

}  // namespace hawser::pymod
