/* hawser — a Mooncake-compatible C API.
 *
 * The functions, argument types, struct layouts, special ids, task states
 * and return numbers of Mooncake Transfer Engine's C header
 * (transfer_engine_c.h), implemented over hawser::TransferEngine, so that a
 * C program (or a Rust/Go binding) written for Mooncake builds against this
 * header and links with -lhawser unchanged. docs/c_api.md ("Mooncake-
 * compatible API") lists what differs; hawser's own C API is hawser/c_api.h
 * (do not include both in one translation unit: this header defines
 * Mooncake's macro names).
 *
 * Return numbers, as Mooncake's:
 *   - functions Mooncake implements over its Status (submitTransfer,
 *     submitTransferWithNotify, getTransferStatus, freeBatchID) return 0 or
 *     a positive Mooncake status code (MC_STATUS_* below);
 *   - the other int functions return 0 or a negative Mooncake error number
 *     (MC_ERR_* below: the status code negated, except "not implemented");
 *   - openSegment returns the segment id (>= 0) or -1; allocateBatchID
 *     returns INVALID_BATCH on failure; createTransferEngine returns NULL.
 * hawser's own code for a failure maps onto them as the table in
 * docs/c_api.md ("Mooncake-compatible API") says; hawser_last_error() in
 * hawser/c_api.h is not set by these functions.
 *
 * Beyond Mooncake: no function aborts on bad input (a NULL engine or pointer
 * is MC_ERR_INVALID_ARGUMENT / MC_STATUS_INVALID_ARGUMENT / -1 / NULL), and a
 * notification (submitTransferWithNotify) is delivered only after every
 * request of its submit COMPLETED, never for a failed one; a receiver whose
 * queue is full (config notify.queue_depth) is an error at the sender.
 *
 * Strings given to these functions are copied before they return.
 */
#ifndef HAWSER_MOONCAKE_C_H
#define HAWSER_MOONCAKE_C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ids, as Mooncake spells them (macros, not typedefs). */
#define segment_handle_t int32_t
#define segment_id_t int32_t
#define file_id_t uint32_t
#define batch_id_t uint64_t
/* The engine's own memory, as a request's target_id (needs no openSegment). */
#define LOCAL_SEGMENT (0)
#define INVALID_BATCH UINT64_MAX

#define OPCODE_READ (0)
#define OPCODE_WRITE (1)

/* One request: move `length` bytes between registered local memory at
 * `source` and segment `target_id` at `target_offset` (the remote virtual
 * address). file_id: 0 (memory); hawser has no Mooncake file buffers
 * (supportFileBuffer() is false), so any other value is refused with
 * MC_STATUS_INVALID_ARGUMENT. */
struct transfer_request {
  int opcode; /* OPCODE_READ | OPCODE_WRITE */
  void* source;
  segment_id_t target_id;
  file_id_t file_id;
  uint64_t target_offset;
  uint64_t length;
};
typedef struct transfer_request transfer_request_t;

/* A notification: two NUL-terminated strings. */
struct notify_msg {
  char* name;
  char* msg;
};
typedef struct notify_msg notify_msg_t;

/* Task states, numbered as Mooncake's (hawser's own numbering differs:
 * hawser/c_api.h). */
#define STATUS_WAITING (0)
#define STATUS_PENDING (1)
#define STATUS_INVALID (2)
#define STATUS_CANCELED (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT (5)
#define STATUS_FAILED (6)

struct transfer_status {
  int status; /* STATUS_* */
  uint64_t transferred_bytes;
};
typedef struct transfer_status transfer_status_t;

struct buffer_entry {
  void* addr;
  size_t length;
};
typedef struct buffer_entry buffer_entry_t;

typedef void* transfer_engine_t;
typedef void* transport_t;

/* hawser keeps no per-NIC load statistics: getNicLoadStats always answers
 * MC_ERR_NOT_IMPLEMENTED, and the struct is left incomplete here. */
typedef struct nic_load_stat nic_load_stat_t;

