// The C API (hawser/c_api.h): engine lifecycle, memory, segments, batches.
// Introspection and names are in c_api_info.cpp.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/c_api_util.h"

namespace hawser::capi {

std::string& lastError() {
  thread_local std::string e;
  return e;
}

int fail(Code code, const std::string& message) {
  lastError() = Status(code, message).toString();
  return -static_cast<int>(code);
}

int ret(const Status& s) {
  if (s.ok()) return 0;
  lastError() = s.toString();
  return -static_cast<int>(s.code());
}

int nullArg(const char* what) { return fail(Code::kInvalidArgument, std::string(what) + " is null"); }

// The message is kept in `strings` (the calling function's slot).
void toC(const TransferStatus& st, hawser_status_t* out, Strings& strings) {
  out->state = static_cast<int>(st.s);
  out->transferred_bytes = st.transferred_bytes;
  out->error_code = -static_cast<int>(st.error.code());
  out->error_message = st.error.ok() ? "" : strings.keep(st.error.toString());
}

int toCpp(const hawser_engine_options_t* options, EngineOptions& out) {
  if (!options) return 0;
  if (!options->config && options->config_count) return nullArg("options->config");
  for (size_t i = 0; i < options->config_count; ++i) {
    const hawser_kv_t& kv = options->config[i];
    const std::string at = "options->config[" + std::to_string(i) + "]";
    if (!kv.key) return nullArg((at + ".key").c_str());
    if (!kv.value) return nullArg((at + ".value (key '" + kv.key + "')").c_str());
    out.config[kv.key] = kv.value;
  }
  return 0;
}

// Requests from C; the opcode is checked here because OpCode is 8 bits wide
// (an int of 256 must not become a READ).
int toCpp(const hawser_request_t* requests, size_t count, std::vector<TransferRequest>& out) {
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const hawser_request_t& r = requests[i];
    if (r.opcode != HAWSER_OP_READ && r.opcode != HAWSER_OP_WRITE)
      return fail(Code::kInvalidArgument, "requests[" + std::to_string(i) + "]: opcode " + std::to_string(r.opcode) +
                                              " is neither HAWSER_OP_READ nor HAWSER_OP_WRITE");
    out[i].opcode = static_cast<OpCode>(r.opcode);
    out[i].source = r.source;
    out[i].target_id = r.target_id;
    out[i].target_offset = r.target_offset;
    out[i].length = r.length;
  }
  return 0;
}

}  // namespace hawser::capi

namespace {

using namespace hawser::capi;
using hawser::Code;

// The route contract's bits are the C++ ones.
static_assert(unsigned(HAWSER_ROUTE_TCP) == hawser::kRouteTcp && unsigned(HAWSER_ROUTE_SHM) == hawser::kRouteShm &&
              unsigned(HAWSER_ROUTE_RDMA) == hawser::kRouteRdma &&
              unsigned(HAWSER_ROUTE_NVLINK) == hawser::kRouteNvlink && unsigned(HAWSER_ROUTE_FILE) == hawser::kRouteFile);
static_assert(unsigned(HAWSER_ROUTE_ZERO_COPY) == hawser::kZeroCopy &&
              unsigned(HAWSER_ROUTE_NO_STAGING) == hawser::kNoStaging &&
              unsigned(HAWSER_ROUTE_SAME_HOST) == hawser::kSameHost);
// The C codes are the negated C++ codes: keep them in step.
static_assert(HAWSER_E_INVALID_ARGUMENT == -int(Code::kInvalidArgument));
static_assert(HAWSER_E_ADDRESS_OVERLAPPED == -int(Code::kAddressOverlapped));
static_assert(HAWSER_E_NOT_REGISTERED == -int(Code::kNotRegistered));
static_assert(HAWSER_E_OUT_OF_RANGE == -int(Code::kOutOfRange));
static_assert(HAWSER_E_SEGMENT_NOT_FOUND == -int(Code::kSegmentNotFound));
static_assert(HAWSER_E_INVALID_BATCH == -int(Code::kInvalidBatch));
static_assert(HAWSER_E_CAPACITY_EXCEEDED == -int(Code::kCapacityExceeded));
static_assert(HAWSER_E_BATCH_BUSY == -int(Code::kBatchBusy));
static_assert(HAWSER_E_NO_TRANSPORT == -int(Code::kNoTransport));
static_assert(HAWSER_E_FILE_NOT_FOUND == -int(Code::kFileNotFound));
static_assert(HAWSER_E_PERMISSION_DENIED == -int(Code::kPermissionDenied));
static_assert(HAWSER_E_PATH_NOT_MAPPED == -int(Code::kPathNotMapped));
static_assert(HAWSER_E_FILE_TOO_SHORT == -int(Code::kFileTooShort));
static_assert(HAWSER_E_UNAVAILABLE == -int(Code::kUnavailable));
static_assert(HAWSER_E_TIMEOUT == -int(Code::kTimeout));
static_assert(HAWSER_E_IO_ERROR == -int(Code::kIoError));
static_assert(HAWSER_E_REMOTE_ERROR == -int(Code::kRemoteError));
static_assert(HAWSER_E_METADATA_ERROR == -int(Code::kMetadataError));
static_assert(HAWSER_E_NOT_SUPPORTED == -int(Code::kNotSupported));
static_assert(HAWSER_E_INTERNAL == -int(Code::kInternal));
static_assert(HAWSER_COMPLETED == int(hawser::TransferState::kCompleted) &&
              HAWSER_INVALID == int(hawser::TransferState::kInvalid));
static_assert(std::is_same_v<hawser_segment_id_t, hawser::SegmentID> &&
              std::is_same_v<hawser_batch_id_t, hawser::BatchID>);

std::chrono::milliseconds millis(int64_t ms) { return std::chrono::milliseconds(ms < 0 ? 0 : ms); }

int create(const char* metadata_uri, const char* local_server_name, const char* host, uint16_t rpc_port,
           const hawser_engine_options_t* options, hawser_engine_t** out) {
  if (!out) return nullArg("out");
  hawser::EngineOptions opts;
  if (int rc = toCpp(options, opts); rc != 0) return rc;
  auto e = std::make_unique<hawser_engine>();
  int rc = ret(e->engine.init(metadata_uri ? metadata_uri : "p2p", local_server_name ? local_server_name : "",
                              host ? host : "", rpc_port, opts));
  if (rc == 0) *out = e.release();
  return rc;
}

}  // namespace

