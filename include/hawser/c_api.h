/* hawser — C API over hawser::TransferEngine (hawser/engine.h): the same calls
 * with C types. Every C++ call has a C function here, and so do the free
 * functions of config.h, host_memory.h and device_memory.h; MetadataAdmin
 * (metadata.h) is C++ only (see the end). docs/c_api.md maps them.
 *
 * Return values: every int function returns 0 on success or the negative
 * hawser Code (HAWSER_E_* below, the values of hawser::Code in hawser/status.h
 * negated); hawser_last_error() gives the message of this thread's last
 * failure. No function throws or aborts on bad input; a NULL pointer where one
 * is required is HAWSER_E_INVALID_ARGUMENT naming the argument.
 *
 * Output arrays: functions that return a list take a caller-provided array
 * `out` and `size_t* count`. On entry *count is the array's capacity; on
 * success it is set to the number of entries written. When the array is too
 * small the function writes nothing to it, sets *count to the needed number
 * and returns HAWSER_E_CAPACITY_EXCEEDED. out == NULL is a size query: *count
 * receives the needed number and the call returns 0.
 *
 * Strings: `const char*` given to the library are copied before the call
 * returns. `const char*` the library hands back (in output structs) are owned
 * by the library and stay valid until the next call of the same function on
 * the same thread (or the thread's exit); copy what you keep longer. Names of
 * codes and states are static.
 *
 * All functions are thread-safe (as the C++ engine).
 */
#ifndef HAWSER_C_API_H
#define HAWSER_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hawser_engine hawser_engine_t;
typedef uint64_t hawser_segment_id_t; /* 0 is never valid */
typedef uint64_t hawser_batch_id_t;   /* 0 is never valid */

/* Return codes: the negated hawser::Code. */
enum {
  HAWSER_OK = 0,
  HAWSER_E_INVALID_ARGUMENT = -1,   /* a bad value: NULL pointer, zero length, bad URI or config value */
  HAWSER_E_ADDRESS_OVERLAPPED = -2, /* registration overlaps a registered region */
  HAWSER_E_NOT_REGISTERED = -3,     /* local range not inside one registered region */
  HAWSER_E_OUT_OF_RANGE = -4,       /* remote range not inside the target segment */
  HAWSER_E_SEGMENT_NOT_FOUND = -5,  /* unknown segment name or id */
  HAWSER_E_INVALID_BATCH = -6,      /* unknown or already freed batch id */
  HAWSER_E_CAPACITY_EXCEEDED = -7,  /* batch capacity, or a caller's output array, too small */
  HAWSER_E_BATCH_BUSY = -8,         /* the batch still has unfinished work */
  HAWSER_E_NO_TRANSPORT = -9,       /* no installed transport can serve the request */
  HAWSER_E_FILE_NOT_FOUND = -10,
  HAWSER_E_PERMISSION_DENIED = -11,
  HAWSER_E_PATH_NOT_MAPPED = -12,   /* no local path for this host in a file's local_path_map */
  HAWSER_E_FILE_TOO_SHORT = -13,
  HAWSER_E_UNAVAILABLE = -14,       /* peer or service unreachable */
  HAWSER_E_TIMEOUT = -15,
  HAWSER_E_IO_ERROR = -16,
  HAWSER_E_REMOTE_ERROR = -17,
  HAWSER_E_METADATA_ERROR = -18,
  HAWSER_E_NOT_SUPPORTED = -19,
  HAWSER_E_INTERNAL = -20
};

enum { HAWSER_OP_READ = 0, HAWSER_OP_WRITE = 1 };
/* Task states; a state >= HAWSER_COMPLETED is terminal (C++ isTerminal). */
enum {
  HAWSER_WAITING = 0, HAWSER_PENDING = 1, HAWSER_COMPLETED = 2, HAWSER_FAILED = 3,
  HAWSER_TIMEOUT = 4, HAWSER_CANCELED = 5, HAWSER_INVALID = 6
};

/* One request (C++ TransferRequest): move `length` bytes between registered
 * local memory at `source` and segment `target_id` at `target_offset` (memory
 * segment: the remote virtual address; file segment: the logical offset). */
typedef struct {
  int opcode; /* HAWSER_OP_READ | HAWSER_OP_WRITE */
  void* source;
  hawser_segment_id_t target_id;
  uint64_t target_offset;
  size_t length;
} hawser_request_t;

