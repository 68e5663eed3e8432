#include "py_support.h"

#include <cctype>
#include <charconv>
#include <fmt/format.h>

namespace hawser::pymod {

// ---- errors ------------------------------------------------------------------

// The last failure of a call made from this thread (any engine).
thread_local Status t_last_error;


PyObject* g_error_type = nullptr;

std::string lastErrorText() { return t_last_error.ok() ? std::string() : t_last_error.toString(); }
std::string lastErrorCode() { return std::string(codeName(t_last_error.code())); }


Status context(const Status& s, const std::string& where) {
  if (s.ok()) return s;
  return {s.code(), where + ": " + s.message()};
}

void raiseError(const Status& s) {
  auto type = py::reinterpret_borrow<py::object>(g_error_type);
  py::object e = type(py::str(s.toString()));
  e.attr("code") = static_cast<int>(s.code());
  e.attr("code_name") = py::str(std::string(codeName(s.code())));
  e.attr("message") = py::str(s.message());
  PyErr_SetObject(g_error_type, e.ptr());
}

// ---- argument parsing --------------------------------------------------------

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "host", "host:port", "[v6]", "[v6]:port"; a bare IPv6 address has no port.
Status splitHostPort(const std::string& in, std::string& host, uint16_t& port) {
  host = in;
  port = 0;
  std::string port_text;
  if (!in.empty() && in.front() == '[') {
    auto close = in.find(']');
    if (close == std::string::npos)
      return {Code::kInvalidArgument, fmt::format("local_hostname '{}': '[' without a closing ']'", in)};
    host = in.substr(1, close - 1);
    if (close + 1 == in.size()) return Status::OK();
    if (in[close + 1] != ':')
      return {Code::kInvalidArgument, fmt::format("local_hostname '{}': expected ':' after ']'", in)};
    port_text = in.substr(close + 2);
  } else {
    auto colon = in.find(':');
    if (colon == std::string::npos || in.find(':', colon + 1) != std::string::npos) return Status::OK();
    host = in.substr(0, colon);
    port_text = in.substr(colon + 1);
  }
  unsigned value = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() || value > 65535)
    return {Code::kInvalidArgument,
            fmt::format("local_hostname '{}': port '{}' is not a number in 0..65535", in, port_text)};
  port = static_cast<uint16_t>(value);
  return Status::OK();
}

// Mooncake: "P2PHANDSHAKE" = no store; a string without "://" is an etcd address.
std::string metadataUri(const std::string& server) {
  if (server.empty() || server == "p2p" || server == "P2PHANDSHAKE") return "p2p";
  if (server.find("://") != std::string::npos) return server;
  return "etcd://" + server;
}

std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }

py::str strOf(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

}  // namespace hawser::pymod
