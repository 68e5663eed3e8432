// The Mooncake-compatible C API (hawser/mooncake_c.h) over TransferEngine:
// Mooncake's names, layouts, state numbers and return numbers.
#include "hawser/mooncake_c.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "base/log.h"
#include "hawser/engine.h"

namespace {

using hawser::Code;
using hawser::Status;

struct McEngine {
  hawser::TransferEngine engine;
  std::string host;  // the address the rpc listener is on
  std::mutex mu;
  hawser::SegmentID self = hawser::kInvalidSegment;  // the own segment, opened on first use
  std::map<std::string, std::string> transports;     // installed: name -> name (installTransport's handles)
};

McEngine* of(transfer_engine_t e) { return static_cast<McEngine*>(e); }

// hawser's code as Mooncake's status code (positive).
int statusCode(Code c) {
  switch (c) {
    case Code::kOk: return MC_STATUS_OK;
    case Code::kCapacityExceeded: return MC_STATUS_TOO_MANY_REQUESTS;
    case Code::kNotRegistered: return MC_STATUS_ADDRESS_NOT_REGISTERED;
    case Code::kBatchBusy: return MC_STATUS_BATCH_BUSY;
    case Code::kAddressOverlapped: return MC_STATUS_ADDRESS_OVERLAPPED;
    case Code::kNoTransport: return MC_STATUS_NOT_SUPPORTED_TRANSPORT;
    case Code::kUnavailable:
    case Code::kTimeout: return MC_STATUS_SOCKET;
    case Code::kRemoteError: return MC_STATUS_REJECT_HANDSHAKE;
    case Code::kMetadataError: return MC_STATUS_METADATA;
    case Code::kIoError: return MC_STATUS_CONTEXT;
    case Code::kInternal: return MC_STATUS_MEMORY;
    case Code::kNotSupported: return MC_STATUS_NOT_IMPLEMENTED;
    default: return MC_STATUS_INVALID_ARGUMENT;  // bad input: argument, range, segment, batch, file
  }
}

// For the functions Mooncake implements over its Status.
int asStatus(const Status& s) {
  if (!s.ok()) HLOG_DEBUG("mooncake C API: {}", s.toString());
  return statusCode(s.code());
}

// For the other int functions: Mooncake's ERR_* numbers.
int asError(const Status& s) {
  if (s.ok()) return 0;
  HLOG_DEBUG("mooncake C API: {}", s.toString());
  const int sc = statusCode(s.code());
  return sc == MC_STATUS_NOT_IMPLEMENTED ? MC_ERR_NOT_IMPLEMENTED : -sc;
}

template <class R, class F>
R guarded(R on_exception, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    HLOG_ERROR("mooncake C API: unexpected exception: {}", e.what());
  } catch (...) {
    HLOG_ERROR("mooncake C API: unexpected exception");
  }
  return on_exception;
}

int taskState(hawser::TransferState s) {
  switch (s) {
    case hawser::TransferState::kWaiting: return STATUS_WAITING;
    case hawser::TransferState::kPending: return STATUS_PENDING;
    case hawser::TransferState::kCompleted: return STATUS_COMPLETED;
    case hawser::TransferState::kFailed: return STATUS_FAILED;
    case hawser::TransferState::kTimeout: return STATUS_TIMEOUT;
    case hawser::TransferState::kCanceled: return STATUS_CANCELED;
    case hawser::TransferState::kInvalid: return STATUS_INVALID;
  }
  return STATUS_INVALID;
}

// Mooncake's connection string as a hawser metadata URI.
std::string metadataUri(const char* conn) {
  const std::string c = conn ? conn : "";
  if (c.empty() || c == "P2PHANDSHAKE") return "p2p";
  if (c.find("://") == std::string::npos) return "etcd://" + c;  // Mooncake reads a bare host:port as etcd
  return c;
}

// The hawser segment a request's target_id names (LOCAL_SEGMENT: the own one).
Status segmentOf(McEngine* e, segment_id_t id, hawser::SegmentID& out) {
  if (id < 0) return {Code::kSegmentNotFound, "target_id " + std::to_string(id) + " is not a segment id"};
  if (id != LOCAL_SEGMENT) {
    out = static_cast<hawser::SegmentID>(id);
    return Status::OK();
  }
  std::lock_guard lk(e->mu);
  if (e->self == hawser::kInvalidSegment) {
    Status s = e->engine.openSegment(e->engine.segmentName(), e->self);
    if (!s.ok()) return s;
  }
  out = e->self;
  return Status::OK();
}

