// The Python TransferEngine: Mooncake's method names and return conventions
// over hawser::TransferEngine (public API only). Sync calls go through the
// engine's transferSync; async batches are kept in a BatchTable (py_batches.h).
// Larger bodies live apart: initialize in py_engine_init.cpp, the transfer
// paths in py_engine_transfers.cpp, notifications in py_engine_notify.cpp.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"
#include "py_batches.h"
#include "py_managed.h"
#include "py_mooncake.h"
#include "py_support.h"

namespace hawser::pymod {

// ---- the engine ------------------------------------------------------------------

struct BlocksAccess;  // py_blocks.cpp

// Python's TransferNotify (Mooncake's: name, msg); get_notifies() also says
// which peer sent it.
struct Notify {
  Notify() = default;
  Notify(std::string n, std::string m) : name(std::move(n)), msg(std::move(m)) {}
  std::string name;
  std::string msg;
  std::string peer;  // the sender's segment name (received notifications only)
  bool failed = false;  // get_notifies(with_failures=True): its submit failed; error says why
  int code = 0;         // failed: the negative hawser code
  std::string error;
};

// wait_signal's answer (SignalResult).
struct SignalOutcome {
  std::string state, reason, peer, error;
  uint64_t landed = 0;
  int code = 0;  // 0, or the negative hawser code
};

class PyEngine {
  friend struct BlocksAccess;

 public:
  explicit PyEngine(bool raise_on_error) : raise_(raise_on_error) {}
  ~PyEngine() { shutdown(); }
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;

  // -- results (GIL held) --
  int ret(const Status& s) const {
    if (s.ok()) return 0;
    t_last_error = s;
    if (raise_) throw Failure{s};
    return negative(s);
  }
  void fail(const Status& s) const {
    t_last_error = s;
    if (raise_) throw Failure{s};
  }

  // -- setup --
  // config (hawser): {key: value} of the config table (hawser config), for
  // this engine only; it wins over the HAWSER_* environment variables.
  int initialize(const std::string& local_hostname, const std::string& metadata_server, const std::string& protocol,
                 const std::optional<std::string>& device_name, const std::map<std::string, std::string>& config = {}) {
    return initializeUri(local_hostname, metadataUri(metadata_server), protocol, device_name, config);
  }

  int initializeExt(const std::string& local_hostname, const std::string& metadata_server,
                    const std::string& protocol, const std::optional<std::string>& device_name,
                    const std::string& metadata_type) {
    std::string uri = metadata_server;
    if (metadata_server == "P2PHANDSHAKE" || metadata_server == "p2p" || metadata_server.empty())
      uri = "p2p";
    else if (metadata_server.find("://") == std::string::npos)
      uri = (metadata_type.empty() ? std::string("etcd") : metadata_type) + "://" + metadata_server;
    return initializeUri(local_hostname, uri, protocol, device_name);
  }

  int rpcPort() const {
    auto* e = live();
    return e ? e->rpcPort() : 0;
  }
  std::string segmentName() const {
    auto* e = live();
    return e ? e->segmentName() : std::string();
  }
  std::vector<std::string> transports() const {
    auto* e = live();
    return e ? e->transports() : std::vector<std::string>{};
  }

  // The route contract of every request this object submits from now on
  // (docs/routes.md): names as config route.transports / route.require take
  // them; both empty: the engine's contract again.
  int setRouteContract(const std::string& transports, const std::string& require) {
    RouteContract c;
    Status s = parseRouteContract(transports, require, c);
    if (!s.ok()) return ret(context(s, "set_route_contract"));
    if (transports.empty() && require.empty()) c = RouteContract{};
    std::lock_guard lk(route_mu_);
    route_ = c;
    return 0;
  }

  // The contract set_route_contract gave (RouteContract{}: the engine's).
  RouteContract routeContract() const {
    std::lock_guard lk(route_mu_);
    return route_;
  }

  // -- registration --
  int registerMemory(uint64_t addr, uint64_t capacity, const std::string& location, bool remote_accessible) {
    Status s;
    {
      py::gil_scoped_release nogil;
      TransferEngine* e = nullptr;
      s = engine(e);
      if (s.ok())
        s = e->registerLocalMemory(reinterpret_cast<void*>(addr), capacity, location, remote_accessible);
    }
    return ret(context(s, "register_memory"));
  }