/* Mooncake's status codes (positive; returned by the Status functions). */
#define MC_STATUS_OK (0)
#define MC_STATUS_INVALID_ARGUMENT (1)
#define MC_STATUS_TOO_MANY_REQUESTS (2)       /* batch capacity; the receiver's notification queue is full */
#define MC_STATUS_ADDRESS_NOT_REGISTERED (3)
#define MC_STATUS_BATCH_BUSY (4)
#define MC_STATUS_DEVICE_NOT_FOUND (6)
#define MC_STATUS_ADDRESS_OVERLAPPED (7)
#define MC_STATUS_NOT_SUPPORTED_TRANSPORT (8) /* no installed transport can serve the request */
#define MC_STATUS_SOCKET (102)                /* peer or service unreachable, or timed out */
#define MC_STATUS_REJECT_HANDSHAKE (104)      /* the peer refused */
#define MC_STATUS_METADATA (200)
#define MC_STATUS_CONTEXT (202)               /* an I/O or device error */
#define MC_STATUS_MEMORY (302)                /* out of memory, or an internal failure */
#define MC_STATUS_NOT_IMPLEMENTED (999)

/* Mooncake's error numbers (negative; returned by the other int functions). */
#define MC_ERR_INVALID_ARGUMENT (-1)
#define MC_ERR_TOO_MANY_REQUESTS (-2)
#define MC_ERR_ADDRESS_NOT_REGISTERED (-3)
#define MC_ERR_BATCH_BUSY (-4)
#define MC_ERR_DEVICE_NOT_FOUND (-6)
#define MC_ERR_ADDRESS_OVERLAPPED (-7)
#define MC_ERR_NOT_SUPPORTED_TRANSPORT (-8)
#define MC_ERR_SOCKET (-102)
#define MC_ERR_REJECT_HANDSHAKE (-104)
#define MC_ERR_METADATA (-200)
#define MC_ERR_CONTEXT (-202)
#define MC_ERR_MEMORY (-302)
#define MC_ERR_NOT_IMPLEMENTED (-303)

/* ---- Engine ---------------------------------------------------------------- */

/* Creates and initializes an engine; NULL on failure (the reason is logged).
 * metadata_conn_string: "P2PHANDSHAKE" (no metadata service; segments are
 * named "ip:port"), "etcd://host:port[,...]", "http://host:port/metadata"
 * (Mooncake's HTTP metadata server), or a bare "host:port" (etcd, as
 * Mooncake reads it). ip_or_host_name: address to listen on and advertise
 * (NULL or "" = 127.0.0.1). rpc_port: 0 picks a free port; above 65535 is
 * refused. auto_discover is accepted and ignored: hawser installs every
 * transport the host supports and picks one per request. */
transfer_engine_t createTransferEngine(const char* metadata_conn_string, const char* local_server_name,
                                       const char* ip_or_host_name, uint64_t rpc_port, int auto_discover);
/* Stops serving, waits (bounded) for in-flight work and frees the engine. NULL is a no-op. */
void destroyTransferEngine(transfer_engine_t engine);
/* Writes "ip:port" of the engine's rpc listener (NUL-terminated, truncated to buf_len). 0 or MC_ERR_*. */
int getLocalIpAndPort(transfer_engine_t engine, char* buf_out, size_t buf_len);
/* hawser installs transports at creation: returns a non-NULL handle when `proto` ("tcp", "rdma", "shm",
 * "nvlink", "nvmeof") is installed, NULL otherwise. args is ignored. */
transport_t installTransport(transfer_engine_t engine, const char* proto, void** args);
/* Accepted and ignored, as in Mooncake: 0. */
int uninstallTransport(transfer_engine_t engine, const char* proto);
/* hawser finds the host's devices at creation: 0. */
int discoverTopology(transfer_engine_t engine);

/* ---- Segments -------------------------------------------------------------- */

