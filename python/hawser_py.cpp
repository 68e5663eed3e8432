// hawser Python binding: module `hawser`, class `TransferEngine`.
//
// Method names, arguments, defaults and return values follow Mooncake's
// Python binding (mooncake.engine.TransferEngine); the submodule
// hawser.mooncake holds them under Mooncake's names, so a connector ports by
// changing its import. Int results keep Mooncake's convention (0 = ok,
// negative = error; the negative value is the hawser Code: -1
// invalid_argument, -5 segment_not_found, ...), and where Mooncake returns
// something else on failure, so does this binding (0 from async submits,
// -1/-2 from transfer_check_status). Where Mooncake is wrong, this binding is not:
// - sync calls release the GIL and block in the engine's transferSync (no busy-poll);
// - a call that runs past its timeout cancels its batch, waits for every task
//   to end, then frees it; a batch whose I/O still references memory is kept
//   and freed later (never leaked, never freed under in-flight I/O);
// - every failure's "code_name: message" is kept per thread (last_error()),
//   and TransferEngine(raise_on_error=True) raises hawser.Error instead of
//   returning the negative code;
// - segments are opened once and cached per name.
// Documentation: docs/python.md.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include "py_blocks.h"
#include "py_engine.h"
#include "py_metrics.h"
#include "py_objects.h"
#include "py_support.h"

namespace py = pybind11;
using namespace hawser;
using namespace hawser::pymod;


