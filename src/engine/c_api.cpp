#include "hawser/c_api.h"

#include <cstring>
#include <new>
#include <string>

#include "hawser/engine.h"

struct hawser_engine {
  hawser::TransferEngine engine;
};

namespace {

thread_local std::string g_last_error;

int ret(const hawser::Status& s) {
  if (s.ok()) return 0;
  g_last_error = s.toString();
  return -static_cast<int>(s.code());
}

int nullArg(const char* what) {
  g_last_error = std::string("invalid_argument: ") + what + " is null";
  return -static_cast<int>(hawser::Code::kInvalidArgument);
}

void toC(const hawser::TransferStatus& st, hawser_status_t* out) {
  out->state = static_cast<int>(st.s);
  out->transferred_bytes = st.transferred_bytes;
  out->error_code = -static_cast<int>(st.error.code());
}

}  // namespace

extern "C" {

int hawser_engine_create(const char* metadata_uri, const char* local_server_name, const char* host,
                         uint16_t rpc_port, hawser_engine_t** out) {
  if (!out) return nullArg("out");
  auto* e = new (std::nothrow) hawser_engine;
  if (!e) return nullArg("allocation");
  hawser::Status s = e->engine.init(metadata_uri ? metadata_uri : "p2p", local_server_name ? local_server_name : "",
                                    host ? host : "", rpc_port);
  if (!s.ok()) {
    delete e;
    return ret(s);
  }
  *out = e;
  return 0;
}

void hawser_engine_destroy(hawser_engine_t* engine) { delete engine; }

uint16_t hawser_rpc_port(hawser_engine_t* engine) { return engine ? engine->engine.rpcPort() : 0; }

int hawser_segment_name(hawser_engine_t* engine, char* buf, size_t len) {
  if (!engine) return nullArg("engine");
  if (!buf || len == 0) return nullArg("buf");
  std::string n = engine->engine.segmentName();
  size_t k = std::min(n.size(), len - 1);
  std::memcpy(buf, n.data(), k);
  buf[k] = '\0';
  return 0;
}

int hawser_register_memory(hawser_engine_t* engine, void* addr, size_t length, const char* location,
                           int remote_accessible) {
  if (!engine) return nullArg("engine");
  return ret(engine->engine.registerLocalMemory(addr, length, location ? location : "cpu:0", remote_accessible != 0));
}

int hawser_unregister_memory(hawser_engine_t* engine, void* addr) {
  if (!engine) return nullArg("engine");
  return ret(engine->engine.unregisterLocalMemory(addr));
}

int hawser_open_segment(hawser_engine_t* engine, const char* name, hawser_segment_id_t* out) {
  if (!engine) return nullArg("engine");
  if (!name) return nullArg("name");
  if (!out) return nullArg("out");
  return ret(engine->engine.openSegment(name, *out));
}

int hawser_close_segment(hawser_engine_t* engine, hawser_segment_id_t id) {
  if (!engine) return nullArg("engine");
  return ret(engine->engine.closeSegment(id));
}

int hawser_allocate_batch(hawser_engine_t* engine, size_t capacity, hawser_batch_id_t* out) {
  if (!engine) return nullArg("engine");
  if (!out) return nullArg("out");
  return ret(engine->engine.allocateBatchID(capacity, *out));
}

int hawser_submit(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests, size_t count) {
  if (!engine) return nullArg("engine");
  if (!requests && count) return nullArg("requests");
  std::vector<hawser::TransferRequest> reqs(count);
  for (size_t i = 0; i < count; ++i) {
    reqs[i].opcode = static_cast<hawser::OpCode>(requests[i].opcode);
    reqs[i].source = requests[i].source;
    reqs[i].target_id = requests[i].target_id;
    reqs[i].target_offset = requests[i].target_offset;
    reqs[i].length = requests[i].length;
  }
  return ret(engine->engine.submitTransfer(batch, reqs));
}

int hawser_task_status(hawser_engine_t* engine, hawser_batch_id_t batch, size_t task_id, hawser_status_t* out) {
  if (!engine) return nullArg("engine");
  if (!out) return nullArg("out");
  hawser::TransferStatus st;
  int rc = ret(engine->engine.getTransferStatus(batch, task_id, st));
  if (rc == 0) toC(st, out);
  return rc;
}

int hawser_batch_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_status_t* out) {
  if (!engine) return nullArg("engine");
  if (!out) return nullArg("out");
  hawser::TransferStatus st;
  int rc = ret(engine->engine.getBatchTransferStatus(batch, st));
  if (rc == 0) toC(st, out);
  return rc;
}

int hawser_wait(hawser_engine_t* engine, hawser_batch_id_t batch, int64_t timeout_ms) {
  if (!engine) return nullArg("engine");
  return ret(engine->engine.waitTransfer(batch, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms)));
}

int hawser_free_batch(hawser_engine_t* engine, hawser_batch_id_t batch) {
  if (!engine) return nullArg("engine");
  return ret(engine->engine.freeBatchID(batch));
}

const char* hawser_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