/* A task's or batch's status (C++ TransferStatus). */
typedef struct {
  int state;                /* HAWSER_WAITING ... HAWSER_INVALID */
  size_t transferred_bytes; /* bytes of completed slices only */
  int error_code;           /* 0, or the negative code of the failure */
  const char* error_message; /* "" when error_code is 0; library-owned (see Strings above) */
} hawser_status_t;

/* A key/value pair of strings: config entries, path maps, diagnosis facts. */
typedef struct {
  const char* key;
  const char* value;
} hawser_kv_t;

/* Options for hawser_engine_create_with_options (C++ EngineOptions). */
typedef struct {
  const hawser_kv_t* config; /* tunables by key ("tcp.connections" -> "4"); win over HAWSER_* env */
  size_t config_count;
} hawser_engine_options_t;

/* One region for hawser_register_memory_batch (C++ BufferEntry). */
typedef struct {
  void* addr;
  size_t length;
  const char* location;  /* "cpu:N", "cuda:N", "*" (detect); NULL = "*" */
  int remote_accessible; /* nonzero: peers may read/write it */
} hawser_buffer_entry_t;

/* One backing file of a file segment (C++ FileDesc); the segment's logical
 * space is its files concatenated in order. */
typedef struct {
  const char* file_path;              /* default path (absolute); NULL = none */
  uint64_t length;                    /* bytes of this file in the segment */
  const hawser_kv_t* local_path_map;  /* key: server name, value: the path on that host */
  size_t local_path_map_count;
} hawser_file_desc_t;

/* One buffer of an open segment (C++ SegmentBuffer). */
typedef struct {
  uint64_t addr;        /* memory: remote virtual address; file: logical offset */
  uint64_t length;
  const char* location; /* "cpu:0", "cuda:1", or the file path; library-owned */
} hawser_segment_buffer_t;

/* One counter of hawser_stats (C++ EngineStats, flattened). All strings library-owned. */
typedef struct {
  const char* transport; /* "" for the engine's own counters, else the transport's name */
  const char* name;
  uint64_t value;
} hawser_counter_t;

/* One sample of hawser_metrics (C++ EngineStats::metrics), flattened as the Prometheus text format
 * writes it: a histogram gives name_bucket samples (the last label "le", cumulative, ending at
 * "+Inf"), name_sum and name_count. docs/metrics.md lists the families. All strings library-owned. */
typedef struct {
  const char* name;         /* "hawser_transferred_bytes_total", "hawser_task_duration_seconds_bucket", ... */
  const char* type;         /* the family's type: "counter", "gauge" or "histogram" */
  const hawser_kv_t* labels;
  size_t label_count;
  double value;
} hawser_metric_t;

/* One transport of this build (C++ TransportDiagnosis). All strings library-owned. */
typedef struct {
  const char* transport;
  int installed;            /* nonzero when installed */
  const char* reason;       /* why not installed ("" when installed) */
  int cost_rank;            /* lower is preferred */
  const char* moves;        /* what it can move */
  const hawser_kv_t* facts; /* what it found (NICs, io_uring, settings...) */
  size_t fact_count;
} hawser_diagnosis_t;

/* A device or I/O facility a transport found on this host (C++ DeviceRecord), as fields a program
 * reads without parsing the diagnosis's words. Fields a kind does not fill keep -1, 0 or "". All
 * strings library-owned. */
typedef struct {
  const char* transport;  /* the transport that found it: "rdma", "nvlink", "file" */
  const char* kind;       /* "nic", "gpu", "io_uring", "cufile" */
  const char* name;       /* NIC: the ibverbs device ("mlx5_0"); GPU: "cuda:<ordinal>"; "io_uring";
                             cuFile: the library's path or name */
  int index;              /* NIC: the engine's index of a NIC in use (-1: not used); GPU: the CUDA ordinal */
  int numa_node;          /* NIC, GPU: the NUMA node the device hangs off; -1 unknown */
  const char* pci_bus_id; /* GPU: lower case ("0000:3b:00.0"), "" when the driver does not say */
  int port;               /* NIC: the port chosen (1-based), 0 when it has no active port */
  const char* mode;       /* NIC: "InfiniBand" | "Ethernet"; io_uring: "usable" | "unavailable" | "off" |
                             "absent"; cuFile: "gds" | "compat" | "absent" | "off"; GPU: "" */
  int used;               /* nonzero when the transport uses it */
  const char* reason;     /* why not used ("" when used) */
} hawser_device_t;