/* Opens a peer's segment by name: its id (>= 1; the own segment's name gives LOCAL_SEGMENT), or -1. */
segment_id_t openSegment(transfer_engine_t engine, const char* segment_name);
/* As openSegment; hawser re-fetches a changed descriptor on its own. */
segment_id_t openSegmentNoCache(transfer_engine_t engine, const char* segment_name);
/* Drops one reference to an open segment: 0, or MC_ERR_INVALID_ARGUMENT when it is not open. */
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);
/* Removes a file segment this engine published under `segment_name`: 0 or MC_ERR_*. */
int removeLocalSegment(transfer_engine_t engine, const char* segment_name);
/* hawser refreshes descriptors that changed on its own: 0. */
int syncSegmentCache(transfer_engine_t engine);
/* EFA endpoints: hawser has no EFA transport. MC_ERR_NOT_IMPLEMENTED. */
int warmupEfaSegment(transfer_engine_t engine, const char* segment_name);
/* Per-NIC load: not kept by hawser. *count is set to 0; MC_ERR_NOT_IMPLEMENTED. */
int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t* stats, size_t* count);

/* ---- Local memory ---------------------------------------------------------- */

/* Registers [addr, addr+length) (location: "cpu:N", "cuda:N", "*" or NULL = detect). 0 or MC_ERR_*
 * (MC_ERR_ADDRESS_OVERLAPPED when it overlaps a registered region, MC_ERR_INVALID_ARGUMENT for NULL/0). */
int registerLocalMemory(transfer_engine_t engine, void* addr, size_t length, const char* location,
                        int remote_accessible);
/* 0, or MC_ERR_ADDRESS_NOT_REGISTERED when no region starts at addr. */
int unregisterLocalMemory(transfer_engine_t engine, void* addr);
/* All or nothing; every region remote accessible, at `location`. 0 or MC_ERR_*. */
int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t* buffer_list, size_t buffer_len,
                             const char* location);
/* All or nothing. 0 or MC_ERR_*. */
int unregisterLocalMemoryBatch(transfer_engine_t engine, void** addr_list, size_t addr_len);

/* Mooncake's file buffers (a local file addressed by a request's file_id)
 * are not provided: hawser moves file data through file segments
 * (hawser/engine.h registerFileSegment, "file://" targets). supportFileBuffer
 * is false; registerLocalFile and unregisterLocalFile answer
 * MC_ERR_NOT_IMPLEMENTED (and leave *id untouched). */
bool supportFileBuffer(transfer_engine_t engine);
int registerLocalFile(transfer_engine_t engine, const char* path, size_t size, file_id_t* id);
int unregisterLocalFile(transfer_engine_t engine, const char* path);

/* ---- Batches --------------------------------------------------------------- */

/* A batch of at most batch_size requests; INVALID_BATCH on failure (0 or too large a size). */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);
/* Submits `count` requests, all or nothing; 0 or MC_STATUS_* (count 0 is 0). */
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request* entries, size_t count);
/* As submitTransfer; once every one of these requests COMPLETED, notify_msg is delivered to the owner of
 * entries[0].target_id (never when one fails). count >= 1. */
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request* entries,
                             size_t count, notify_msg_t notify_msg);
/* Status of task `task_id` (the index of a request across the batch's submits). 0 or MC_STATUS_*. */
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id, struct transfer_status* status);
/* 0, MC_STATUS_BATCH_BUSY while a task is unfinished, MC_STATUS_INVALID_ARGUMENT for an unknown batch. */
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* ---- Notifications --------------------------------------------------------- */

/* Takes every notification received so far, oldest first: a malloc'd array of *size entries whose strings
 * are malloc'd too (free all with freeNotifsMsgBuf). Never NULL on success, even when *size is 0; NULL (and
 * *size 0) for a NULL engine or size. */
notify_msg_t* getNotifsFromEngine(transfer_engine_t engine, int* size);
/* Frees what getNotifsFromEngine returned. 0. */
int freeNotifsMsgBuf(notify_msg_t* msg, int size);
/* Sends notify_msg to the owner of open segment target_id and waits until it is queued there. 0, or
 * MC_ERR_TOO_MANY_REQUESTS when the receiver's queue is full, MC_ERR_SOCKET when it cannot be reached,
 * MC_ERR_INVALID_ARGUMENT for a segment that is not open. */
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg);

#ifdef __cplusplus
}
#endif

#endif /* HAWSER_MOONCAKE_C_H */
