// PyEngine (py_engine.h): setup, registration, the sync and async transfer
// entry points, managed buffers, segments and the calls Mooncake's
// connectors make besides transfers. initialize's engine set-up lives in
// py_engine_init.cpp, the request paths in py_engine_transfers.cpp,
// notifications in py_engine_notify.cpp.
#include "py_engine.h"

namespace hawser::pymod {

int PyEngine::initialize(const std::string& local_hostname, const std::string& metadata_server,
                         const std::string& protocol, const std::optional<std::string>& device_name,
                         const std::map<std::string, std::string>& config) {
  return initializeUri(local_hostname, metadataUri(metadata_server), protocol, device_name, config);
}

int PyEngine::initializeExt(const std::string& local_hostname, const std::string& metadata_server,
                            const std::string& protocol, const std::optional<std::string>& device_name,
                            const std::string& metadata_type) {
  std::string uri = metadata_server;
  if (metadata_server == "P2PHANDSHAKE" || metadata_server == "p2p" || metadata_server.empty())
    uri = "p2p";
  else if (metadata_server.find("://") == std::string::npos)
    uri = (metadata_type.empty() ? std::string("etcd") : metadata_type) + "://" + metadata_server;
  return initializeUri(local_hostname, uri, protocol, device_name);
}

int PyEngine::rpcPort() const {
  auto* e = live();
  return e ? e->rpcPort() : 0;
}

std::string PyEngine::segmentName() const {
  auto* e = live();
  return e ? e->segmentName() : std::string();
}

std::vector<std::string> PyEngine::transports() const {
  auto* e = live();
  return e ? e->transports() : std::vector<std::string>{};
}

int PyEngine::setRouteContract(const std::string& transports, const std::string& require) {
  RouteContract c;
  Status s = parseRouteContract(transports, require, c);
  if (!s.ok()) return ret(context(s, "set_route_contract"));
  if (transports.empty() && require.empty()) c = RouteContract{};
  std::lock_guard lk(route_mu_);
  route_ = c;
  return 0;
}

RouteContract PyEngine::routeContract() const {
  std::lock_guard lk(route_mu_);
  return route_;
}

int PyEngine::registerMemory(uint64_t addr, uint64_t capacity, const std::string& location, bool remote_accessible) {
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

int PyEngine::batchRegisterMemory(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& capacities,
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

int PyEngine::batchUnregisterMemory(const std::vector<uint64_t>& addrs) {
  return batchUnregister(addrs, "batch_unregister_memory");
}

int PyEngine::transferSync(const std::string& target, uint64_t buffer, uint64_t peer, uint64_t length, OpCode op,
                           const char* what, const std::string& hint) {
  return batchSync(target, {buffer}, {peer}, {length}, op, what, hint);
}

int PyEngine::batchSync(const std::string& target, const std::vector<uint64_t>& buffers,
                        const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                        const char* what, const std::string& hint) {
  Status s;
  {
    py::gil_scoped_release nogil;
    s = syncTransfer(target, buffers, peers, lengths, op, what, hint, nullptr);
  }
  return ret(s);
}

int PyEngine::batchSyncNotify(const std::string& target, const std::vector<uint64_t>& buffers,
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

uint64_t PyEngine::batchAsync(const std::string& target, const std::vector<uint64_t>& buffers,
                              const std::vector<uint64_t>& peers, const std::vector<uint64_t>& lengths, OpCode op,
                              const char* what, const std::string& hint, const Notification* notify,
                              const Signal* signal) {
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

uint64_t PyEngine::allocateManaged(uint64_t length) {
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

int PyEngine::freeManaged(uint64_t addr, uint64_t length) {
  (void)length;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = release(addr);
  }
  return ret(context(s, "free_managed_buffer"));
}

int PyEngine::writeBytes(uint64_t addr, py::object data, uint64_t length) {
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

py::bytes PyEngine::readBytes(uint64_t addr, uint64_t length) {
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

uint64_t PyEngine::firstBufferAddress(const std::string& name) {
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

std::vector<std::tuple<uint64_t, uint64_t, std::string>> PyEngine::segmentBuffers(const std::string& name) {
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

bool PyEngine::stats(EngineStats& out, const char* what) {
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

int PyEngine::sendProbe(const std::string& peer) {
  Status s;
  {
    py::gil_scoped_release nogil;
    TransferEngine* e = nullptr;
    s = engine(e);
    if (s.ok()) s = e->probeSegment(peer);
  }
  return ret(context(s, fmt::format("send_probe('{}')", peer)));
}

std::string PyEngine::localTopology(const std::optional<std::string>& device_name) {
  py::gil_scoped_release nogil;
  const std::string devices = device_name.value_or("");
  if (TransferEngine* e = live()) return topologyJson(e->diagnose(), devices);
  TransferEngine tmp;
  EngineOptions opts;
  if (!devices.empty()) opts.config["rdma.devices"] = devices;
  Status s = tmp.init("p2p", "topology", "127.0.0.1", 0, opts);
  return topologyJson(s.ok() ? tmp.diagnose() : std::vector<TransportDiagnosis>{}, devices);
}

void PyEngine::transferOnCuda(const std::string& target, const std::vector<uint64_t>& buffers,
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

size_t PyEngine::unreclaimed() {
  py::gil_scoped_release nogil;
  reap();
  size_t engine_orphans = 0;
  if (TransferEngine* e = live())
    for (auto& [k, v] : e->stats().engine)
      if (k == "orphan_batches") engine_orphans = v;
  return batches_.unreclaimed() + engine_orphans;
}

int PyEngine::initializeUri(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
                            const std::optional<std::string>& device_name, const std::map<std::string,
                            std::string>& config) {
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

Status PyEngine::engine(TransferEngine*& e) const {
  e = live();
  if (!e) return {Code::kInvalidArgument, "engine is not initialized: call initialize() first"};
  return Status::OK();
}

void PyEngine::shutdown() {
  std::unique_ptr<TransferEngine> e;
  {
    std::lock_guard lk(init_mu_);
    inited_.store(false, std::memory_order_release);
    e = std::move(engine_);
  }
  e.reset();  // stops serving; waits (bounded) for in-flight work
  managed_.unmapAll();
}

int PyEngine::batchUnregister(const std::vector<uint64_t>& addrs, const char* what) {
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

Status PyEngine::segment(TransferEngine* e, const std::string& name, SegmentID& out) {
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

Status PyEngine::buffersOf(const std::string& name, std::vector<SegmentBuffer>& out) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  if (!s.ok()) return s;
  SegmentID id = kInvalidSegment;
  s = segment(e, name, id);
  if (!s.ok()) return s;
  return e->segmentBuffers(id, out);
}

int64_t PyEngine::batchId(const py::int_& v) {
  int overflow = 0;
  long long id = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0 || (id == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return -1;
  }
  return id;
}

void PyEngine::reap() {
  if (TransferEngine* e = live()) batches_.reap(*e);
}

Status PyEngine::peek(int64_t id, const char* what, Submitted& out) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  return s.ok() ? batches_.peek(id, what, out) : context(s, what);
}

Status PyEngine::take(int64_t id, const char* what, Submitted& out) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  return s.ok() ? batches_.take(id, what, out) : context(s, what);
}

Status PyEngine::checkLocal(uint64_t addr, uint64_t length) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  if (!s.ok()) return s;
  if (length == 0) return Status::OK();
  if (addr + length < addr)
    return {Code::kInvalidArgument, fmt::format("addr {} + length {} wraps around", hex(addr), length)};
  return e->checkRegistered(reinterpret_cast<const void*>(addr), length);
}

Status PyEngine::allocate(uint64_t length, uint64_t& out) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  return s.ok() ? managed_.allocate(*e, length, out) : s;
}

Status PyEngine::release(uint64_t addr) {
  TransferEngine* e = nullptr;
  Status s = engine(e);
  return s.ok() ? managed_.release(*e, addr) : s;
}

}  // namespace hawser::pymod