/* Which transport a request would take, and why (C++ RouteExplanation). Library-owned. */
typedef struct {
  const char* transport; /* "" when none can serve it */
  const char* why;
} hawser_route_t;

/* ---- Engine ---------------------------------------------------------------- */

/* Creates and initializes an engine (C++ TransferEngine + init). metadata_uri: "p2p" (NULL), "P2PHANDSHAKE",
 * "etcd://host:port[,...]", "etcds://host:port[,...]" (TLS) or "http://host:port/path" (Mooncake's HTTP
 * metadata server): hawser/engine.h; host NULL or "" = 127.0.0.1; rpc_port 0 = any. *out set on success only. */
int hawser_engine_create(const char* metadata_uri, const char* local_server_name, const char* host,
                         uint16_t rpc_port, hawser_engine_t** out);
/* As hawser_engine_create with options (NULL = none), checked as EngineOptions says: a bad value
 * (or a NULL key/value) fails with HAWSER_E_INVALID_ARGUMENT, the last error naming the key. */
int hawser_engine_create_with_options(const char* metadata_uri, const char* local_server_name, const char* host,
                                      uint16_t rpc_port, const hawser_engine_options_t* options,
                                      hawser_engine_t** out);
/* Stops serving, waits (bounded) for in-flight work, frees the engine. NULL is a no-op. */
void hawser_engine_destroy(hawser_engine_t* engine);
/* The RPC port the engine listens on (0 for a NULL engine). */
uint16_t hawser_rpc_port(hawser_engine_t* engine);
/* Copies the segment name peers open to reach this engine into buf (NUL-terminated, truncated to len). */
int hawser_segment_name(hawser_engine_t* engine, char* buf, size_t len);

/* ---- Local memory ---------------------------------------------------------- */

/* Registers [addr, addr+length) in every transport and publishes it. location NULL = "*": the CUDA
   driver (when loaded) and the kernel say whether it is GPU memory ("cuda:N") or host ("cpu:<NUMA node>"). */
int hawser_register_memory(hawser_engine_t* engine, void* addr, size_t length, const char* location,
                           int remote_accessible);
/* Registers `count` regions, all or nothing (count 0 or a NULL entries array is invalid). */
int hawser_register_memory_batch(hawser_engine_t* engine, const hawser_buffer_entry_t* entries, size_t count);
/* Unregisters the region starting at addr; HAWSER_E_NOT_REGISTERED if none does. */
int hawser_unregister_memory(hawser_engine_t* engine, void* addr);
/* Unregisters `count` regions by start address; all or nothing: one unknown address changes nothing. */
int hawser_unregister_memory_batch(hawser_engine_t* engine, void* const* addrs, size_t count);
/* 0 when [addr, addr+length) lies inside one registered region, else HAWSER_E_NOT_REGISTERED. */
int hawser_check_registered(hawser_engine_t* engine, const void* addr, size_t length);

/* ---- Segments -------------------------------------------------------------- */

/* Opens a memory segment ("host:port" with p2p) or a file segment ("file:///abs/path" or a name
 * registered with hawser_register_file_segment). Opening a name twice gives the same id (refcounted). */
int hawser_open_segment(hawser_engine_t* engine, const char* name, hawser_segment_id_t* out);
/* Drops one reference to an open segment; HAWSER_E_SEGMENT_NOT_FOUND if it is not open. */
int hawser_close_segment(hawser_engine_t* engine, hawser_segment_id_t id);
/* The buffers of an open segment, refreshed from metadata, memory segments' in their owner's registration
 * order (see Output arrays; locations library-owned). */
int hawser_segment_buffers(hawser_engine_t* engine, hawser_segment_id_t id, hawser_segment_buffer_t* out,
                           size_t* count);
/* Publishes a named file segment made of `files` (count >= 1), concatenated in order. */
int hawser_register_file_segment(hawser_engine_t* engine, const char* name, const hawser_file_desc_t* files,
                                 size_t count);
