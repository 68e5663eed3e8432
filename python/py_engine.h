// The Python TransferEngine: Mooncake's method names and return conventions
// over hawser::TransferEngine (public API only). Sync calls go through the
// engine's transferSync; async batches are kept in a BatchTable (py_batches.h).
// Declarations only (but for ret() and fail(), the two-line result helpers
// every call ends with): the bodies are in py_engine.cpp, initialize's
// engine set-up in py_engine_init.cpp, the transfer paths in
// py_engine_transfers.cpp, notifications in py_engine_notify.cpp.
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
                 const std::optional<std::string>& device_name, const std::map<std::string, std::string>& config = {});

  int initializeExt(const std::string& local_hostname, const std::string& metadata_server,
                    const std::string& protocol, const std::optional<std::string>& device_name,
                    const std::string& metadata_type);

  int rpcPort() const;
  std::string segmentName() const;
  std::vector<std::string> transports() const;

  // The route contract of every request this object submits from now on
  // (docs/routes.md): names as config route.transports / route.require take
  // them; both empty: the engine's contract again.
  int setRouteContract(const std::string& transports, const std::string& require);

  // The contract set_route_contract gave (RouteContract{}: the engine's).
  RouteContract routeContract() const;

  // -- registration --
  int registerMemory(uint64_t addr, uint64_t capacity, const std::string& location, bool remote_accessible);

  int unregisterMemory(uint64_t addr) { return batchUnregister({addr}, "unregister_memory"); }

  int batchRegisterMemory(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& capacities,
                          const std::string& location);

  int batchUnregisterMemory(const std::vector<uint64_t>& addrs);

  // -- transfers --
  int transferSync(const std::string& target, uint64_t buffer, uint64_t peer, uint64_t length, OpCode op,
                   const char* what, const std::string& hint);

  // 0 when every byte moved; else the negative code (last_error() says why).
  // An empty batch moves nothing and succeeds, as in Mooncake.
  int batchSync(const std::string& target, const std::vector<uint64_t>& buffers,
                const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                const char* what, const std::string& hint);

  // transfer_sync / batch_transfer_sync: with notify=TransferNotify(name,
  // msg), the target receives it once every byte is in its memory (an empty
  // batch sends it alone); never when the transfer failed. 0 only when the
  // transfer completed and the notification was delivered.
  int batchSyncNotify(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      const py::object& notify, const char* what, const std::string& hint);

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
                      const Signal* signal = nullptr);

  // Blocks until each batch ends (or its timeout passes: canceled) and frees
  // it. 0 when all completed; else the negative code of the first that did
  // not (last_error() says why), as Mooncake's one int.
  int batchStatus(const std::vector<py::int_>& ids);

  // 1 completed (batch freed), 0 still running, -1 failed (batch freed, or
  // the id is unknown), -2 timed out (canceled and freed): Mooncake's values.
  // last_error() says why for -1 and -2. Past its timeout a batch is canceled.
  int checkStatus(const py::int_& batch_id);
  // Cancels batch `batch_id` (hawser::TransferEngine::cancelTransfer): its
  // slices not yet started end CANCELED; what is in flight ends as it
  // does. Then waits up to python.cancel_wait_ms for every task to end
  // (its waiter, get_batch_transfer_status, returns too). 0 once they
  // ended; invalid_batch when the id is not allocated (never, or already
  // freed by its waiter); the timeout code while tasks still run (their
  // memory is still in use).
  int cancelTransfer(const py::int_& batch_id);

  // -- managed buffers --
  uint64_t allocateManaged(uint64_t length);

  // `length` is not checked: Mooncake's callers pass the allocated length
  // or another one; the allocator knows what it gave out.
  int freeManaged(uint64_t addr, uint64_t length);

  // `data`: any contiguous buffer, or a str (its UTF-8 bytes, as Mooncake's
  // char* argument takes it).
  int writeBytes(uint64_t addr, py::object data, uint64_t length);

  // Raises hawser.Error on failure (there is no int to return).
  py::bytes readBytes(uint64_t addr, uint64_t length);

  // -- segments --
  uint64_t firstBufferAddress(const std::string& name);

  std::vector<std::tuple<uint64_t, uint64_t, std::string>> segmentBuffers(const std::string& name);

  // The engine's stats (py_metrics.cpp turns them into Python objects);
  // false (last_error set) when it is not initialized.
  bool stats(EngineStats& out, const char* what);

  // -- what Mooncake's connectors call besides transfers --

  // 0 when the peer answers now (its descriptor fetched afresh), else the
  // negative code (last_error() says why). SGLang probes blacklisted peers.
  int sendProbe(const std::string& peer);

  // Address of the hawser::TransferEngine (0 before initialize()).
  uint64_t enginePtr() const { return reinterpret_cast<uint64_t>(live()); }

  // Mooncake's topology JSON ({"cpu:N": [[NICs on node N], [others]]}) from
  // this engine's rdma transport, or from a temporary engine (as Mooncake
  // builds one) when this one is not initialized.
  std::string localTopology(const std::optional<std::string>& device_name);

  // Mooncake's *_on_cuda: the transfer starts once the work queued on CUDA
  // stream `stream` before the call has finished. hawser waits for that
  // stream, then moves the bytes, and returns when they are in place (Mooncake
  // returns at once and moves them from a stream callback, exiting the process
  // when they fail); work queued after the call therefore sees them. Failures
  // raise hawser.Error (Mooncake raises RuntimeError, its base class).
  void transferOnCuda(const std::string& target, const std::vector<uint64_t>& buffers,
                      const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                      uint64_t stream, const char* what, const std::string& hint);

  size_t unreclaimed();

 private:
  TransferEngine* live() const { return inited_.load(std::memory_order_acquire) ? engine_.get() : nullptr; }

  int initializeUri(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
                    const std::optional<std::string>& device_name,
                    const std::map<std::string, std::string>& config = {});

  Status engine(TransferEngine*& e) const;

  // Mooncake's protocol argument, as hawser reads it: "" / "auto" = the
  // engine picks per request; an installed transport's name forces it; a
  // name Mooncake accepts that this host cannot honour ("rdma" without a NIC,
  // "efa", ...) falls back to tcp with one log line, as Mooncake installs tcp
  // where it finds no RDMA NIC. HAWSER_TRANSPORT wins over all of it, then
  // MC_FORCE_TCP (tcp); MC_FORCE_HCA keeps a forced "rdma" from falling back.
  Status init(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
              const std::string& device_name, const std::map<std::string, std::string>& config);

  void shutdown();

  int batchUnregister(const std::vector<uint64_t>& addrs, const char* what);

  // The segment id for `name`, opened on first use and cached.
  Status segment(TransferEngine* e, const std::string& name, SegmentID& out);

  Status buffersOf(const std::string& name, std::vector<SegmentBuffer>& out);

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
  static int64_t batchId(const py::int_& v);

  void reap();

  Status peek(int64_t id, const char* what, Submitted& out);

  Status take(int64_t id, const char* what, Submitted& out);

  Status finish(const Submitted& sub) { return batches_.finish(*engine_, limits_, sub); }

  Status checkLocal(uint64_t addr, uint64_t length);

  Status allocate(uint64_t length, uint64_t& out);

  Status release(uint64_t addr);

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
