// Notifications in the Python module: the notify= argument of the transfer
// calls and engine.get_notifies() (py_notify.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "hawser/types.h"

namespace hawser::pymod {

class PyEngine;
namespace py = pybind11;

// notify= as the calls take it: None (false, nothing to send), an object
// with `name` and `msg` attributes (Mooncake's TransferNotify, or
// hawser.TransferNotify), or a (name, msg) tuple; each str or bytes.
// Raises TypeError for anything else.
bool notificationFrom(py::handle notify, Notification& out);

// hawser.TransferNotify(name, msg) and TransferEngine.get_notifies().
void bindNotify(py::module_& m, py::class_<PyEngine>& cls);

}  // namespace hawser::pymod
