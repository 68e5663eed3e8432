/* hawser — C API over hawser::TransferEngine.
 *
 * Every function returns 0 on success or the negative hawser Code (see
 * hawser/status.h: -1 invalid argument, -2 address overlapped, ...);
 * hawser_last_error() gives the message of this thread's last failure.
 */
#ifndef HAWSER_C_API_H
#define HAWSER_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hawser_engine hawser_engine_t;
typedef uint64_t hawser_segment_id_t;
typedef uint64_t hawser_batch_id_t;

enum { HAWSER_OP_READ = 0, HAWSER_OP_WRITE = 1 };
enum {
  HAWSER_WAITING = 0, HAWSER_PENDING = 1, HAWSER_COMPLETED = 2, HAWSER_FAILED = 3,
  HAWSER_TIMEOUT = 4, HAWSER_CANCELED = 5, HAWSER_INVALID = 6
};

typedef struct {
  int opcode; /* HAWSER_OP_READ | HAWSER_OP_WRITE */
  void* source;
  hawser_segment_id_t target_id;
  uint64_t target_offset;
  size_t length;
} hawser_request_t;

typedef struct {
  int state; /* HAWSER_WAITING ... */
  size_t transferred_bytes;
  int error_code; /* 0, or the negative Code of the failure */
} hawser_status_t;

/* metadata_uri: "p2p" or "etcd://host:port[,...]"; host NULL = 127.0.0.1; rpc_port 0 = any. */
int hawser_engine_create(const char* metadata_uri, const char* local_server_name, const char* host,
                         uint16_t rpc_port, hawser_engine_t** out);
void hawser_engine_destroy(hawser_engine_t* engine);
uint16_t hawser_rpc_port(hawser_engine_t* engine);
/* Copies the segment name peers use into buf (NUL-terminated, truncated to len). */
int hawser_segment_name(hawser_engine_t* engine, char* buf, size_t len);

int hawser_register_memory(hawser_engine_t* engine, void* addr, size_t length, const char* location,
                           int remote_accessible);
int hawser_unregister_memory(hawser_engine_t* engine, void* addr);

int hawser_open_segment(hawser_engine_t* engine, const char* name, hawser_segment_id_t* out);
int hawser_close_segment(hawser_engine_t* engine, hawser_segment_id_t id);

int hawser_allocate_batch(hawser_engine_t* engine, size_t capacity, hawser_batch_id_t* out);
int hawser_submit(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests, size_t count);
int hawser_task_status(hawser_engine_t* engine, hawser_batch_id_t batch, size_t task_id, hawser_status_t* out);
int hawser_batch_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_status_t* out);
int hawser_wait(hawser_engine_t* engine, hawser_batch_id_t batch, int64_t timeout_ms);
int hawser_free_batch(hawser_engine_t* engine, hawser_batch_id_t batch);

/* Message of this thread's last failed call ("" if none). */
const char* hawser_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HAWSER_C_API_H */