  int unregisterMemory(uint64_t addr) { return batchUnregister({addr}, "unregister_memory"); }

  int batchRegisterMemory(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& capacities,
                          const std::string& location) {
    Status s;
    {
      py::gil_scoped_release nogil;
      TransferEngine* e = nullptr;
      s = engine(e);
      if (s.ok() && addrs.size() != capacities.size())
        s = {Code::kInvalidArgument, fmt::format("buffer_addresses has {} entries, capacities {}", addrs.size(),
                                                 capacities.size())};
      // Nothing to register is success, as Mooncake (and as batch_unregister_memory([])).
      if (s.ok() && !addrs.empty()) {
        std::vector<BufferEntry> entries(addrs.size());
        for (size_t i = 0; i < addrs.size(); ++i)
          entries[i] = BufferEntry{reinterpret_cast<void*>(addrs[i]), capacities[i], location, true};
        s = e->registerLocalMemoryBatch(entries);
      }
    }
    return ret(context(s, "batch_register_memory"));
  }

  int batchUnregisterMemory(const std::vector<uint64_t>& addrs) {
    return batchUnregister(addrs, "batch_unregister_memory");
  }

  // -- transfers --
  int transferSync(const std::string& target, uint64_t buffer, uint64_t peer, uint64_t length, OpCode op,
                   const char* what, const std::string& hint) {
    return batchSync(target, {buffer}, {peer}, {length}, op, what, hint);
  }