Status requests(McEngine* e, const transfer_request* entries, size_t count, std::vector<hawser::TransferRequest>& out) {
  if (!entries && count) return {Code::kInvalidArgument, "entries is null"};
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const transfer_request& r = entries[i];
    if (r.opcode != OPCODE_READ && r.opcode != OPCODE_WRITE)
      return {Code::kInvalidArgument, "entries[" + std::to_string(i) + "]: opcode " + std::to_string(r.opcode) +
                                          " is neither OPCODE_READ nor OPCODE_WRITE"};
    out[i].opcode = r.opcode == OPCODE_READ ? hawser::OpCode::kRead : hawser::OpCode::kWrite;
    if (r.file_id != 0)
      return {Code::kInvalidArgument, "entries[" + std::to_string(i) + "]: file_id " + std::to_string(r.file_id) +
                                          " names a Mooncake file buffer, which hawser does not provide "
                                          "(file_id must be 0; file data moves through file segments)"};
    out[i].source = r.source;
    Status s = segmentOf(e, r.target_id, out[i].target_id);
    if (!s.ok()) return {s.code(), "entries[" + std::to_string(i) + "]: " + s.message()};
    out[i].target_offset = r.target_offset;
    out[i].length = r.length;
  }
  return Status::OK();
}

Status notification(const notify_msg_t& m, hawser::Notification& out) {
  if (!m.name || !m.msg) return {Code::kInvalidArgument, m.name ? "notify_msg.msg is null" : "notify_msg.name is null"};
  out.name = m.name;
  out.message = m.msg;
  return Status::OK();
}

char* copyString(const std::string& s) {
  // Mooncake's receivers read C strings: a name or message with a NUL byte ends there.
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

}  // namespace

extern "C" {

transfer_engine_t createTransferEngine(const char* metadata_conn_string, const char* local_server_name,
                                       const char* ip_or_host_name, uint64_t rpc_port, int auto_discover) {
  (void)auto_discover;
  return guarded<transfer_engine_t>(nullptr, [&]() -> transfer_engine_t {
    if (rpc_port > 65535) {
      HLOG_ERROR("createTransferEngine: rpc_port {} is not a port (0..65535)", rpc_port);
      return nullptr;
    }
    auto e = std::make_unique<McEngine>();
    Status s = e->engine.init(metadataUri(metadata_conn_string), local_server_name ? local_server_name : "",
                              ip_or_host_name ? ip_or_host_name : "", static_cast<uint16_t>(rpc_port));
    if (!s.ok()) {
      HLOG_ERROR("createTransferEngine: {}", s.toString());
      return nullptr;
    }
    e->host = ip_or_host_name && *ip_or_host_name ? ip_or_host_name : "127.0.0.1";
    for (auto& t : e->engine.transports()) e->transports[t] = t;
    return e.release();
  });
}

void destroyTransferEngine(transfer_engine_t engine) { delete of(engine); }

int getLocalIpAndPort(transfer_engine_t engine, char* buf_out, size_t buf_len) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine || !buf_out || buf_len == 0) return MC_ERR_INVALID_ARGUMENT;
    const std::string addr = of(engine)->host + ":" + std::to_string(of(engine)->engine.rpcPort());
    std::snprintf(buf_out, buf_len, "%s", addr.c_str());
    return 0;
  });
}

transport_t installTransport(transfer_engine_t engine, const char* proto, void** args) {
  (void)args;
  return guarded<transport_t>(nullptr, [&]() -> transport_t {
    if (!engine || !proto) return nullptr;
    std::string name = proto;
    if (name == "nvmeof") name = "file";
    if (name == "nvlink_intra") name = "nvlink";
    auto it = of(engine)->transports.find(name);
    if (it == of(engine)->transports.end()) {
      HLOG_WARN("installTransport: transport '{}' is not installed in this engine", proto);
      return nullptr;
    }
    return static_cast<transport_t>(&it->second);
  });
}

int uninstallTransport(transfer_engine_t engine, const char* proto) {
  (void)engine;
  (void)proto;
  return 0;
}