/* Removes a named file segment; HAWSER_E_SEGMENT_NOT_FOUND if there is none. */
int hawser_unregister_file_segment(hawser_engine_t* engine, const char* name);
/* Fetches segment `name`'s descriptor now, bypassing what hawser_open_segment cached: with p2p from the peer
 * itself (0 means it answers), with etcd from the store. The error (HAWSER_E_UNAVAILABLE,
 * HAWSER_E_SEGMENT_NOT_FOUND, HAWSER_E_TIMEOUT, ...) says why not. */
int hawser_probe_segment(hawser_engine_t* engine, const char* name);

/* ---- Batches --------------------------------------------------------------- */

/* Allocates a batch of at most `capacity` tasks. */
int hawser_allocate_batch(hawser_engine_t* engine, size_t capacity, hawser_batch_id_t* out);
/* Submits `count` requests, all or nothing; task ids continue across submits of one batch. */
int hawser_submit(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests, size_t count);
/* A route contract (C++ RouteContract; docs/routes.md): the transports a request may take (HAWSER_ROUTE_*
 * bits; 0: any) and the properties its route must give (HAWSER_ROUTE_ZERO_COPY, ...; 0: none). */
enum {
  HAWSER_ROUTE_TCP = 1 << 0, HAWSER_ROUTE_SHM = 1 << 1, HAWSER_ROUTE_RDMA = 1 << 2, HAWSER_ROUTE_NVLINK = 1 << 3,
  HAWSER_ROUTE_FILE = 1 << 4
};
enum { HAWSER_ROUTE_ZERO_COPY = 1 << 0, HAWSER_ROUTE_NO_STAGING = 1 << 1, HAWSER_ROUTE_SAME_HOST = 1 << 2 };
typedef struct {
  uint32_t transports;
  uint32_t require;
} hawser_route_contract_t;
/* As hawser_submit, every request under `contract` instead of the engine's (config route.transports,
 * route.require; NULL: the engine's). A request it forbids: HAWSER_E_NO_TRANSPORT, and hawser_last_error names
 * the transport it would have taken, the one expected and why that one is unavailable. */
int hawser_submit_routed(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                         size_t count, const hawser_route_contract_t* contract);
/* Status of task `task_id` of the batch (error_message library-owned). */
int hawser_task_status(hawser_engine_t* engine, hawser_batch_id_t batch, size_t task_id, hawser_status_t* out);
/* Aggregate status of every task of the batch (state ranked, bytes summed; error_message library-owned). */
int hawser_batch_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_status_t* out);
/* Waits until every task is terminal (0, whatever the states) or timeout_ms passes (HAWSER_E_TIMEOUT). */
int hawser_wait(hawser_engine_t* engine, hawser_batch_id_t batch, int64_t timeout_ms);
/* Cancels what has not completed; the tasks end CANCELED (or FAILED). Wait before freeing. */
int hawser_cancel(hawser_engine_t* engine, hawser_batch_id_t batch);
/* Frees the batch: HAWSER_E_BATCH_BUSY while work is unfinished, HAWSER_E_INVALID_BATCH if unknown/freed. */
int hawser_free_batch(hawser_engine_t* engine, hawser_batch_id_t batch);
/* Submits `count` requests as one batch, waits up to timeout_ms (then cancels) and frees it. 0 when
 * every task COMPLETED, else the first failure or HAWSER_E_TIMEOUT. `statuses` (NULL, or `count`
 * entries) receives each task's status once submitted; it is left untouched when the submit was refused. */
int hawser_transfer_sync(hawser_engine_t* engine, const hawser_request_t* requests, size_t count,
                         int64_t timeout_ms, hawser_status_t* statuses);

/* ---- Block requests (docs/blocks.md) ------------------------------------------ */

/* One block (C++ Block): `length` bytes between local registered memory at `local` and the target
 * segment at `remote`. */
typedef struct {
  void* local;
  uint64_t remote;
  size_t length;
} hawser_block_t;
/* A strided layout (C++ StridedBlocks): block i at local_base + i * local_stride and
 * remote_base + i * remote_stride, each `block_length` bytes. */