extern "C" {

int hawser_engine_create(const char* metadata_uri, const char* local_server_name, const char* host,
                         uint16_t rpc_port, hawser_engine_t** out) {
  return guarded([&] { return create(metadata_uri, local_server_name, host, rpc_port, nullptr, out); });
}

int hawser_engine_create_with_options(const char* metadata_uri, const char* local_server_name, const char* host,
                                      uint16_t rpc_port, const hawser_engine_options_t* options,
                                      hawser_engine_t** out) {
  return guarded([&] { return create(metadata_uri, local_server_name, host, rpc_port, options, out); });
}

void hawser_engine_destroy(hawser_engine_t* engine) { delete engine; }

uint16_t hawser_rpc_port(hawser_engine_t* engine) { return engine ? engine->engine.rpcPort() : 0; }

int hawser_segment_name(hawser_engine_t* engine, char* buf, size_t len) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!buf || len == 0) return nullArg("buf");
    std::string n = engine->engine.segmentName();
    size_t k = std::min(n.size(), len - 1);
    std::memcpy(buf, n.data(), k);
    buf[k] = '\0';
    return 0;
  });
}

int hawser_register_memory(hawser_engine_t* engine, void* addr, size_t length, const char* location,
                           int remote_accessible) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.registerLocalMemory(addr, length, location ? location : "*", remote_accessible != 0));
  });
}

int hawser_register_memory_batch(hawser_engine_t* engine, const hawser_buffer_entry_t* entries, size_t count) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!entries) return nullArg("entries");
    std::vector<hawser::BufferEntry> v(count);
    for (size_t i = 0; i < count; ++i) {
      v[i].addr = entries[i].addr;
      v[i].length = entries[i].length;
      v[i].location = entries[i].location ? entries[i].location : "*";
      v[i].remote_accessible = entries[i].remote_accessible != 0;
    }
    return ret(engine->engine.registerLocalMemoryBatch(v));
  });
}

int hawser_unregister_memory(hawser_engine_t* engine, void* addr) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.unregisterLocalMemory(addr));
  });
}

int hawser_unregister_memory_batch(hawser_engine_t* engine, void* const* addrs, size_t count) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!addrs && count) return nullArg("addrs");
    return ret(engine->engine.unregisterLocalMemoryBatch(std::vector<void*>(addrs, addrs + count)));
  });
}

int hawser_check_registered(hawser_engine_t* engine, const void* addr, size_t length) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.checkRegistered(addr, length));
  });
}

int hawser_open_segment(hawser_engine_t* engine, const char* name, hawser_segment_id_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!name) return nullArg("name");
    if (!out) return nullArg("out");
    hawser::SegmentID id = hawser::kInvalidSegment;
    int rc = ret(engine->engine.openSegment(name, id));
    if (rc == 0) *out = id;
    return rc;
  });
}

int hawser_close_segment(hawser_engine_t* engine, hawser_segment_id_t id) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.closeSegment(id));
  });
}

