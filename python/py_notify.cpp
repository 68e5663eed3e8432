// Notifications in the Python module (py_notify.h).
#include "py_notify.h"

#include "py_engine.h"

namespace hawser::pymod {

namespace {

std::string bytesOf(py::handle v, const char* what) {
  if (py::isinstance<py::bytes>(v)) return v.cast<std::string>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();  // UTF-8
  throw py::type_error(std::string("notify: ") + what + " must be str or bytes");
}

// str of the bytes; bytes that are not UTF-8 survive as surrogates
// (.encode('utf-8', 'surrogateescape') gives them back).
py::str strOf(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

struct PyTransferNotify {
  std::string name, msg;
};

}  // namespace

bool notificationFrom(py::handle notify, Notification& out) {
  if (notify.is_none()) return false;
  if (py::isinstance<py::tuple>(notify)) {
    auto t = notify.cast<py::tuple>();
    if (t.size() != 2) throw py::type_error("notify: a tuple must be (name, msg)");
    out.name = bytesOf(t[0], "name");
    out.message = bytesOf(t[1], "msg");
    return true;
  }
  if (!py::hasattr(notify, "name") || !py::hasattr(notify, "msg"))
    throw py::type_error("notify: expected TransferNotify(name, msg), a (name, msg) tuple or None");
  out.name = bytesOf(notify.attr("name"), "name");
  out.message = bytesOf(notify.attr("msg"), "msg");
  return true;
}

void bindNotify(py::module_& m, py::class_<PyEngine>& cls) {
  py::class_<PyTransferNotify>(m, "TransferNotify", "A notification: delivered to the target after the transfer.")
      .def(py::init([](py::handle name, py::handle msg) {
             return PyTransferNotify{bytesOf(name, "name"), bytesOf(msg, "msg")};
           }),
           py::arg("name"), py::arg("msg"))
      .def_property_readonly("name", [](const PyTransferNotify& n) { return strOf(n.name); })
      .def_property_readonly("msg", [](const PyTransferNotify& n) { return strOf(n.msg); });
  cls.def(
      "get_notifies",
      [](PyEngine& e) -> py::object {
        std::vector<ReceivedNotification> got;
        Status s = e.getNotifies(got);
        if (!s.ok()) {
          e.fail(s);
          return py::list();
        }
        py::list out;
        for (auto& n : got) out.append(py::make_tuple(strOf(n.peer), strOf(n.name), strOf(n.message)));
        return out;
      },
      "Takes the notifications received so far, oldest first: [(peer, name, msg), ...]; peer is the sender's "
      "segment name.");
}

}  // namespace hawser::pymod