typedef struct {
  void* local_base;
  uint64_t remote_base;
  size_t block_length;
  size_t local_stride;
  size_t remote_stride;
  size_t count;
} hawser_strided_t;
typedef uint64_t hawser_plan_id_t; /* 0 is never valid */
/* What a plan holds (C++ PlanInfo). */
typedef struct {
  size_t blocks; /* as given */
  size_t runs;   /* after merging blocks contiguous on both sides */
  uint64_t bytes;
} hawser_plan_info_t;

/* One request of `count` blocks to `target`: one task of the batch, its id in *task_id (NULL: not
 * wanted). Every block is checked; the last error names the bad one ("blocks[17]: ..."); blocks
 * whose destinations overlap are refused (HAWSER_E_ADDRESS_OVERLAPPED). All or nothing. */
int hawser_submit_blocks(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode, hawser_segment_id_t target,
                         const hawser_block_t* blocks, size_t count, size_t* task_id);
/* The same blocks as parallel arrays: local[i], remote[i], and lengths[i] or, when lengths is NULL,
 * block_length for every block. */
int hawser_submit_block_arrays(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                               hawser_segment_id_t target, const uint64_t* local, const uint64_t* remote,
                               const uint64_t* lengths, uint64_t block_length, size_t count, size_t* task_id);
/* A strided layout as one task; checked in O(1) when it lies in one local region and one remote buffer. */
int hawser_submit_strided(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode, hawser_segment_id_t target,
                          const hawser_strided_t* blocks, size_t* task_id);
/* Prepare once (every check of the submit functions, once), post many. */
int hawser_prepare_blocks(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                          const hawser_block_t* blocks, size_t count, hawser_plan_id_t* out);
int hawser_prepare_block_arrays(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                const uint64_t* local, const uint64_t* remote, const uint64_t* lengths,
                                uint64_t block_length, size_t count, hawser_plan_id_t* out);
int hawser_prepare_strided(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                           const hawser_strided_t* blocks, hawser_plan_id_t* out);
/* The same six calls under `contract` instead of the engine's route contract (config route.transports,
 * route.require; NULL: the engine's), as hawser_submit_routed does for requests: a block request it forbids
 * is HAWSER_E_NO_TRANSPORT, and hawser_last_error names the transport it would have taken, the one expected
 * and why that one is unavailable. A plan keeps the contract it was prepared under. */
int hawser_submit_blocks_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                hawser_segment_id_t target, const hawser_block_t* blocks, size_t count,
                                const hawser_route_contract_t* contract, size_t* task_id);
int hawser_submit_block_arrays_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                      hawser_segment_id_t target, const uint64_t* local, const uint64_t* remote,
                                      const uint64_t* lengths, uint64_t block_length, size_t count,
                                      const hawser_route_contract_t* contract, size_t* task_id);
int hawser_submit_strided_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                 hawser_segment_id_t target, const hawser_strided_t* blocks,
                                 const hawser_route_contract_t* contract, size_t* task_id);
int hawser_prepare_blocks_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                 const hawser_block_t* blocks, size_t count, const hawser_route_contract_t* contract,
                                 hawser_plan_id_t* out);
int hawser_prepare_block_arrays_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                       const uint64_t* local, const uint64_t* remote, const uint64_t* lengths,
                                       uint64_t block_length, size_t count, const hawser_route_contract_t* contract,
                                       hawser_plan_id_t* out);
int hawser_prepare_strided_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                  const hawser_strided_t* blocks, const hawser_route_contract_t* contract,
                                  hawser_plan_id_t* out);
/* Adds one task moving the plan's blocks to the batch; no per-block work (unless local memory was
 * unregistered since the plan was prepared: its blocks are then checked again). */
int hawser_post_plan(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_plan_id_t plan, size_t* task_id);
int hawser_plan_info(hawser_engine_t* engine, hawser_plan_id_t plan, hawser_plan_info_t* out);
/* Tasks already posted from the plan are not affected. */
int hawser_release_plan(hawser_engine_t* engine, hawser_plan_id_t plan);

/* ---- Notifications (C++ sendNotify, getNotifies, ...) ------------------------ */

/* Where a notifying submit's notification stands (C++ NotifyState). */
enum {
  HAWSER_NOTIFY_WAITING = 0,   /* its transfer is not finished */
  HAWSER_NOTIFY_SENDING = 1,   /* the transfer completed; on its way */
  HAWSER_NOTIFY_DELIVERED = 2, /* the receiver queued it */
  HAWSER_NOTIFY_NOT_SENT = 3,  /* a request of its submit did not complete: never sent */
  HAWSER_NOTIFY_FAILED = 4     /* delivery failed: receiver's queue full, unreachable, ... */
};