int hawser_segment_buffers(hawser_engine_t* engine, hawser_segment_id_t id, hawser_segment_buffer_t* out,
                           size_t* count) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!count) return nullArg("count");
    std::vector<hawser::SegmentBuffer> bufs;
    int rc = ret(engine->engine.segmentBuffers(id, bufs));
    if (rc != 0) return rc;
    if (!fitsOrReport(out, count, bufs.size(), "segment buffers", &rc)) return rc;
    strings.clear();
    for (size_t i = 0; i < bufs.size(); ++i)
      out[i] = hawser_segment_buffer_t{bufs[i].addr, bufs[i].length, strings.keep(bufs[i].location)};
    *count = bufs.size();
    return 0;
  });
}

int hawser_probe_segment(hawser_engine_t* engine, const char* name) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!name) return nullArg("name");
    return ret(engine->engine.probeSegment(name));
  });
}

int hawser_register_file_segment(hawser_engine_t* engine, const char* name, const hawser_file_desc_t* files,
                                 size_t count) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!name) return nullArg("name");
    if (!files) return nullArg("files");
    std::vector<hawser::FileDesc> v(count);
    for (size_t i = 0; i < count; ++i) {
      const hawser_file_desc_t& f = files[i];
      const std::string at = "files[" + std::to_string(i) + "]";
      v[i].file_path = f.file_path ? f.file_path : "";
      v[i].length = f.length;
      if (!f.local_path_map && f.local_path_map_count) return nullArg((at + ".local_path_map").c_str());
      for (size_t j = 0; j < f.local_path_map_count; ++j) {
        const hawser_kv_t& kv = f.local_path_map[j];
        if (!kv.key || !kv.value)
          return nullArg((at + ".local_path_map[" + std::to_string(j) + "]." + (kv.key ? "value" : "key")).c_str());
        v[i].local_path_map[kv.key] = kv.value;
      }
    }
    return ret(engine->engine.registerFileSegment(name, v));
  });
}

int hawser_unregister_file_segment(hawser_engine_t* engine, const char* name) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!name) return nullArg("name");
    return ret(engine->engine.unregisterFileSegment(name));
  });
}

int hawser_allocate_batch(hawser_engine_t* engine, size_t capacity, hawser_batch_id_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    hawser::BatchID id = hawser::kInvalidBatch;
    int rc = ret(engine->engine.allocateBatchID(capacity, id));
    if (rc == 0) *out = id;
    return rc;
  });
}

int hawser_submit(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests, size_t count) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    return ret(engine->engine.submitTransfer(batch, reqs));
  });
}

int hawser_submit_routed(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                         size_t count, const hawser_route_contract_t* contract) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    if (contract)
      for (auto& r : reqs) r.route = hawser::RouteContract{true, contract->transports, contract->require};
    return ret(engine->engine.submitTransfer(batch, reqs));
  });
}

int hawser_task_status(hawser_engine_t* engine, hawser_batch_id_t batch, size_t task_id, hawser_status_t* out) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    hawser::TransferStatus st;
    int rc = ret(engine->engine.getTransferStatus(batch, task_id, st));
    if (rc == 0) {
      strings.clear();
      toC(st, out, strings);
    }
    return rc;
  });
}

int hawser_batch_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_status_t* out) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    hawser::TransferStatus st;
    int rc = ret(engine->engine.getBatchTransferStatus(batch, st));
    if (rc == 0) {
      strings.clear();
      toC(st, out, strings);
    }
    return rc;
  });
}

int hawser_wait(hawser_engine_t* engine, hawser_batch_id_t batch, int64_t timeout_ms) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.waitTransfer(batch, millis(timeout_ms)));
  });
}

int hawser_cancel(hawser_engine_t* engine, hawser_batch_id_t batch) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.cancelTransfer(batch));
  });
}

int hawser_free_batch(hawser_engine_t* engine, hawser_batch_id_t batch) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.freeBatchID(batch));
  });
}

int hawser_transfer_sync(hawser_engine_t* engine, const hawser_request_t* requests, size_t count,
                         int64_t timeout_ms, hawser_status_t* statuses) {
  thread_local Strings strings;
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!requests && count) return nullArg("requests");
    std::vector<hawser::TransferRequest> reqs;
    if (int rc = toCpp(requests, count, reqs); rc != 0) return rc;
    std::vector<hawser::TransferStatus> sts;
    int rc = ret(engine->engine.transferSync(reqs, millis(timeout_ms), statuses ? &sts : nullptr));
    if (statuses && sts.size() == count) {  // submitted: one status per request
      strings.clear();
      for (size_t i = 0; i < count; ++i) toC(sts[i], &statuses[i], strings);
    }
    return rc;
  });
}

const char* hawser_last_error(void) { return lastError().c_str(); }

}  // extern "C"