int discoverTopology(transfer_engine_t engine) { return engine ? 0 : MC_ERR_INVALID_ARGUMENT; }

segment_id_t openSegment(transfer_engine_t engine, const char* segment_name) {
  return guarded<segment_id_t>(-1, [&]() -> segment_id_t {
    if (!engine || !segment_name) return -1;
    McEngine* e = of(engine);
    if (e->engine.segmentName() == segment_name) return LOCAL_SEGMENT;
    hawser::SegmentID id = hawser::kInvalidSegment;
    Status s = e->engine.openSegment(segment_name, id);
    if (!s.ok()) {
      HLOG_WARN("openSegment('{}'): {}", segment_name, s.toString());
      return -1;
    }
    if (id > static_cast<hawser::SegmentID>(INT32_MAX)) {
      (void)e->engine.closeSegment(id);
      HLOG_ERROR("openSegment('{}'): segment id {} does not fit Mooncake's 32-bit segment ids", segment_name, id);
      return -1;
    }
    return static_cast<segment_id_t>(id);
  });
}

segment_id_t openSegmentNoCache(transfer_engine_t engine, const char* segment_name) {
  return openSegment(engine, segment_name);
}

int closeSegment(transfer_engine_t engine, segment_id_t segment_id) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine || segment_id < 0) return MC_ERR_INVALID_ARGUMENT;
    if (segment_id == LOCAL_SEGMENT) return 0;
    return asError(of(engine)->engine.closeSegment(static_cast<hawser::SegmentID>(segment_id)));
  });
}

int removeLocalSegment(transfer_engine_t engine, const char* segment_name) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine || !segment_name) return MC_ERR_INVALID_ARGUMENT;
    return asError(of(engine)->engine.unregisterFileSegment(segment_name));
  });
}

int syncSegmentCache(transfer_engine_t engine) { return engine ? 0 : MC_ERR_INVALID_ARGUMENT; }

int warmupEfaSegment(transfer_engine_t engine, const char* segment_name) {
  (void)engine;
  (void)segment_name;
  return MC_ERR_NOT_IMPLEMENTED;
}

int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t* stats, size_t* count) {
  (void)engine;
  (void)stats;
  if (count) *count = 0;
  return MC_ERR_NOT_IMPLEMENTED;
}

int registerLocalMemory(transfer_engine_t engine, void* addr, size_t length, const char* location,
                        int remote_accessible) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine) return MC_ERR_INVALID_ARGUMENT;
    return asError(
        of(engine)->engine.registerLocalMemory(addr, length, location ? location : "*", remote_accessible != 0));
  });
}

int unregisterLocalMemory(transfer_engine_t engine, void* addr) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine) return MC_ERR_INVALID_ARGUMENT;
    return asError(of(engine)->engine.unregisterLocalMemory(addr));
  });
}

int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t* buffer_list, size_t buffer_len,
                             const char* location) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine || (!buffer_list && buffer_len)) return MC_ERR_INVALID_ARGUMENT;
    std::vector<hawser::BufferEntry> v(buffer_len);
    for (size_t i = 0; i < buffer_len; ++i)
      v[i] = hawser::BufferEntry{buffer_list[i].addr, buffer_list[i].length, location ? location : "*", true};
    return asError(of(engine)->engine.registerLocalMemoryBatch(v));
  });
}

int unregisterLocalMemoryBatch(transfer_engine_t engine, void** addr_list, size_t addr_len) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine || (!addr_list && addr_len)) return MC_ERR_INVALID_ARGUMENT;
    return asError(of(engine)->engine.unregisterLocalMemoryBatch(std::vector<void*>(addr_list, addr_list + addr_len)));
  });
}

bool supportFileBuffer(transfer_engine_t engine) {
  (void)engine;
  return false;
}

int registerLocalFile(transfer_engine_t engine, const char* path, size_t size, file_id_t* id) {
  (void)engine;
  (void)path;
  (void)size;
  (void)id;
  return MC_ERR_NOT_IMPLEMENTED;
}

int unregisterLocalFile(transfer_engine_t engine, const char* path) {
  (void)engine;
  (void)path;
  return MC_ERR_NOT_IMPLEMENTED;
}

batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size) {
  return guarded<batch_id_t>(INVALID_BATCH, [&]() -> batch_id_t {
    if (!engine) return INVALID_BATCH;
    hawser::BatchID id = hawser::kInvalidBatch;
    Status s = of(engine)->engine.allocateBatchID(batch_size, id);
    if (!s.ok()) {
      HLOG_WARN("allocateBatchID({}): {}", batch_size, s.toString());
      return INVALID_BATCH;
    }
    return id;
  });
}

int submitTransfer(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request* entries, size_t count) {
  return guarded(MC_STATUS_MEMORY, [&] {
    if (!engine) return MC_STATUS_INVALID_ARGUMENT;
    std::vector<hawser::TransferRequest> reqs;
    Status s = requests(of(engine), entries, count, reqs);
    if (s.ok()) s = of(engine)->engine.submitTransfer(batch_id, reqs);
    return asStatus(s);
  });
}

int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request* entries,
                             size_t count, notify_msg_t notify_msg) {
  return guarded(MC_STATUS_MEMORY, [&] {
    if (!engine) return MC_STATUS_INVALID_ARGUMENT;
    hawser::Notification n;
    Status s = notification(notify_msg, n);
    std::vector<hawser::TransferRequest> reqs;
    if (s.ok()) s = requests(of(engine), entries, count, reqs);
    if (s.ok()) s = of(engine)->engine.submitTransfer(batch_id, reqs, n);
    return asStatus(s);
  });
}

int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id, struct transfer_status* status) {
  return guarded(MC_STATUS_MEMORY, [&] {
    if (!engine || !status) return MC_STATUS_INVALID_ARGUMENT;
    hawser::TransferStatus st;
    Status s = of(engine)->engine.getTransferStatus(batch_id, task_id, st);
    if (s.ok()) {
      status->status = taskState(st.s);
      status->transferred_bytes = st.transferred_bytes;
    }
    return asStatus(s);
  });
}

int freeBatchID(transfer_engine_t engine, batch_id_t batch_id) {
  return guarded(MC_STATUS_MEMORY, [&] {
    if (!engine) return MC_STATUS_INVALID_ARGUMENT;
    return asStatus(of(engine)->engine.freeBatchID(batch_id));
  });
}

notify_msg_t* getNotifsFromEngine(transfer_engine_t engine, int* size) {
  if (size) *size = 0;
  return guarded<notify_msg_t*>(nullptr, [&]() -> notify_msg_t* {
    if (!engine || !size) return nullptr;
    std::vector<hawser::ReceivedNotification> got;
    if (!of(engine)->engine.getNotifies(got).ok()) return nullptr;
    if (got.size() > static_cast<size_t>(INT_MAX)) got.resize(INT_MAX);  // never: the queue is bounded far below
    // At least one entry's worth, so that "none" is not NULL.
    auto* out = static_cast<notify_msg_t*>(std::calloc(got.empty() ? 1 : got.size(), sizeof(notify_msg_t)));
    if (!out) return nullptr;
    for (size_t i = 0; i < got.size(); ++i) {
      out[i].name = copyString(got[i].name);
      out[i].msg = copyString(got[i].message);
      if (!out[i].name || !out[i].msg) {
        freeNotifsMsgBuf(out, static_cast<int>(i + 1));
        HLOG_ERROR("getNotifsFromEngine: out of memory; {} notification(s) lost", got.size());
        return nullptr;
      }
    }
    *size = static_cast<int>(got.size());
    return out;
  });
}

int freeNotifsMsgBuf(notify_msg_t* msg, int size) {
  if (!msg) return 0;
  for (int i = 0; i < size; ++i) {
    std::free(msg[i].name);
    std::free(msg[i].msg);
  }
  std::free(msg);
  return 0;
}

int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg) {
  return guarded(MC_ERR_MEMORY, [&] {
    if (!engine) return MC_ERR_INVALID_ARGUMENT;
    if (target_id > static_cast<uint64_t>(INT32_MAX)) return MC_ERR_INVALID_ARGUMENT;
    McEngine* e = of(engine);
    hawser::Notification n;
    Status s = notification(notify_msg, n);
    hawser::SegmentID seg = hawser::kInvalidSegment;
    if (s.ok()) s = segmentOf(e, static_cast<segment_id_t>(target_id), seg);
    if (s.ok()) s = e->engine.sendNotify(seg, n);
    return asError(s);
  });
}

}  // extern "C"