/* A notification to send: any bytes (name and message need no NUL; NULL with length 0 = empty). */
typedef struct {
  const char* name;
  size_t name_len;
  const char* message;
  size_t message_len;
} hawser_notification_t;

/* A notification received. Strings library-owned (see Strings); each is also NUL-terminated. */
typedef struct {
  const char* peer; /* the sender's segment name */
  const char* name;
  size_t name_len;
  const char* message;
  size_t message_len;
} hawser_received_notification_t;

/* The notification of one notifying submit (C++ NotifyStatus). */
typedef struct {
  int state;                 /* HAWSER_NOTIFY_* */
  int error_code;            /* 0, or why (NOT_SENT: the failed task's code; FAILED: e.g. HAWSER_E_CAPACITY_EXCEEDED) */
  const char* error_message; /* "" when error_code is 0; library-owned */
} hawser_notify_status_t;

/* As hawser_submit; once every one of these requests COMPLETED, `notify` goes to the segment of requests[0]
 * (never when one fails). count >= 1. The receiver's queue is bounded (config notify.queue_depth): see
 * hawser_notify_status for the outcome. Per receiver, notifications arrive in the order they were issued. */
int hawser_submit_with_notify(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                              size_t count, const hawser_notification_t* notify);
/* Sends `notify` to the owner of open memory segment `target` and waits until it is queued there:
 * HAWSER_E_CAPACITY_EXCEEDED when the receiver's queue is full, HAWSER_E_UNAVAILABLE when unreachable. */
int hawser_send_notify(hawser_engine_t* engine, hawser_segment_id_t target, const hawser_notification_t* notify);
/* The notifications received and not yet taken, oldest first (see Output arrays). Taken ones are removed;
 * when `out` is too small (or NULL) nothing is taken. */
int hawser_get_notifies(hawser_engine_t* engine, hawser_received_notification_t* out, size_t* count);
/* One entry per notifying submit of the batch, in submit order (see Output arrays). */
int hawser_notify_status(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_notify_status_t* out,
                         size_t* count);
/* hawser_transfer_sync, then `notify` to the segment of requests[0]: 0 only when every task COMPLETED and the
 * notification was delivered (else why not, e.g. HAWSER_E_CAPACITY_EXCEEDED). */
int hawser_transfer_sync_with_notify(hawser_engine_t* engine, const hawser_request_t* requests, size_t count,
                                     const hawser_notification_t* notify, int64_t timeout_ms,
                                     hawser_status_t* statuses);
/* Name of a notification state ("DELIVERED", ...; "UNKNOWN" otherwise); static. */
const char* hawser_notify_state_name(int state);

/* A notifying submit's end at its receiver: the notification, or the news that it failed (C++ getNotifies with
 * failures). Strings library-owned (see Strings); each is also NUL-terminated. */
enum { HAWSER_NOTIFY_KIND_DELIVERED = 0, HAWSER_NOTIFY_KIND_FAILED = 1 };
typedef struct {
  const char* peer; /* the sender's segment name */
  const char* name;
  size_t name_len;
  const char* message; /* "" for a failure */
  size_t message_len;
  int kind;                  /* HAWSER_NOTIFY_KIND_* */
  int error_code;            /* FAILED: the first failed request's code, or HAWSER_E_UNAVAILABLE (sender lost) */
  const char* error_message; /* "" when error_code is 0 */
} hawser_notify_outcome_t;
/* As hawser_get_notifies, with the failed notifying submits among them, in their places (see Output arrays):
 * every notifying submit to this engine ends here as exactly one of the two (docs/signals.md). Draws from the
 * same queue as hawser_get_notifies, which drops the failures. */
int hawser_get_notify_outcomes(hawser_engine_t* engine, hawser_notify_outcome_t* out, size_t* count);

/* ---- Signals (C++ submitTransfer with a Signal, waitSignal; docs/signals.md) ---- */

