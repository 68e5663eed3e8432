// The Python module's support code: errors (last error per thread, the
// exception type), argument parsing, and a view of buffer-protocol objects.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "hawser/status.h"

namespace hawser::pymod {

namespace py = pybind11;
using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The last failure of a call made from this thread (any engine).
extern thread_local Status t_last_error;

// Thrown with the GIL held when raise_on_error is set; becomes hawser.Error.
struct Failure {
  Status status;
};

// last_error(): "code_name: message" of t_last_error ("" if none); last_error_code(): its code name.
std::string lastErrorText();
std::string lastErrorCode();

extern PyObject* g_error_type;  // hawser.Error, owned by the module for the process lifetime

inline int negative(const Status& s) { return -static_cast<int>(s.code()); }
// `s` with "where: " before its message (ok stays ok).
Status context(const Status& s, const std::string& where);
// Sets hawser.Error (code, code_name, message) as the pending Python error.
void raiseError(const Status& s);

std::string lower(std::string s);
// "host", "host:port", "[v6]", "[v6]:port"; a bare IPv6 address has no port.
Status splitHostPort(const std::string& in, std::string& host, uint16_t& port);
// Mooncake: "P2PHANDSHAKE" = no store; a string without "://" is an etcd address.
std::string metadataUri(const std::string& server);
std::string hex(uint64_t v);
// str of bytes; bytes that are not UTF-8 survive as surrogates
// (.encode('utf-8', 'surrogateescape') gives them back).
py::str strOf(const std::string& s);

// A C-contiguous read-only view of any buffer-protocol object.
class BufferView {
 public:
  explicit BufferView(py::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  const void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

}  // namespace hawser::pymod
