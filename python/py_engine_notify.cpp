// PyEngine's notifications (py_engine.h): notify= as Python passes it, and
// get_notifies().
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

std::vector<Notify> PyEngine::getNotifies() {
  std::vector<ReceivedNotification> got;
  Status s;
  {
    py::gil_scoped_release nogil;
    TransferEngine* e = nullptr;
    s = engine(e);
    if (s.ok()) s = e->getNotifies(got);
  }
  std::vector<Notify> out;
  if (!s.ok()) {
    fail(context(s, "get_notifies"));
    return out;
  }
  for (auto& g : got) {
    out.emplace_back(std::move(g.name), std::move(g.message));
    out.back().peer = std::move(g.peer);
  }
  return out;
}

}  // namespace hawser::pymod