enum { HAWSER_SIGNAL_COMPLETED = 0, HAWSER_SIGNAL_FAILED = 1, HAWSER_SIGNAL_TIMEOUT = 2 };
/* Why a signal FAILED (C++ SignalReason). */
enum {
  HAWSER_SIGNAL_REASON_NONE = 0,
  HAWSER_SIGNAL_REASON_TRANSFER_FAILED = 1, /* a request failed at the initiator */
  HAWSER_SIGNAL_REASON_CANCELED = 2,        /* the initiator canceled a request */
  HAWSER_SIGNAL_REASON_REFUSED = 3,         /* the target refused a range */
  HAWSER_SIGNAL_REASON_PEER_LOST = 4,       /* the initiator died, restarted, became unreachable, or frames were lost */
  HAWSER_SIGNAL_REASON_OVERFLOW = 5         /* the receiver's signal table was full (signal.max_signals) */
};
/* How a wait ended. Strings library-owned (see Strings). */
typedef struct {
  int state;                 /* HAWSER_SIGNAL_* */
  int reason;                /* HAWSER_SIGNAL_REASON_* */
  const char* peer;          /* the sender's segment name */
  uint64_t landed;           /* requests of the signal that landed */
  int error_code;            /* FAILED: the first failed request's code (or why the peer is lost); TIMEOUT: HAWSER_E_TIMEOUT */
  const char* error_message; /* "" when error_code is 0 */
} hawser_signal_result_t;
/* As hawser_submit; the requests (all to one memory segment) count toward signal `signal` (NUL-terminated) at the
 * engine that owns it. */
int hawser_submit_with_signal(hawser_engine_t* engine, hawser_batch_id_t batch, const hawser_request_t* requests,
                              size_t count, const char* signal);
/* Waits until `expected` requests of signal `name` from the engine whose segment is `peer` landed here
 * (COMPLETED), one cannot (FAILED, with reason and error), or `timeout_ms` passes (TIMEOUT; < 0: no deadline).
 * Returns 0 with *out filled whatever the outcome; an error only for bad arguments. */
int hawser_wait_signal(hawser_engine_t* engine, const char* peer, const char* name, uint64_t expected,
                       int64_t timeout_ms, hawser_signal_result_t* out);
/* Names ("COMPLETED", "PEER_LOST", ...; "UNKNOWN" otherwise); static. */
const char* hawser_signal_state_name(int state);
const char* hawser_signal_reason_name(int reason);

/* ---- Introspection --------------------------------------------------------- */

/* Names of the installed transports, cheapest first (see Output arrays; names library-owned). */
int hawser_transports(hawser_engine_t* engine, const char** out, size_t* count);
/* Counters of the engine and of every installed transport, flattened (see Output arrays). */
int hawser_stats(hawser_engine_t* engine, hawser_counter_t* out, size_t* count);
/* The engine's metrics, one entry per sample (see Output arrays and hawser_metric_t). */
int hawser_metrics(hawser_engine_t* engine, hawser_metric_t* out, size_t* count);
/* The engine's metrics in the Prometheus text exposition format 0.0.4 (what `hawser serve --metrics`
 * serves), NUL-terminated: *len is buf's size on entry and the size needed (NUL included) on return.
 * buf NULL is a size query; a buf too small gets nothing and HAWSER_E_CAPACITY_EXCEEDED. */
int hawser_metrics_text(hawser_engine_t* engine, char* buf, size_t* len);
/* Every transport this build has: installed or why not, what it moves, what it found (see Output arrays). */
int hawser_diagnose(hawser_engine_t* engine, hawser_diagnosis_t* out, size_t* count);
/* The devices every transport of this build found, transport by transport in hawser_diagnose's order
 * (see Output arrays and hawser_device_t; what `hawser doctor --json` prints under "devices"). */
int hawser_devices(hawser_engine_t* engine, hawser_device_t* out, size_t* count);
/* Which transport a request from local memory at `local_location` (NULL = "cpu:0") to open segment
 * `segment` would take, and why. */
int hawser_explain_route(hawser_engine_t* engine, hawser_segment_id_t segment, const char* local_location,
                         hawser_route_t* out);

/* ---- Helpers --------------------------------------------------------------- */