  // 0 when every byte moved; else the negative code (last_error() says why).
  // An empty batch moves nothing and succeeds, as in Mooncake.
  int batchSync(const std::string& target, const std::vector<uint64_t>& buffers,
                const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                const char* what, const std::string& hint) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = syncTransfer(target, buffers, peers, lengths, op, what, hint, nullptr);
    }
    return ret(s);
  }

  // transfer_sync / batch_transfer_sync: with notify=TransferNotify(name,
  // msg), the target receives it once every byte is in its memory (an empty
  // batch sends it alone); never when the transfer failed. 0 only when the
  // transfer completed and the notification was delivered.
  int batchSyncNotify(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      const py::object& notify, const char* what, const std::string& hint) {
    Notification note;
    if (!notificationFrom(notify, note, what)) return batchSync(target, buffers, peers, lengths, op, what, hint);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = syncTransfer(target, buffers, peers, lengths, op, what, hint, &note);
    }
    return ret(s);
  }

  // notify= as the calls take it: None (false: nothing to send), an object
  // with `name` and `msg` (hawser's or Mooncake's TransferNotify), or a
  // (name, msg) tuple; each str or bytes. TypeError for anything else.
  static bool notificationFrom(const py::handle& notify, Notification& out, const char* what);

  // Every notification received since the last call, oldest first;
  // with_failures: failed notifying submits too (Notify::failed).
  std::vector<Notify> getNotifies(bool with_failures = false);
  // TransferEngine::waitSignal (GIL released); timeout_ms < 0: no deadline.
  SignalOutcome waitSignal(const std::string& peer, const std::string& name, uint64_t expected, int64_t timeout_ms);

  // Positive batch id; 0 on failure, as Mooncake (last_error() says why).
  // With a notification (hawser: Mooncake's async calls take none), it is
  // sent once every request completed, never when one failed.
  uint64_t batchAsync(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      const char* what, const std::string& hint, const Notification* notify = nullptr,
                      const Signal* signal = nullptr) {
    Status s;
    Submitted sub;
    {
      py::gil_scoped_release nogil;
      reap();
      s = submit(what, target, buffers, peers, lengths, op, hint, sub, notify, signal);
      if (s.ok()) batches_.track(sub);
    }
    if (!s.ok()) {
      fail(s);
      return 0;
    }
    return static_cast<uint64_t>(sub.id);
  }

  // Blocks until each batch ends (or its timeout passes: canceled) and frees
  // it. 0 when all completed; else the negative code of the first that did
  // not (last_error() says why), as Mooncake's one int.
  int batchStatus(const std::vector<py::int_>& ids);

  // 1 completed (batch freed), 0 still running, -1 failed (batch freed, or
  // the id is unknown), -2 timed out (canceled and freed): Mooncake's values.
  // last_error() says why for -1 and -2. Past its timeout a batch is canceled.
  int checkStatus(const py::int_& batch_id);

  // -- managed buffers --
  uint64_t allocateManaged(uint64_t length) {
    Status s;
    uint64_t addr = 0;
    {
      py::gil_scoped_release nogil;
      s = allocate(length, addr);
    }
    if (!s.ok()) {
      fail(context(s, "allocate_managed_buffer"));
      return 0;
    }
    return addr;
  }

  // `length` is not checked: Mooncake's callers pass the allocated length
  // or another one; the allocator knows what it gave out.
  int freeManaged(uint64_t addr, uint64_t length) {
    (void)length;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = release(addr);
    }
    return ret(context(s, "free_managed_buffer"));
  }

  // `data`: any contiguous buffer, or a str (its UTF-8 bytes, as Mooncake's
  // char* argument takes it).
  int writeBytes(uint64_t addr, py::object data, uint64_t length) {
    if (py::isinstance<py::str>(data)) data = py::reinterpret_steal<py::object>(PyUnicode_AsUTF8String(data.ptr()));
    if (!data) throw py::error_already_set();
    BufferView view(data);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = checkLocal(addr, length);
      if (s.ok() && length > view.size())
        s = {Code::kInvalidArgument, fmt::format("length {} exceeds the {} bytes of data", length, view.size())};
      if (s.ok() && length > 0) std::memcpy(reinterpret_cast<void*>(addr), view.data(), length);
    }
    return ret(context(s, "write_bytes_to_buffer"));
  }

  // Raises hawser.Error on failure (there is no int to return).
  py::bytes readBytes(uint64_t addr, uint64_t length) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = checkLocal(addr, length);
    }
    if (!s.ok()) {
      s = context(s, "read_bytes_from_buffer");
      t_last_error = s;
      throw Failure{s};
    }
    PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(length));
    if (!b) throw py::error_already_set();
    {
      py::gil_scoped_release nogil;
      if (length > 0) std::memcpy(PyBytes_AS_STRING(b), reinterpret_cast<const void*>(addr), length);
    }
    return py::reinterpret_steal<py::bytes>(b);
  }

  // -- segments --
  uint64_t firstBufferAddress(const std::string& name) {
    std::vector<SegmentBuffer> bufs;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = buffersOf(name, bufs);
      if (s.ok() && bufs.empty())
        s = {Code::kOutOfRange, fmt::format("segment '{}' has no registered buffers", name)};
    }
    if (!s.ok()) {
      fail(context(s, "get_first_buffer_address"));
      return 0;
    }
    return bufs.front().addr;
  }

  std::vector<std::tuple<uint64_t, uint64_t, std::string>> segmentBuffers(const std::string& name) {
    std::vector<SegmentBuffer> bufs;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = buffersOf(name, bufs);
    }
    std::vector<std::tuple<uint64_t, uint64_t, std::string>> out;
    if (!s.ok()) {
      fail(context(s, "get_segment_buffers"));
      return out;
    }
    for (auto& b : bufs) out.emplace_back(b.addr, b.length, b.location);
    return out;
  }

  // The engine's stats (py_metrics.cpp turns them into Python objects);
  // false (last_error set) when it is not initialized.
  bool stats(EngineStats& out, const char* what) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    if (!s.ok()) {
      fail(context(s, what));
      return false;
    }
    py::gil_scoped_release nogil;
    out = e->stats();
    return true;
  }

  // -- what Mooncake's connectors call besides transfers --

  // 0 when the peer answers now (its descriptor fetched afresh), else the
  // negative code (last_error() says why). SGLang probes blacklisted peers.
  int sendProbe(const std::string& peer) {
    Status s;
    {
      py::gil_scoped_release nogil;
      TransferEngine* e = nullptr;
      s = engine(e);
      if (s.ok()) s = e->probeSegment(peer);
    }
    return ret(context(s, fmt::format("send_probe('{}')", peer)));
  }

  // Address of the hawser::TransferEngine (0 before initialize()).
  uint64_t enginePtr() const { return reinterpret_cast<uint64_t>(live()); }

  // Mooncake's topology JSON ({"cpu:N": [[NICs on node N], [others]]}) from
  // this engine's rdma transport, or from a temporary engine (as Mooncake
  // builds one) when this one is not initialized.
  std::string localTopology(const std::optional<std::string>& device_name) {
    py::gil_scoped_release nogil;
    const std::string devices = device_name.value_or("");
    if (TransferEngine* e = live()) return topologyJson(e->diagnose(), devices);
    TransferEngine tmp;
    EngineOptions opts;
    if (!devices.empty()) opts.config["rdma.devices"] = devices;
    Status s = tmp.init("p2p", "topology", "127.0.0.1", 0, opts);
    return topologyJson(s.ok() ? tmp.diagnose() : std::vector<TransportDiagnosis>{}, devices);
  }

  // Mooncake's *_on_cuda: the transfer starts once the work queued on CUDA
  // stream `stream` before the call has finished. hawser waits for that
  // stream, then moves the bytes, and returns when they are in place (Mooncake
  // returns at once and moves them from a stream callback, exiting the process
  // when they fail); work queued after the call therefore sees them. Failures
  // raise hawser.Error (Mooncake raises RuntimeError, its base class).
  void transferOnCuda(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      uint64_t stream, const char* what, const std::string& hint) {
    Status s;
    {
      py::gil_scoped_release nogil;
      TransferEngine* e = nullptr;
      s = engine(e);
      if (s.ok())
        s = context(synchronizeStream(reinterpret_cast<void*>(stream)),
                    fmt::format("{}: stream {}", what, hex(stream)));
      if (s.ok()) s = syncTransfer(target, buffers, peers, lengths, op, what, hint, nullptr);
    }
    if (!s.ok()) {
      t_last_error = s;
      throw Failure{s};
    }
  }

  size_t unreclaimed() {
    py::gil_scoped_release nogil;
    reap();
    size_t engine_orphans = 0;
    if (TransferEngine* e = live())
      for (auto& [k, v] : e->stats().engine)
        if (k == "orphan_batches") engine_orphans = v;
    return batches_.unreclaimed() + engine_orphans;
  }

 private:
  TransferEngine* live() const { return inited_.load(std::memory_order_acquire) ? engine_.get() : nullptr; }

  int initializeUri(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
                    const std::optional<std::string>& device_name,
                    const std::map<std::string, std::string>& config = {}) {
    Status s;
    std::vector<LogLine> lines;
    {
      py::gil_scoped_release nogil;
      s = init(local_hostname, uri, protocol, device_name.value_or(""), config);
      std::lock_guard lk(init_mu_);
      lines.swap(log_);
    }
    emitLog(lines);
    return ret(s);
  }

  Status engine(TransferEngine*& e) const {
    e = live();
    if (!e) return {Code::kInvalidArgument, "engine is not initialized: call initialize() first"};
    return Status::OK();
  }

  // Mooncake's protocol argument, as hawser reads it: "" / "auto" = the
  // engine picks per request; an installed transport's name forces it; a
  // name Mooncake accepts that this host cannot honour ("rdma" without a NIC,
  // "efa", ...) falls back to tcp with one log line, as Mooncake installs tcp
  // where it finds no RDMA NIC. HAWSER_TRANSPORT wins over all of it, then
  // MC_FORCE_TCP (tcp); MC_FORCE_HCA keeps a forced "rdma" from falling back.
  Status init(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
              const std::string& device_name, const std::map<std::string, std::string>& config);

  void shutdown() {
    std::unique_ptr<TransferEngine> e;
    {
      std::lock_guard lk(init_mu_);
      inited_.store(false, std::memory_order_release);
      e = std::move(engine_);
    }
    e.reset();  // stops serving; waits (bounded) for in-flight work
    managed_.unmapAll();
  }

  int batchUnregister(const std::vector<uint64_t>& addrs, const char* what) {
    Status s;
    {
      py::gil_scoped_release nogil;
      TransferEngine* e = nullptr;
      s = engine(e);
      if (s.ok()) {
        for (size_t i = 0; i < addrs.size() && s.ok(); ++i) {
          if (managed_.owns(addrs[i]))
            s = {Code::kInvalidArgument,
                 fmt::format("addrs[{}] = {} is managed by allocate_managed_buffer; use free_managed_buffer", i,
                             hex(addrs[i]))};
        }
      }
      if (s.ok()) {
        std::vector<void*> v(addrs.size());
        for (size_t i = 0; i < addrs.size(); ++i) v[i] = reinterpret_cast<void*>(addrs[i]);
        s = e->unregisterLocalMemoryBatch(v);
      }
    }
    return ret(context(s, what));
  }

  // The segment id for `name`, opened on first use and cached.
  Status segment(TransferEngine* e, const std::string& name, SegmentID& out) {
    {
      std::lock_guard lk(seg_mu_);
      auto it = segments_.find(name);
      if (it != segments_.end()) {
        out = it->second;
        return Status::OK();
      }
    }
    SegmentID id = kInvalidSegment;
    Status s = e->openSegment(name, id);  // its message names the segment
    if (!s.ok()) return s;
    std::lock_guard lk(seg_mu_);
    auto [it, inserted] = segments_.emplace(name, id);
    if (!inserted) (void)e->closeSegment(id);  // another thread opened it meanwhile: drop our reference
    out = it->second;
    return Status::OK();
  }

  Status buffersOf(const std::string& name, std::vector<SegmentBuffer>& out) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    if (!s.ok()) return s;
    SegmentID id = kInvalidSegment;
    s = segment(e, name, id);
    if (!s.ok()) return s;
    return e->segmentBuffers(id, out);
  }

  // Validates the arguments and builds the requests; `out` gets what the
  // outcome needs (sizes, deadline), not a batch.
  Status requests(const char* what, const std::string& target, const std::vector<uint64_t>& buffers,
                  const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                  const std::string& hint, std::vector<TransferRequest>& reqs, Submitted& out);

  // An async batch: requests() then allocate and submit.
  Status submit(const char* what, const std::string& target, const std::vector<uint64_t>& buffers,
                const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                const std::string& hint, Submitted& out, const Notification* notify = nullptr,
                const Signal* signal = nullptr);

  // The sync path (GIL released): one batch through the engine's
  // transferSync (deadline, cancel, bounded wait, free, or an orphan kept
  // until its I/O ends).
  Status syncTransfer(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      const char* what, const std::string& hint, const Notification* notify);

  // A batch id from Python: one that fits no int64 is no batch (-1).
  static int64_t batchId(const py::int_& v) {
    int overflow = 0;
    long long id = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0 || (id == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return -1;
    }
    return id;
  }

  void reap() {
    if (TransferEngine* e = live()) batches_.reap(*e);
  }

  Status peek(int64_t id, const char* what, Submitted& out) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    return s.ok() ? batches_.peek(id, what, out) : context(s, what);
  }

  Status take(int64_t id, const char* what, Submitted& out) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    return s.ok() ? batches_.take(id, what, out) : context(s, what);
  }

  Status finish(const Submitted& sub) { return batches_.finish(*engine_, limits_, sub); }

  Status checkLocal(uint64_t addr, uint64_t length) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    if (!s.ok()) return s;
    if (length == 0) return Status::OK();
    if (addr + length < addr)
      return {Code::kInvalidArgument, fmt::format("addr {} + length {} wraps around", hex(addr), length)};
    return e->checkRegistered(reinterpret_cast<const void*>(addr), length);
  }

  Status allocate(uint64_t length, uint64_t& out) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    return s.ok() ? managed_.allocate(*e, length, out) : s;
  }

  Status release(uint64_t addr) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    return s.ok() ? managed_.release(*e, addr) : s;
  }

  const bool raise_;
  std::mutex init_mu_;
  std::unique_ptr<TransferEngine> engine_;
  std::atomic<bool> inited_{false};
  Limits limits_;
  mutable std::mutex route_mu_;
  RouteContract route_;  // set_route_contract
  std::vector<LogLine> log_;  // what init() has to say, written to Python's logging once the GIL is back

  std::mutex seg_mu_;
  std::unordered_map<std::string, SegmentID> segments_;

  BatchTable batches_;

  ManagedBuffers managed_;
};

inline int codeNumber(int n) { return n < 0 ? -n : n; }

}  // namespace hawser::pymod
