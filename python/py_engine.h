// The Python TransferEngine: Mooncake's method names and return conventions
// over hawser::TransferEngine (public API only). Sync calls go through the
// engine's transferSync; async batches are kept in a BatchTable (py_batches.h).
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
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "hawser/config.h"
#include "hawser/engine.h"
#include "py_batches.h"
#include "py_managed.h"
#include "py_support.h"

namespace hawser::pymod {

// ---- the engine ------------------------------------------------------------------

struct BlocksAccess;  // py_blocks.cpp

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
  int initialize(const std::string& local_hostname, const std::string& metadata_server, const std::string& protocol,
                 const std::string& device_name) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = init(local_hostname, metadataUri(metadata_server), protocol, device_name);
    }
    return ret(s);
  }

  int initializeExt(const std::string& local_hostname, const std::string& metadata_server,
                    const std::string& protocol, const std::string& device_name, const std::string& metadata_type) {
    std::string uri = metadata_server;
    if (metadata_server == "P2PHANDSHAKE" || metadata_server == "p2p" || metadata_server.empty())
      uri = "p2p";
    else if (metadata_server.find("://") == std::string::npos)
      uri = (metadata_type.empty() ? std::string("etcd") : metadata_type) + "://" + metadata_server;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = init(local_hostname, uri, protocol, device_name);
    }
    return ret(s);
  }

  // Drains the notifications received so far (py_notify.cpp: get_notifies).
  Status getNotifies(std::vector<ReceivedNotification>& out) {
    py::gil_scoped_release nogil;
    TransferEngine* e = nullptr;
    Status s = engine(e);
    if (s.ok()) s = e->getNotifies(out);
    return context(s, "get_notifies");
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
      if (s.ok()) {
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
                   const char* what, const std::string& hint, const Notification* notify = nullptr) {
    return batchSync(target, {buffer}, {peer}, {length}, op, what, hint, notify);
  }

  int batchSync(const std::string& target, const std::vector<uint64_t>& buffers,
                const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                const char* what, const std::string& hint, const Notification* notify = nullptr) {
    Status s;
    {
      py::gil_scoped_release nogil;
      reap();
      Submitted sub;
      std::vector<TransferRequest> reqs;
      s = requests(what, target, buffers, peers, lengths, op, hint, reqs, sub);
      if (s.ok()) {
        // The engine's synchronous transfer: deadline, cancel, bounded wait,
        // free (or keep an orphan until its I/O ends).
        const auto now = Clock::now();
        const Millis limit = sub.deadline > now ? std::chrono::ceil<Millis>(sub.deadline - now) : Millis(0);
        std::vector<TransferStatus> st;
        // With a notification: sent once every request completed; its refusal is the result.
        Status r = notify ? engine_->transferSync(reqs, *notify, limit, &st, Millis(limits_.cancel_wait_ms))
                          : engine_->transferSync(reqs, limit, &st, Millis(limits_.cancel_wait_ms));
        bool notify_failed = false;  // the transfer completed, its notification did not go
        if (notify && !r.ok() && !st.empty()) {
          notify_failed = true;
          for (auto& t : st) notify_failed &= t.s == TransferState::kCompleted;
        }
        if ((!r.ok() && st.empty()) || notify_failed)
          s = context(r, fmt::format("{} to '{}'", what, target));  // refused at submit, or the notification failed
        else s = outcome(limits_, sub, st, r.code() == Code::kTimeout, fmt::format("{} to '{}'", what, target));
      }
    }
    return ret(s);
  }

  // Positive batch id, or the negative code.
  int64_t batchAsync(const std::string& target, const std::vector<uint64_t>& buffers,
                     const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                     const char* what, const std::string& hint, const Notification* notify = nullptr) {
    Status s;
    Submitted sub;
    {
      py::gil_scoped_release nogil;
      reap();
      s = submit(what, target, buffers, peers, lengths, op, hint, sub, notify);
      if (s.ok()) {
        batches_.track(sub);
      }
    }
    if (!s.ok()) return ret(s);
    return static_cast<int64_t>(sub.id);
  }

  // Blocks until each batch ends (or its timeout passes: canceled), frees it,
  // and returns 0 or the negative code per batch.
  std::vector<int> batchStatus(const std::vector<int64_t>& ids) {
    std::vector<int> out(ids.size(), 0);
    Status last;
    {
      py::gil_scoped_release nogil;
      for (size_t i = 0; i < ids.size(); ++i) {
        Submitted sub;
        Status s = take(ids[i], "get_batch_transfer_status", sub);
        if (s.ok()) s = finish(sub);
        if (!s.ok()) {
          out[i] = negative(s);
          last = s;
        }
      }
    }
    if (!last.ok()) fail(last);
    return out;
  }

  // 1 = completed (batch freed), 0 = still running, -1 = failed (batch freed;
  // last_error() says why). Past its timeout a batch is canceled and fails.
  int checkStatus(int64_t id) {
    Status s;
    int result = -1;
    {
      py::gil_scoped_release nogil;
      Submitted sub;
      s = peek(id, "transfer_check_status", sub);
      if (s.ok()) {
        TransferEngine* e = engine_.get();
        (void)e->waitTransfer(sub.id, Millis(0));  // drives polling transports
        TransferStatus st;
        s = e->getBatchTransferStatus(sub.id, st);
        if (s.ok() && !isTerminal(st.s) && Clock::now() < sub.deadline) {
          result = 0;
        } else if (s.ok()) {
          s = take(id, "transfer_check_status", sub);
          if (s.ok()) s = finish(sub);
          result = s.ok() ? 1 : -1;
        }
      }
    }
    if (result == -1) fail(s);
    return result;
  }

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

  int freeManaged(uint64_t addr, uint64_t length) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = release(addr, length);
    }
    return ret(context(s, "free_managed_buffer"));
  }

  int writeBytes(uint64_t addr, py::object data, uint64_t length) {
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

  Status engine(TransferEngine*& e) const {
    e = live();
    if (!e) return {Code::kInvalidArgument, "engine is not initialized: call initialize() first"};
    return Status::OK();
  }

  Status init(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
              const std::string& device_name) {
    std::lock_guard lk(init_mu_);
    if (live())
      return {Code::kInvalidArgument,
              fmt::format("initialize: already initialized (segment '{}')", engine_->segmentName())};
    std::string host;
    uint16_t port = 0;
    Status s = splitHostPort(local_hostname, host, port);
    if (!s.ok()) return context(s, "initialize");
    auto e = std::make_unique<TransferEngine>();
    EngineOptions opts;
    // Every python.* knob is in the config table (hawser/config.h): read
    // through the public API, validated as init() validates it.
    ConfigSource src = ConfigSource::kDefault;
    std::string text;
    // HAWSER_TRANSPORT / HAWSER_RDMA_DEVICES set by the operator win over
    // the arguments (a caller that hard-codes "rdma" can be redirected).
    std::string proto = lower(protocol);
    bool forced_by_arg = false;
    // Any installed transport's name forces it; the engine refuses a name
    // that is not installed here, listing those that are.
    if (!proto.empty() && proto != "auto") {
      if (!(s = configValue("transport", opts, text, &src)).ok()) return context(s, "initialize");
      if (src == ConfigSource::kDefault) {
        opts.config["transport"] = proto;
        forced_by_arg = true;
      }
    }
    if (!device_name.empty()) {
      if (!(s = configValue("rdma.devices", opts, text, &src)).ok()) return context(s, "initialize");
      if (src == ConfigSource::kDefault) opts.config["rdma.devices"] = device_name;
    }

    if (!(s = configInt("python.sync_timeout_ms", opts, limits_.sync_timeout_ms, &src)).ok())
      return context(s, "initialize");
    if (src == ConfigSource::kDefault) {
      // Mooncake's knob (seconds) is honoured when ours is not set.
      if (const char* mc = std::getenv("MC_TRANSFER_TIMEOUT")) {
        std::string_view t(mc);
        int64_t sec = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), sec);
        if (t.empty() || ec != std::errc() || p != t.data() + t.size() || sec < 1 || sec > 86400)
          return {Code::kInvalidArgument,
                  fmt::format("initialize: MC_TRANSFER_TIMEOUT = '{}' is not a number of seconds in 1..86400", mc)};
        limits_.sync_timeout_ms = sec * 1000;
      }
    }
    int64_t pool = 0;
    if (!(s = configInt("python.sync_timeout_ns_per_byte", opts, limits_.ns_per_byte)).ok() ||
        !(s = configInt("python.cancel_wait_ms", opts, limits_.cancel_wait_ms)).ok() ||
        !(s = configInt("python.managed_pool_size", opts, pool)).ok())
      return context(s, "initialize");
    managed_.setPoolSize(static_cast<uint64_t>(pool));

    s = e->init(uri, local_hostname, host, port, opts);
    // A protocol this build has no transport for: init refuses the value of
    // config `transport` (kInvalidArgument); for the protocol argument that
    // is Mooncake's "not supported".
    if (s.code() == Code::kInvalidArgument && forced_by_arg && s.message().find("config transport ") != std::string::npos)
      return {Code::kNotSupported, fmt::format("initialize: protocol '{}' is not supported: {}", protocol, s.message())};
    if (s.code() == Code::kNoTransport && forced_by_arg)
      return {s.code(), fmt::format("initialize: protocol '{}': {}; pass an installed transport or \"auto\" "
                                    "(or set HAWSER_TRANSPORT, which wins over the argument)",
                                    protocol, s.message())};
    if (!s.ok()) return context(s, "initialize");
    engine_ = std::move(e);
    inited_.store(true, std::memory_order_release);
    return Status::OK();
  }

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
                  const std::string& hint, std::vector<TransferRequest>& reqs, Submitted& out) {
    const std::string where = fmt::format("{} to '{}'", what, target);
    TransferEngine* e = nullptr;
    Status s = engine(e);
    if (!s.ok()) return context(s, what);
    if (!hint.empty())
      return {Code::kNotSupported,
              fmt::format("{}: transport_hint '{}' is not supported: hawser picks the transport per request "
                          "(force one with initialize(protocol=...) or HAWSER_TRANSPORT)",
                          where, hint)};
    if (buffers.size() != peers.size() || buffers.size() != lengths.size())
      return {Code::kInvalidArgument,
              fmt::format("{}: buffers ({}), peer_buffer_addresses ({}) and lengths ({}) differ in length", where,
                          buffers.size(), peers.size(), lengths.size())};
    if (buffers.empty()) return {Code::kInvalidArgument, fmt::format("{}: buffers is empty", where)};
    SegmentID seg = kInvalidSegment;
    s = segment(e, target, seg);
    if (!s.ok()) return context(s, what);
    reqs.assign(buffers.size(), TransferRequest{});
    uint64_t bytes = 0;
    for (size_t i = 0; i < buffers.size(); ++i) {
      reqs[i] = TransferRequest{op, reinterpret_cast<void*>(buffers[i]), seg, peers[i], lengths[i]};
      bytes = bytes + lengths[i] < bytes ? UINT64_MAX : bytes + lengths[i];
    }
    out.tasks = reqs.size();
    out.bytes = bytes;
    out.what = what;
    out.target = target;
    // Timeout: python.sync_timeout_ms + bytes * python.sync_timeout_ns_per_byte.
    double ns = static_cast<double>(bytes) * static_cast<double>(limits_.ns_per_byte);
    double total_ms = static_cast<double>(limits_.sync_timeout_ms) + ns / 1e6;
    total_ms = std::min(total_ms, 1e12);
    out.deadline = Clock::now() + Millis(static_cast<int64_t>(total_ms));
    return Status::OK();
  }

  // An async batch: requests() then allocate and submit.
  Status submit(const char* what, const std::string& target, const std::vector<uint64_t>& buffers,
                const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                const std::string& hint, Submitted& out, const Notification* notify = nullptr) {
    std::vector<TransferRequest> reqs;
    Status s = requests(what, target, buffers, peers, lengths, op, hint, reqs, out);
    if (!s.ok()) return s;
    const std::string where = fmt::format("{} to '{}'", what, target);
    TransferEngine* e = engine_.get();
    BatchID b = kInvalidBatch;
    s = e->allocateBatchID(reqs.size(), b);
    if (!s.ok()) return context(s, where);
    s = notify ? e->submitTransfer(b, reqs, *notify) : e->submitTransfer(b, reqs);
    if (!s.ok()) {
      (void)e->freeBatchID(b);  // nothing was accepted: the batch is empty
      return context(s, where);
    }
    out.id = b;
    return Status::OK();
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

  Status release(uint64_t addr, uint64_t length) {
    TransferEngine* e = nullptr;
    Status s = engine(e);
    return s.ok() ? managed_.release(*e, addr, length) : s;
  }

  const bool raise_;
  std::mutex init_mu_;
  std::unique_ptr<TransferEngine> engine_;
  std::atomic<bool> inited_{false};
  Limits limits_;

  std::mutex seg_mu_;
  std::unordered_map<std::string, SegmentID> segments_;

  BatchTable batches_;

  ManagedBuffers managed_;
};

inline int codeNumber(int n) { return n < 0 ? -n : n; }

}  // namespace hawser::pymod