/* Message of this thread's last failed call ("" if none); valid until this thread's next failure. */
const char* hawser_last_error(void);
/* Stable name of a return code ("ok", "invalid_argument", ...; "unknown" otherwise); static. */
const char* hawser_code_name(int code);
/* Name of a task state ("COMPLETED", ...; "UNKNOWN" otherwise); static. */
const char* hawser_state_name(int state);
/* Parses a byte size as config values do ("4096", "64K", "1MiB", "2G"); HAWSER_E_INVALID_ARGUMENT on junk. */
int hawser_parse_size(const char* text, uint64_t* out);

/* ---- Configuration (hawser/config.h) ---------------------------------------- */

/* One row of the config table (C++ ConfigKey); strings library-owned. */
typedef struct {
  const char* key;           /* "tcp.connections" */
  const char* env;           /* "HAWSER_TCP_CONNECTIONS" */
  const char* type;          /* "int", "size", "bool", "string", "enum", "duration_ms" */
  const char* default_value; /* as a user writes it */
  const char* range;         /* "1..64", "auto|tcp|rdma", "" */
  const char* doc;
  int secret;                /* a password or token */
} hawser_config_key_t;
/* Every key, in the table's order (see Output arrays). */
int hawser_config_keys(hawser_config_key_t* out, size_t* count);
/* Where an effective value comes from (C++ ConfigSource). */
enum { HAWSER_CONFIG_DEFAULT = 0, HAWSER_CONFIG_ENVIRONMENT = 1, HAWSER_CONFIG_OPTIONS = 2 };
/* The effective value of `key` for an engine created with `options` (NULL = none): its config, else the
 * HAWSER_* environment variable, else the default, validated as engine creation validates it.
 * HAWSER_E_INVALID_ARGUMENT for a key not in the table or a bad value (the last error names key, env, value
 * and what was expected). `source` (NULL: not wanted) receives HAWSER_CONFIG_*.
 * hawser_config_value: the text, NUL-terminated into buf (*len: buf's size in, the size needed out; buf NULL
 * is a size query; too small: nothing written, HAWSER_E_CAPACITY_EXCEEDED). hawser_config_int: int,
 * duration_ms and size keys (sizes in bytes). hawser_config_bool: bool keys (0 or 1). */
int hawser_config_value(const hawser_engine_options_t* options, const char* key, char* buf, size_t* len,
                        int* source);
int hawser_config_int(const hawser_engine_options_t* options, const char* key, int64_t* out, int* source);
int hawser_config_bool(const hawser_engine_options_t* options, const char* key, int* out, int* source);
/* Validates every value of `options` (NULL = none) and of the environment, as engine creation does first. */
int hawser_validate_config(const hawser_engine_options_t* options);

/* ---- Host and GPU memory (hawser/host_memory.h, hawser/device_memory.h) ------- */

/* `bytes` (> 0, rounded up to pages) of zeroed, page-aligned host memory that a peer engine of this host can
 * map (docs/shm.md); free it with hawser_free_host_memory, at exactly that address. */
int hawser_allocate_host_memory(size_t bytes, void** out);
int hawser_free_host_memory(void* ptr);
/* Loads the CUDA driver once per process: `path`, or NULL / "" for config gpu.cuda_driver (env
 * HAWSER_GPU_CUDA_DRIVER, default libcuda.so.1). HAWSER_E_NOT_SUPPORTED, with the reason, without a driver
 * or a GPU. */
int hawser_load_cuda_driver(const char* path);
/* GPUs the loaded driver sees (0 when none is loaded). */
int hawser_cuda_device_count(void);
/* Device memory of GPU `device` (cuMemAlloc), and its release. */
int hawser_allocate_device_memory(int device, size_t bytes, void** out);
int hawser_free_device_memory(void* ptr);
/* dst <- src, each host or device memory; returns when the copy is done. */
int hawser_copy_memory(void* dst, const void* src, size_t bytes);
/* Returns when the work queued on CUDA stream `stream` (NULL: the legacy default stream) has finished. */
int hawser_synchronize_stream(void* stream);

/* C++ only: MetadataAdmin (hawser/metadata.h), the administration of a metadata service's segments. Its
 * records nest descriptors, files and path maps, and it serves operators' tools rather than data paths:
 * from C (or a shell) use the `hawser segment` command, which is built on it (docs/metadata.md). */

#ifdef __cplusplus
}
#endif

#endif /* HAWSER_C_API_H */