PYBIND11_MODULE(hawser, m) {
  using hawser::Code;
  using hawser::OpCode;
  using hawser::pymod::Notify;
  using hawser::pymod::PyEngine;
  m.doc() =
      "hawser transfer engine. TransferEngine follows Mooncake's Python API "
      "(mooncake.engine.TransferEngine); see docs/python.md.";
#ifdef HAWSER_PY_VERSION
  m.attr("__version__") = HAWSER_PY_VERSION;
#endif

  // hawser.Error(RuntimeError): .code (positive hawser code; methods return
  // its negation), .code_name, .message.
  hawser::pymod::g_error_type = PyErr_NewExceptionWithDoc(
      "hawser.Error",
      "A failed hawser call. Attributes: code (int, the hawser code; int-returning methods return -code), "
      "code_name (str, e.g. 'segment_not_found'), message (str).",
      PyExc_RuntimeError, nullptr);
  if (!hawser::pymod::g_error_type) throw py::error_already_set();
  {
    auto type = py::reinterpret_borrow<py::object>(hawser::pymod::g_error_type);
    type.attr("code") = 0;
    type.attr("code_name") = "ok";
    type.attr("message") = "";
  }
  m.add_object("Error", py::handle(hawser::pymod::g_error_type));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hawser::pymod::Failure& f) {
      hawser::pymod::raiseError(f.status);
    }
  });

  py::dict codes;
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c)
    codes[py::str(std::string(hawser::codeName(static_cast<Code>(c))))] = c;
  m.attr("codes") = codes;
  m.def(
      "code_name",
      [](int n) {
        int c = hawser::pymod::codeNumber(n);
        if (c > static_cast<int>(Code::kInternal)) return fmt::format("unknown({})", n);
        return std::string(hawser::codeName(static_cast<Code>(c)));
      },
      py::arg("code"), "Name of a hawser code; accepts the negative value a method returned.");
  m.def("last_error", &lastErrorText,
        "'code_name: message' of the last failed call made from this thread ('' if none).");
  m.def("last_error_code", &lastErrorCode, "Code name of the last failed call made from this thread ('ok' if none).");

  // Mooncake's TransferOpcode (Read = 0, Write = 1; READ and WRITE, which
  // its docs spell, are aliases) and its values at module level.
  auto opcode = py::module_::import("enum").attr("IntEnum")(
      "TransferOpcode", py::make_tuple(py::make_tuple("Read", 0), py::make_tuple("Write", 1),
                                       py::make_tuple("READ", 0), py::make_tuple("WRITE", 1)));
  opcode.attr("__module__") = "hawser";
  m.attr("TransferOpcode") = opcode;
  m.attr("Read") = opcode.attr("Read");
  m.attr("Write") = opcode.attr("Write");

  py::class_<Notify>(m, "TransferNotify", "A notification for the target of a transfer (Mooncake's TransferNotify).")
      .def(py::init<>())
      .def(py::init<std::string, std::string>(), py::arg("name"), py::arg("msg"), "name, msg: str or bytes")
      // Bytes that are not UTF-8 read back as surrogates (.encode('utf-8', 'surrogateescape') restores them).
      .def_property(
          "name", [](const Notify& n) { return strOf(n.name); }, [](Notify& n, std::string v) { n.name = std::move(v); })
      .def_property(
          "msg", [](const Notify& n) { return strOf(n.msg); }, [](Notify& n, std::string v) { n.msg = std::move(v); })
      .def_property_readonly(
          "peer", [](const Notify& n) { return strOf(n.peer); }, "The sender's segment name (received notifications).")
      .def_readonly("failed", &Notify::failed,
                    "get_notifies(with_failures=True): its submit failed (or its sender was lost); error says why.")
      .def_readonly("code", &Notify::code, "failed: the negative hawser code (hawser.codes).")
      .def_readonly("error", &Notify::error, "failed: why.")
      .def("__repr__",
           [](const Notify& n) {
             return "TransferNotify(name=" + py::repr(strOf(n.name)).cast<std::string>() +
                    ", msg=" + py::repr(strOf(n.msg)).cast<std::string>() + ")";
           })
      .def("__eq__", [](const Notify& a, const Notify& b) { return a.name == b.name && a.msg == b.msg; });

  py::class_<SignalOutcome>(m, "SignalResult", "How wait_signal ended (docs/signals.md).")
      .def_readonly("state", &SignalOutcome::state, "COMPLETED, FAILED or TIMEOUT")
      .def_readonly("reason", &SignalOutcome::reason,
                    "FAILED: TRANSFER_FAILED, CANCELED, REFUSED, PEER_LOST or OVERFLOW; else NONE")
      .def_readonly("peer", &SignalOutcome::peer, "The sender's segment name.")
      .def_readonly("landed", &SignalOutcome::landed, "Requests of the signal that landed.")
      .def_readonly("code", &SignalOutcome::code, "0, or the negative hawser code of the first failed request.")
      .def_readonly("error", &SignalOutcome::error)
      .def("__bool__", [](const SignalOutcome& r) { return r.state == "COMPLETED"; })
      .def("__repr__", [](const SignalOutcome& r) -> std::string {
        return fmt::format("SignalResult({} {} landed={} peer={} error={})", r.state, r.reason, r.landed,
                           py::repr(strOf(r.peer)).cast<std::string>(), py::repr(strOf(r.error)).cast<std::string>());
      });

  // What Mooncake's module says of its build: hawser finds GPUs at run time.
  m.attr("SUPPORT_CUDA") = true;
  m.attr("SUPPORT_EFA") = false;
  m.attr("SUPPORT_HIP") = false;
  m.attr("SUPPORT_MNNVL") = false;
  m.attr("SUPPORT_INTRA_NVLINK") = false;

  auto toOp = [](int op, OpCode& out) {
    if (op == 0 || op == 1) {
      out = op == 0 ? OpCode::kRead : OpCode::kWrite;
      return true;
    }
    return false;
  };
  auto badOp = [](const char* what, int op) {
    return Status{Code::kInvalidArgument,
                  fmt::format("{}: opcode {} is neither TransferOpcode.Read (0) nor TransferOpcode.Write (1)", what, op)};
  };

  using Addrs = std::vector<uint64_t>;
  // dynamic_attr: hawser.tensors keeps the objects it registered on the engine.
  py::class_<PyEngine> cls(m, "TransferEngine", py::dynamic_attr());
  cls.attr("TransferOpcode") = opcode;
  cls.def(py::init<bool>(), py::arg("raise_on_error") = false,
          "raise_on_error=True: failures raise hawser.Error instead of returning 0 / a negative code.")
      .def("initialize", &PyEngine::initialize, py::arg("local_hostname"), py::arg("metadata_server"),
           py::arg("protocol"), py::arg("device_name"), py::arg("config") = std::map<std::string, std::string>{},
           "local_hostname: 'host' or 'host:port'; metadata_server: 'P2PHANDSHAKE'/'p2p' or 'etcd://h:p' "
           "(no scheme = etcd); protocol: an installed transport's name ('tcp', 'rdma', ...: forced; a Mooncake "
           "protocol this host cannot honour falls back to tcp with one log line) or ''/'auto'; device_name: RDMA "
           "NICs ('mlx5_0,mlx5_1'), '' or None; config (hawser): {key: value} of the config table for this engine, "
           "winning over HAWSER_* variables. Returns 0 or a negative code.")
      .def("initialize_ext", &PyEngine::initializeExt, py::arg("local_hostname"), py::arg("metadata_server"),
           py::arg("protocol"), py::arg("device_name"), py::arg("metadata_type"))
      .def("get_rpc_port", &PyEngine::rpcPort)
      .def("get_segment_name", &PyEngine::segmentName, "The name peers pass as target_hostname ('host:port' in p2p).")
      .def("transports", &PyEngine::transports, "Installed transports, in preference order.")
      .def("set_route_contract", &PyEngine::setRouteContract, py::arg("transports") = "", py::arg("require") = "",
           "The route contract of every request this object submits from now on (docs/routes.md): transports "
           "'shm,nvlink' (allowed; '' any), require 'zero_copy,no_staging,same_host' ('' none); both '': the "
           "engine's (config route.*). A request it forbids fails with no_transport saying why. 0 or a negative "
           "code.")
      .def("get_engine", [](py::object self) { return self; },
           "This engine (Mooncake returns its inner C++ engine, which only Mooncake Store takes).")
      .def("get_engine_ptr", &PyEngine::enginePtr,
           "Address of the C++ hawser::TransferEngine (0 before initialize).")
      .def("register_memory", &PyEngine::registerMemory, py::arg("buffer_addr"), py::arg("capacity"),
           py::arg("location") = "*", py::arg("remote_accessible") = true,
           "location '*' (the default) asks the CUDA driver and the kernel: CUDA tensors are found as such.")
      .def("unregister_memory", &PyEngine::unregisterMemory, py::arg("buffer_addr"))
      .def("batch_register_memory", &PyEngine::batchRegisterMemory, py::arg("buffer_addresses"),
           py::arg("capacities"), py::arg("location") = "*")
      .def("batch_unregister_memory", &PyEngine::batchUnregisterMemory, py::arg("buffer_addresses"))
      .def(
          "transfer_sync_write",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, const std::string& h) {
            return e.transferSync(t, b, p, l, OpCode::kWrite, "transfer_sync_write", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("transport_hint") = "",
          "0 or a negative code. transport_hint is ignored (as Mooncake's classic engine).")
      .def(
          "transfer_sync_read",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, const std::string& h) {
            return e.transferSync(t, b, p, l, OpCode::kRead, "transfer_sync_read", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("transport_hint") = "")
      .def(
          "transfer_sync",
          [toOp, badOp](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, int op,
                        py::object notify, const std::string& h) {
            OpCode o;
            if (!toOp(op, o)) return e.ret(badOp("transfer_sync", op));
            return e.batchSyncNotify(t, {b}, {p}, {l}, o, notify, "transfer_sync", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("opcode"), py::arg("notify") = py::none(), py::arg("transport_hint") = "")
      .def(
          "batch_transfer_sync_write",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, const std::string& h) {
            return e.batchSync(t, b, p, l, OpCode::kWrite, "batch_transfer_sync_write", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("transport_hint") = "", "0 or a negative code; an empty batch moves nothing and returns 0.")
      .def(
          "batch_transfer_sync_read",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, const std::string& h) {
            return e.batchSync(t, b, p, l, OpCode::kRead, "batch_transfer_sync_read", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("transport_hint") = "")
      .def(
          "batch_transfer_sync",
          [toOp, badOp](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, int op,
                        py::object notify, const std::string& h) {
            OpCode o;
            if (!toOp(op, o)) return e.ret(badOp("batch_transfer_sync", op));
            return e.batchSyncNotify(t, b, p, l, o, notify, "batch_transfer_sync", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("opcode"), py::arg("notify") = py::none(), py::arg("transport_hint") = "")
      .def(
          "batch_transfer_async_write",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, const std::string& h) {
            return e.batchAsync(t, b, p, l, OpCode::kWrite, "batch_transfer_async_write", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("transport_hint") = "", "A batch id, or 0 when the submit failed (last_error() says why).")
      .def(
          "batch_transfer_async_read",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, const std::string& h) {
            return e.batchAsync(t, b, p, l, OpCode::kRead, "batch_transfer_async_read", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("transport_hint") = "")
      .def(
          "batch_transfer_async",
          [toOp, badOp](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, int op,
                        py::object notify, const std::string& h, py::object signal) -> uint64_t {
            OpCode o;
            if (!toOp(op, o)) {
              e.fail(badOp("batch_transfer_async", op));
              return 0;
            }
            Notification n;
            const bool with = PyEngine::notificationFrom(notify, n, "batch_transfer_async");
            if (!signal.is_none() && with)
              throw py::type_error("batch_transfer_async: give notify or signal, not both");
            if (!signal.is_none()) {
              Signal sig{signal.cast<std::string>()};
              return e.batchAsync(t, b, p, l, o, "batch_transfer_async", h, nullptr, &sig);
            }
            return e.batchAsync(t, b, p, l, o, "batch_transfer_async", h, with ? &n : nullptr);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("opcode"), py::arg("notify") = py::none(), py::arg("transport_hint") = "",
          py::arg("signal") = py::none(),
          "notify (hawser): sent once every request completed, never when one failed. signal (hawser): the "
          "requests count toward that signal at the target, whose wait_signal learns how they ended.")
      .def(
          "transfer_submit_write",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, const std::string& h) {
            return e.batchAsync(t, {b}, {p}, {l}, OpCode::kWrite, "transfer_submit_write", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("transport_hint") = "",
          "A batch id for transfer_check_status, or 0 when the submit failed (last_error() says why).")
      .def(
          "transfer_submit_read",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, const std::string& h) {
            return e.batchAsync(t, {b}, {p}, {l}, OpCode::kRead, "transfer_submit_read", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("transport_hint") = "")
      .def("get_batch_transfer_status", &PyEngine::batchStatus, py::arg("batch_ids"),
           "Waits for each batch and frees it: 0 when all completed, else the negative code of the first that did "
           "not (last_error() says why).")
      .def("cancel_transfer", &PyEngine::cancelTransfer, py::arg("batch_id"),
           "hawser: cancels a batch in flight (its slices not yet started end canceled; what is in flight ends as it "
           "does) and waits up to python.cancel_wait_ms for its tasks to end. 0 once they ended, invalid_batch when the "
           "id is not allocated (never, or already freed by its waiter), the timeout code while tasks still run.")
      .def("transfer_check_status", &PyEngine::checkStatus, py::arg("batch_id"),
           "1 completed (freed), 0 running, -1 failed (freed) or unknown id, -2 timed out (canceled, freed).")
      .def("send_probe", &PyEngine::sendProbe, py::arg("peer_server_name"),
           "0 when the peer answers now, else a negative code.")
      .def("get_local_topology", &PyEngine::localTopology, py::arg("device_name") = py::none(),
           "Mooncake's topology JSON: {\"cpu:N\": [[NICs on NUMA node N], [the other NICs]], ...}.")
      .def("warmup_efa_segment", [](PyEngine&, const std::string&) { return 0; }, py::arg("segment_name"),
           "0: hawser has no EFA transport (Mooncake's builds without EFA do the same).")
      .def(
          "get_notifies", [](PyEngine& e, bool with_failures) { return e.getNotifies(with_failures); },
          py::arg("with_failures") = false,
          "Notifications received since the last call, oldest first (TransferNotify; .peer names the sender). "
          "with_failures (hawser): also the notifying submits that failed (.failed, .code, .error) in their places.")
      .def("wait_signal", &PyEngine::waitSignal, py::arg("peer"), py::arg("name"), py::arg("expected"),
           py::arg("timeout_ms") = -1,
           "Waits until `expected` requests of signal `name` from segment `peer` landed here (COMPLETED), one "
           "cannot (FAILED: .reason, .error), or timeout_ms passes (TIMEOUT; -1: no deadline). A SignalResult.")
      .def(
          "transfer_write_on_cuda",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, uint64_t stream,
             const std::string& h) {
            e.transferOnCuda(t, {b}, {p}, {l}, OpCode::kWrite, stream, "transfer_write_on_cuda", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("stream_ptr") = 0, py::arg("transport_hint") = "",
          "Waits for CUDA stream stream_ptr, then writes; returns once the bytes are in place, raises hawser.Error.")
      .def(
          "transfer_read_on_cuda",
          [](PyEngine& e, const std::string& t, uint64_t b, uint64_t p, uint64_t l, uint64_t stream,
             const std::string& h) {
            e.transferOnCuda(t, {b}, {p}, {l}, OpCode::kRead, stream, "transfer_read_on_cuda", h);
          },
          py::arg("target_hostname"), py::arg("buffer"), py::arg("peer_buffer_address"), py::arg("length"),
          py::arg("stream_ptr") = 0, py::arg("transport_hint") = "")
      .def(
          "batch_transfer_write_on_cuda",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, uint64_t stream,
             const std::string& h) {
            e.transferOnCuda(t, b, p, l, OpCode::kWrite, stream, "batch_transfer_write_on_cuda", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("stream_ptr") = 0, py::arg("transport_hint") = "")
      .def(
          "batch_transfer_read_on_cuda",
          [](PyEngine& e, const std::string& t, const Addrs& b, const Addrs& p, const Addrs& l, uint64_t stream,
             const std::string& h) {
            e.transferOnCuda(t, b, p, l, OpCode::kRead, stream, "batch_transfer_read_on_cuda", h);
          },
          py::arg("target_hostname"), py::arg("buffers"), py::arg("peer_buffer_addresses"), py::arg("lengths"),
          py::arg("stream_ptr") = 0, py::arg("transport_hint") = "")
      .def("allocate_managed_buffer", &PyEngine::allocateManaged, py::arg("length"),
           "Registered memory from the engine's pool; returns its address or 0 (last_error() says why).")
      .def("free_managed_buffer", &PyEngine::freeManaged, py::arg("buffer_addr"), py::arg("length") = 0,
           "Frees a managed buffer; length is not checked (the allocator knows it).")
      .def("write_bytes_to_buffer", &PyEngine::writeBytes, py::arg("buffer_addr"), py::arg("data"),
           py::arg("length"))
      .def("read_bytes_from_buffer", &PyEngine::readBytes, py::arg("buffer_addr"), py::arg("length"),
           "Raises hawser.Error if the range is not inside registered memory.")
      .def("get_first_buffer_address", &PyEngine::firstBufferAddress, py::arg("segment_name"),
           "Address of the segment's first registered buffer (still registered), or 0 (last_error() says why).")
      .def("get_segment_buffers", &PyEngine::segmentBuffers, py::arg("segment_name"),
           "[(addr, length, location), ...] of a segment, in registration order.")
      .def("unreclaimed_batches", &PyEngine::unreclaimed,
           "Batches canceled after a timeout whose I/O had not ended yet (freed as soon as it does).")
      .def_static("last_error", &lastErrorText)
      .def_static("last_error_code", &lastErrorCode);

  // `from hawser.mooncake import TransferEngine` (the one import a Mooncake
  // connector changes): the same classes under Mooncake's names.
  py::module_ mc =
      m.def_submodule("mooncake", "Mooncake's mooncake.engine names over hawser (docs/porting-from-mooncake.md).");
  for (const char* name : {"TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write", "SUPPORT_CUDA",
                           "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_INTRA_NVLINK", "Error"})
    mc.attr(name) = m.attr(name);
  // Mooncake's SharedSegment (mooncake.engine) is refused clearly: a
  // connector that constructs one learns at once what to use instead.
  struct SharedSegmentRefused {};
  py::class_<SharedSegmentRefused>(mc, "SharedSegment",
                                   "Not provided: constructing one raises hawser.Error (not_supported).")
      .def(py::init([](const py::args&, const py::kwargs&) -> SharedSegmentRefused* {
        const Status s{Code::kNotSupported,
                       "SharedSegment: Mooncake's shared segments are not provided by hawser; register the memory "
                       "with register_memory (peers on this host reach it through the shm transport) "
                       "(docs/porting-from-mooncake.md)"};
        t_last_error = s;
        throw Failure{s};
      }));
  py::module_::import("sys").attr("modules")["hawser.mooncake"] = mc;
  hawser::pymod::defineBlocks(cls);  // block requests and plans (py_blocks.cpp)
  bindMetrics(cls);
  // hawser.tensors and hawser.nixl, written in Python (python/pysrc/).
  hawser::pymod::bindObjectHelpers(m);
  hawser::pymod::loadEmbeddedModules(m);
}
