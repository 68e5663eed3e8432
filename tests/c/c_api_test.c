/* The C API from C (C11, -Wpedantic -Werror): every function of
 * hawser/c_api.h, over two engines in one process (p2p on 127.0.0.1, port 0).
 *
 * Usage: c_c_api_test [case]   (no argument: every case)
 * Each case prints "ok - <case>" or "FAIL <case>: <file>:<line>: <check> ..."
 * and the program exits 1 when any case failed.
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- checks ---------------------------------------------------------------- */

#include "c_check.h"


/* ---- helpers --------------------------------------------------------------- */

#define MIB ((size_t)1 << 20)

static void* aligned(size_t len) {
  void* p = aligned_alloc(4096, len);
  if (p) memset(p, 0, len);
  return p;
}

static void fill(unsigned char* p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; ++i) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 12));
}

static int create_engine(const char* name, hawser_engine_t** e) {
  return hawser_engine_create("p2p", name, "127.0.0.1", 0, e);
}

/* Value of counter `name` of `transport` ("" = engine), or UINT64_MAX when absent. */
static uint64_t counter(hawser_engine_t* e, const char* transport, const char* name) {
  hawser_counter_t c[128];
  size_t n = sizeof(c) / sizeof(c[0]);
  if (hawser_stats(e, c, &n) != 0) return UINT64_MAX;
  for (size_t i = 0; i < n; ++i)
    if (strcmp(c[i].transport, transport) == 0 && strcmp(c[i].name, name) == 0) return c[i].value;
  return UINT64_MAX;
}

static int has_transport(hawser_engine_t* e, const char* name) {
  const char* names[16];
  size_t n = 16;
  if (hawser_transports(e, names, &n) != 0) return 0;
  for (size_t i = 0; i < n; ++i)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

/* A temp file of `len` bytes filled with fill(seed); its path in `path`. */
static int temp_file(char* path, size_t path_len, size_t len, unsigned seed) {
  const char* dir = getenv("TMPDIR");
  snprintf(path, path_len, "%s/hawser_c_api_XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  unsigned char* buf = malloc(len);
  if (!buf) {
    close(fd);
    return -1;
  }
  fill(buf, len, seed);
  ssize_t w = pwrite(fd, buf, len, 0);
  free(buf);
  close(fd);
  return w == (ssize_t)len ? 0 : -1;
}

/* ---- cases ----------------------------------------------------------------- */

/* Each bad input gets its exact code, and a message. */
static int bad_inputs_get_their_exact_codes(void) {
  hawser_engine_t* e = NULL;
  hawser_status_t st;
  hawser_segment_id_t seg = 0;
  hawser_batch_id_t b = 0;
  size_t n = 0;

  CHECK_RC(hawser_engine_create("bogus://", "n", "127.0.0.1", 0, &e), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("bogus://");
  CHECK(e == NULL);
  CHECK_RC(hawser_engine_create("p2p", "n", "127.0.0.1", 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("out is null");
  CHECK_OK(create_engine("capi-bad", &e));
  CHECK(e != NULL);

  /* NULL engine: every function. */
  CHECK_RC(hawser_segment_name(NULL, (char[8]){0}, 8), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("engine is null");
  CHECK(hawser_rpc_port(NULL) == 0);
  CHECK_RC(hawser_register_memory(NULL, &n, 8, NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_memory_batch(NULL, NULL, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_unregister_memory(NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_unregister_memory_batch(NULL, NULL, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_check_registered(NULL, &n, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_open_segment(NULL, "x", &seg), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_close_segment(NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_segment_buffers(NULL, 1, NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_file_segment(NULL, "x", NULL, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_unregister_file_segment(NULL, "x"), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_allocate_batch(NULL, 1, &b), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_submit(NULL, 1, NULL, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_task_status(NULL, 1, 0, &st), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_batch_status(NULL, 1, &st), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_wait(NULL, 1, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_cancel(NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_free_batch(NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_transfer_sync(NULL, NULL, 0, 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_transports(NULL, NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_stats(NULL, NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_diagnose(NULL, NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_explain_route(NULL, 1, NULL, &(hawser_route_t){0}), HAWSER_E_INVALID_ARGUMENT);
  hawser_engine_destroy(NULL); /* a no-op */

  /* NULL outputs and inputs. */
  CHECK_RC(hawser_segment_name(e, NULL, 8), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("buf");
  CHECK_RC(hawser_open_segment(e, NULL, &seg), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("name is null");
  CHECK_RC(hawser_open_segment(e, "127.0.0.1:1", NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_allocate_batch(e, 1, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_task_status(e, 1, 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_batch_status(e, 1, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_submit(e, 1, NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("requests is null");
  CHECK_RC(hawser_transfer_sync(e, NULL, 1, 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_segment_buffers(e, 1, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("count is null");
  CHECK_RC(hawser_transports(e, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_stats(e, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_diagnose(e, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_explain_route(e, 1, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_memory_batch(e, NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("entries is null");
  CHECK_RC(hawser_unregister_memory_batch(e, NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_file_segment(e, NULL, NULL, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_file_segment(e, "s", NULL, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("files is null");
  CHECK_RC(hawser_unregister_file_segment(e, NULL), HAWSER_E_INVALID_ARGUMENT);
  {
    hawser_kv_t bad_map[1] = {{NULL, "/x"}};
    hawser_file_desc_t f = {"/x", 4096, bad_map, 1};
    CHECK_RC(hawser_register_file_segment(e, "s", &f, 1), HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("files[0].local_path_map[0].key is null");
  }
  CHECK_RC(hawser_parse_size(NULL, &(uint64_t){0}), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_parse_size("1K", NULL), HAWSER_E_INVALID_ARGUMENT);

  /* Registration. */
  unsigned char* buf = aligned(64 * 1024);
  CHECK(buf != NULL);
  CHECK_RC(hawser_register_memory(e, buf, 0, "cpu:0", 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_memory(e, NULL, 16, "cpu:0", 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_OK(hawser_register_memory(e, buf, 64 * 1024, NULL, 1));
  CHECK_RC(hawser_register_memory(e, buf + 1, 10, "cpu:0", 1), HAWSER_E_ADDRESS_OVERLAPPED);
  CHECK_RC(hawser_unregister_memory(e, buf + 1), HAWSER_E_NOT_REGISTERED);
  CHECK_RC(hawser_check_registered(e, buf + 64 * 1024 - 1, 2), HAWSER_E_NOT_REGISTERED);
  CHECK_RC(hawser_register_memory_batch(e, &(hawser_buffer_entry_t){buf, 1, NULL, 1}, 0),
           HAWSER_E_INVALID_ARGUMENT); /* count 0 */

  /* Unknown ids. */
  CHECK_RC(hawser_close_segment(e, 4242), HAWSER_E_SEGMENT_NOT_FOUND);
  CHECK_RC(hawser_segment_buffers(e, 4242, NULL, &n), HAWSER_E_SEGMENT_NOT_FOUND);
  CHECK_RC(hawser_explain_route(e, 4242, NULL, &(hawser_route_t){0}), HAWSER_E_SEGMENT_NOT_FOUND);
  CHECK_RC(hawser_open_segment(e, "", &seg), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_unregister_file_segment(e, "no-such-file-segment"), HAWSER_E_SEGMENT_NOT_FOUND);
  CHECK_RC(hawser_free_batch(e, 12345), HAWSER_E_INVALID_BATCH);
  CHECK_ERROR_NAMES("12345");
  CHECK_RC(hawser_task_status(e, 999, 0, &st), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_batch_status(e, 999, &st), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_wait(e, 999, 0), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_cancel(e, 999), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_submit(e, 999, NULL, 0), HAWSER_E_INVALID_BATCH);

  /* Batches: capacity, task ids, opcodes. */
  CHECK_RC(hawser_allocate_batch(e, 0, &b), HAWSER_E_INVALID_ARGUMENT);
  CHECK_OK(hawser_allocate_batch(e, 1, &b));
  CHECK(b != 0);
  {
    char name[64];
    CHECK_OK(hawser_segment_name(e, name, sizeof(name)));
    CHECK_OK(hawser_open_segment(e, name, &seg));
    hawser_request_t two[2] = {{HAWSER_OP_READ, buf, seg, (uint64_t)(uintptr_t)(buf + 4096), 16},
                               {HAWSER_OP_READ, buf + 16, seg, (uint64_t)(uintptr_t)(buf + 8192), 16}};
    CHECK_RC(hawser_submit(e, b, two, 2), HAWSER_E_CAPACITY_EXCEEDED);
    hawser_request_t op = two[0];
    op.opcode = 256; /* must not narrow into READ */
    CHECK_RC(hawser_submit(e, b, &op, 1), HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("opcode 256");
    op.opcode = HAWSER_OP_READ;
    op.length = 0;
    CHECK_RC(hawser_submit(e, b, &op, 1), HAWSER_E_INVALID_ARGUMENT);
    op.length = 16;
    op.target_id = 4242;
    CHECK_RC(hawser_submit(e, b, &op, 1), HAWSER_E_SEGMENT_NOT_FOUND);
    op.target_id = seg;
    op.source = (unsigned char*)buf + 64 * 1024; /* just past the region */
    CHECK_RC(hawser_submit(e, b, &op, 1), HAWSER_E_NOT_REGISTERED);
    CHECK_RC(hawser_task_status(e, b, 0, &st), HAWSER_E_INVALID_ARGUMENT); /* nothing was submitted */
    CHECK_OK(hawser_free_batch(e, b));
    CHECK_OK(hawser_close_segment(e, seg));
  }

  /* Too-small output arrays: the needed count and a distinct code; a size query with NULL. */
  {
    size_t needed = 0;
    CHECK_OK(hawser_transports(e, NULL, &needed));
    CHECK(needed >= 1);
    const char* names[1] = {"untouched"};
    n = 0;
    CHECK_RC(hawser_transports(e, names, &n), HAWSER_E_CAPACITY_EXCEEDED);
    CHECK(n == needed);
    CHECK(strcmp(names[0], "untouched") == 0);
    CHECK_ERROR_NAMES("needed");
    hawser_counter_t c[1];
    n = 1;
    CHECK_RC(hawser_stats(e, c, &n), HAWSER_E_CAPACITY_EXCEEDED);
    CHECK(n > 1);
    hawser_diagnosis_t d[1];
    CHECK_OK(hawser_diagnose(e, NULL, &needed));
    CHECK(needed >= 1);
    n = needed - 1;
    CHECK_RC(hawser_diagnose(e, d, &n), HAWSER_E_CAPACITY_EXCEEDED);
    CHECK(n == needed);
    hawser_segment_buffer_t sb[1];
    n = 0;
    CHECK_RC(hawser_segment_buffers(e, 4242, sb, &n), HAWSER_E_SEGMENT_NOT_FOUND); /* the id is checked first */
  }

  /* Names and sizes. */
  CHECK(strcmp(hawser_code_name(0), "ok") == 0);
  CHECK(strcmp(hawser_code_name(HAWSER_E_BATCH_BUSY), "batch_busy") == 0);
  CHECK(strcmp(hawser_code_name(HAWSER_E_INTERNAL), "internal") == 0);
  CHECK(strcmp(hawser_code_name(-21), "unknown") == 0);
  CHECK(strcmp(hawser_code_name(3), "unknown") == 0);
  CHECK(strcmp(hawser_state_name(HAWSER_CANCELED), "CANCELED") == 0);
  CHECK(strcmp(hawser_state_name(7), "UNKNOWN") == 0);
  {
    uint64_t v = 0;
    CHECK_OK(hawser_parse_size("64K", &v));
    CHECK(v == 65536);
    CHECK_OK(hawser_parse_size("1MiB", &v));
    CHECK(v == MIB);
    CHECK_RC(hawser_parse_size("lots", &v), HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("lots");
  }

  CHECK_OK(hawser_unregister_memory(e, buf));
  hawser_engine_destroy(e);
  free(buf);
  return 0;
}

/* Options reach the engine; a bad value fails create naming the key. */
static int init_options_are_applied_and_checked(void) {
  hawser_engine_t* e = NULL;
  hawser_kv_t bad[1] = {{"tcp.connections", "lots"}};
  hawser_engine_options_t o = {bad, 1};
  CHECK_RC(hawser_engine_create_with_options("p2p", "capi-opt", "127.0.0.1", 0, &o, &e), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("tcp.connections");
  CHECK(e == NULL);

  hawser_kv_t null_value[1] = {{"tcp.connections", NULL}};
  o.config = null_value;
  CHECK_RC(hawser_engine_create_with_options("p2p", "capi-opt", "127.0.0.1", 0, &o, &e), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("tcp.connections");
  o.config = NULL;
  CHECK_RC(hawser_engine_create_with_options("p2p", "capi-opt", "127.0.0.1", 0, &o, &e), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("options->config is null");

  /* An unknown key: refused naming the key once strict config validation is in;
   * until then accepted. Either way, nothing else. */
  hawser_kv_t unknown[1] = {{"tcp.no_such_key", "1"}};
  o.config = unknown;
  int rc = hawser_engine_create_with_options("p2p", "capi-opt", "127.0.0.1", 0, &o, &e);
  if (rc == 0) {
    printf("# note: unknown config key 'tcp.no_such_key' was accepted (strict validation not in this build)\n");
    hawser_engine_destroy(e);
    e = NULL;
  } else {
    CHECK_RC(rc, HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("tcp.no_such_key");
  }

  /* Good options are applied: tcp reports the slice size it was given. */
  hawser_kv_t good[2] = {{"tcp.slice_size", "8K"}, {"tcp.connections", "2"}};
  o.config = good;
  o.config_count = 2;
  CHECK_OK(hawser_engine_create_with_options("p2p", "capi-opt", "127.0.0.1", 0, &o, &e));
  hawser_diagnosis_t d[16];
  size_t n = 16;
  CHECK_OK(hawser_diagnose(e, d, &n));
  int seen = 0;
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(d[i].transport, "tcp") != 0) continue;
    for (size_t j = 0; j < d[i].fact_count; ++j) {
      if (strcmp(d[i].facts[j].key, "slice size") == 0) seen |= strcmp(d[i].facts[j].value, "8192") == 0;
      if (strcmp(d[i].facts[j].key, "connections per peer") == 0) seen |= (strcmp(d[i].facts[j].value, "2") == 0) << 1;
    }
  }
  CHECK(seen == 3);
  hawser_engine_destroy(e);

  /* NULL options = none. */
  CHECK_OK(hawser_engine_create_with_options(NULL, NULL, NULL, 0, NULL, &e));
  CHECK(hawser_rpc_port(e) != 0);
  hawser_engine_destroy(e);
  return 0;
}

/* Batch registration is all or nothing both ways. */
static int memory_registers_singly_and_in_batches(void) {
  hawser_engine_t* e = NULL;
  CHECK_OK(create_engine("capi-mem", &e));
  unsigned char* m = aligned(4 * 65536);
  CHECK(m != NULL);
  hawser_buffer_entry_t entries[3] = {
      {m, 65536, "cpu:0", 1}, {m + 65536, 65536, NULL, 0}, {m + 2 * 65536, 65536, "*", 1}};
  /* One overlapping entry: nothing registered. */
  hawser_buffer_entry_t overlapping[2] = {{m, 65536, NULL, 1}, {m + 100, 10, NULL, 1}};
  CHECK_RC(hawser_register_memory_batch(e, overlapping, 2), HAWSER_E_ADDRESS_OVERLAPPED);
  CHECK_ERROR_NAMES("buffers[1]");
  CHECK_RC(hawser_check_registered(e, m, 1), HAWSER_E_NOT_REGISTERED);

  CHECK_OK(hawser_register_memory_batch(e, entries, 3));
  CHECK_OK(hawser_check_registered(e, m, 65536));
  CHECK_OK(hawser_check_registered(e, m + 65536 + 10, 100));
  CHECK_OK(hawser_check_registered(e, m + 3 * 65536 - 1, 1));
  CHECK_RC(hawser_check_registered(e, m + 65536 - 1, 2), HAWSER_E_NOT_REGISTERED); /* spans two regions */
  CHECK_RC(hawser_check_registered(e, m + 3 * 65536, 1), HAWSER_E_NOT_REGISTERED);
  CHECK_OK(hawser_register_memory(e, m + 3 * 65536, 65536, "cpu:0", 1));
  CHECK_OK(hawser_check_registered(e, m + 3 * 65536, 65536));

  /* The remote view: only remote-accessible regions are published. */
  {
    char name[64];
    hawser_segment_id_t seg = 0;
    CHECK_OK(hawser_segment_name(e, name, sizeof(name)));
    CHECK_OK(hawser_open_segment(e, name, &seg));
    hawser_segment_buffer_t bufs[8];
    size_t n = 8;
    CHECK_OK(hawser_segment_buffers(e, seg, bufs, &n));
    CHECK(n == 3); /* entries[1] is not remote accessible */
    int found_private = 0;
    for (size_t i = 0; i < n; ++i) found_private |= bufs[i].addr == (uint64_t)(uintptr_t)(m + 65536);
    CHECK(!found_private);
    CHECK_OK(hawser_close_segment(e, seg));
  }

  /* One unknown address: nothing unregistered. */
  void* addrs[3] = {m, m + 65536, m + 7};
  CHECK_RC(hawser_unregister_memory_batch(e, addrs, 3), HAWSER_E_NOT_REGISTERED);
  CHECK_ERROR_NAMES("addrs[2]");
  CHECK_OK(hawser_check_registered(e, m, 65536));
  addrs[2] = m + 2 * 65536;
  CHECK_OK(hawser_unregister_memory_batch(e, addrs, 3));
  CHECK_RC(hawser_check_registered(e, m, 1), HAWSER_E_NOT_REGISTERED);
  CHECK_RC(hawser_check_registered(e, m + 2 * 65536, 1), HAWSER_E_NOT_REGISTERED);
  CHECK_OK(hawser_check_registered(e, m + 3 * 65536, 65536));
  CHECK_OK(hawser_unregister_memory(e, m + 3 * 65536));
  CHECK_RC(hawser_unregister_memory(e, m + 3 * 65536), HAWSER_E_NOT_REGISTERED);
  hawser_engine_destroy(e);
  free(m);
  return 0;
}

/* A route contract given with the requests (hawser_submit_routed, docs/routes.md): two engines of one
 * process take shm; a contract allowing rdma only, on a host without an RDMA NIC, is refused at submit
 * naming both and why; allowing tcp only moves the bytes over tcp; NULL is the engine's (none). */
static int a_route_contract_refuses_at_submit_or_picks_the_allowed_transport(void) {
  hawser_engine_t *a = NULL, *b = NULL;
  CHECK_OK(create_engine("capi-route-a", &a));
  CHECK_OK(create_engine("capi-route-b", &b));
  if (has_transport(a, "rdma")) {
    printf("# %s: skipped: this host has an RDMA NIC (the contract would be met)\n", g_case);
    hawser_engine_destroy(a);
    hawser_engine_destroy(b);
    return 0;
  }
  const size_t len = 65536;
  unsigned char* target = aligned(len);
  unsigned char* src = aligned(len);
  CHECK(target && src);
  fill(src, len, 7);
  memset(target, 0, len);
  CHECK_OK(hawser_register_memory(b, target, len, "cpu:0", 1));
  CHECK_OK(hawser_register_memory(a, src, len, "cpu:0", 0));
  char name[64];
  CHECK_OK(hawser_segment_name(b, name, sizeof(name)));
  hawser_segment_id_t seg = 0;
  CHECK_OK(hawser_open_segment(a, name, &seg));
  hawser_batch_id_t batch = 0;
  CHECK_OK(hawser_allocate_batch(a, 4, &batch));
  hawser_request_t req = {HAWSER_OP_WRITE, src, seg, (uint64_t)(uintptr_t)target, len};
  hawser_route_contract_t rdma_only = {HAWSER_ROUTE_RDMA, 0};
  CHECK_RC(hawser_submit_routed(a, batch, &req, 1, &rdma_only), HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_NAMES("the route contract (transports rdma, from the request) forbids the route this request would "
                    "take, shm; the expected route, rdma, is unavailable: no_device: not installed on this host");
  hawser_route_contract_t tcp_only = {HAWSER_ROUTE_TCP, HAWSER_ROUTE_NO_STAGING};
  CHECK_OK(hawser_submit_routed(a, batch, &req, 1, &tcp_only));
  CHECK_OK(hawser_wait(a, batch, 20000));
  hawser_status_t st;
  CHECK_OK(hawser_task_status(a, batch, 0, &st));
  CHECK(st.state == HAWSER_COMPLETED);
  CHECK(memcmp(target, src, len) == 0);
  CHECK(counter(a, "tcp", "slices_completed") > 0);
  CHECK_OK(hawser_submit_routed(a, batch, &req, 1, NULL));
  CHECK_OK(hawser_wait(a, batch, 20000));
  CHECK_OK(hawser_free_batch(a, batch));
  hawser_engine_destroy(a);
  hawser_engine_destroy(b);
  free(target);
  free(src);
  return 0;
}

/* Engine a writes to engine b's memory in a batch and reads it back with transfer_sync.
 * Over tcp (forced: two engines of one process would otherwise take shm), whose
 * counters show both ends. */
static int two_engines_write_a_batch_and_read_it_back(void) {
  hawser_engine_t *a = NULL, *b = NULL;
  hawser_kv_t tcp_only[1] = {{"transport", "tcp"}};
  hawser_engine_options_t o = {tcp_only, 1};
  CHECK_OK(hawser_engine_create_with_options("p2p", "capi-a", "127.0.0.1", 0, &o, &a));
  CHECK_OK(hawser_engine_create_with_options("p2p", "capi-b", "127.0.0.1", 0, &o, &b));
  CHECK(hawser_rpc_port(a) != hawser_rpc_port(b));

  const size_t len = MIB;
  unsigned char* target = aligned(2 * len); /* b's two regions */
  unsigned char* src = aligned(2 * len);
  unsigned char* dst = aligned(2 * len);
  CHECK(target && src && dst);
  fill(src, 2 * len, 1);
  hawser_buffer_entry_t tb[2] = {{target, len, "cpu:0", 1}, {target + len, len, "cpu:0", 1}};
  CHECK_OK(hawser_register_memory_batch(b, tb, 2));
  hawser_buffer_entry_t ab[2] = {{src, 2 * len, "cpu:0", 0}, {dst, 2 * len, "cpu:0", 0}};
  CHECK_OK(hawser_register_memory_batch(a, ab, 2));

  char name[64];
  CHECK_OK(hawser_segment_name(b, name, sizeof(name)));
  {
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)hawser_rpc_port(b));
    CHECK(strcmp(name, want) == 0);
    char tiny[4];
    CHECK_OK(hawser_segment_name(b, tiny, sizeof(tiny))); /* truncated, NUL-terminated */
    CHECK(strcmp(tiny, "127") == 0);
  }
  hawser_segment_id_t seg = 0, again = 0;
  CHECK_OK(hawser_open_segment(a, name, &seg));
  CHECK(seg != 0);
  CHECK_OK(hawser_open_segment(a, name, &again));
  CHECK(again == seg);
  CHECK_OK(hawser_close_segment(a, again)); /* still open: refcounted */

  /* Segment buffers: size query, too small, then the two regions. */
  hawser_segment_buffer_t bufs[2];
  size_t n = 0;
  CHECK_OK(hawser_segment_buffers(a, seg, NULL, &n));
  CHECK(n == 2);
  n = 1;
  CHECK_RC(hawser_segment_buffers(a, seg, bufs, &n), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(n == 2);
  CHECK_OK(hawser_segment_buffers(a, seg, bufs, &n));
  CHECK(n == 2);
  int found = 0;
  for (size_t i = 0; i < n; ++i) {
    CHECK(bufs[i].length == len);
    CHECK(strcmp(bufs[i].location, "cpu:0") == 0);
    found |= (bufs[i].addr == (uint64_t)(uintptr_t)target) | (bufs[i].addr == (uint64_t)(uintptr_t)(target + len)) << 1;
  }
  CHECK(found == 3);

  /* Route. */
  hawser_route_t route;
  CHECK_OK(hawser_explain_route(a, seg, "cpu:0", &route));
  CHECK(strcmp(route.transport, "tcp") == 0);
  CHECK(strlen(route.why) > 0);

  uint64_t tasks0 = counter(a, "", "tasks_submitted");
  uint64_t slices0 = counter(a, "tcp", "slices_completed");
  uint64_t served0 = counter(b, "tcp", "served_bytes");
  CHECK(tasks0 != UINT64_MAX && slices0 != UINT64_MAX && served0 != UINT64_MAX);

  /* A batch of two writes, one per region; wait; status. */
  hawser_batch_id_t batch = 0;
  CHECK_OK(hawser_allocate_batch(a, 2, &batch));
  hawser_request_t w[2] = {{HAWSER_OP_WRITE, src, seg, (uint64_t)(uintptr_t)target, len},
                           {HAWSER_OP_WRITE, src + len, seg, (uint64_t)(uintptr_t)(target + len), len}};
  CHECK_OK(hawser_submit(a, batch, w, 2));
  CHECK_RC(hawser_submit(a, batch, w, 1), HAWSER_E_CAPACITY_EXCEEDED); /* full */
  CHECK_OK(hawser_wait(a, batch, 60000));
  hawser_status_t st;
  for (size_t t = 0; t < 2; ++t) {
    CHECK_OK(hawser_task_status(a, batch, t, &st));
    CHECK(st.state == HAWSER_COMPLETED);
    CHECK(st.transferred_bytes == len);
    CHECK(st.error_code == 0);
    CHECK(strcmp(st.error_message, "") == 0);
  }
  CHECK_RC(hawser_task_status(a, batch, 2, &st), HAWSER_E_INVALID_ARGUMENT);
  CHECK_OK(hawser_batch_status(a, batch, &st));
  CHECK(st.state == HAWSER_COMPLETED);
  CHECK(st.transferred_bytes == 2 * len);
  CHECK(memcmp(target, src, 2 * len) == 0); /* b's memory, same process */
  CHECK_OK(hawser_cancel(a, batch));        /* nothing left to cancel: still Ok, still COMPLETED */
  CHECK_OK(hawser_batch_status(a, batch, &st));
  CHECK(st.state == HAWSER_COMPLETED);
  CHECK_OK(hawser_free_batch(a, batch));
  CHECK_RC(hawser_free_batch(a, batch), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_task_status(a, batch, 0, &st), HAWSER_E_INVALID_BATCH);

  /* transfer_sync read-back, bytes verified. */
  hawser_request_t r[2] = {{HAWSER_OP_READ, dst + len, seg, (uint64_t)(uintptr_t)(target + len), len},
                           {HAWSER_OP_READ, dst, seg, (uint64_t)(uintptr_t)target, len}};
  hawser_status_t sts[2];
  CHECK_OK(hawser_transfer_sync(a, r, 2, 60000, sts));
  for (size_t t = 0; t < 2; ++t) {
    CHECK(sts[t].state == HAWSER_COMPLETED);
    CHECK(sts[t].transferred_bytes == len);
  }
  CHECK(memcmp(dst, src, 2 * len) == 0);
  CHECK_OK(hawser_transfer_sync(a, r, 1, 60000, NULL)); /* statuses optional */
  CHECK_OK(hawser_transfer_sync(a, r, 0, 0, NULL));     /* nothing to do */

  /* A refused transfer_sync: the code, and the statuses left as they were. */
  hawser_request_t out_of_range = {HAWSER_OP_READ, dst, seg, (uint64_t)(uintptr_t)(target + 2 * len), 4096};
  sts[0].state = 99;
  CHECK_RC(hawser_transfer_sync(a, &out_of_range, 1, 60000, sts), HAWSER_E_OUT_OF_RANGE);
  CHECK(sts[0].state == 99);
  hawser_request_t unregistered = {HAWSER_OP_READ, dst + 2 * len, seg, (uint64_t)(uintptr_t)target, 4096};
  CHECK_RC(hawser_transfer_sync(a, &unregistered, 1, 60000, sts), HAWSER_E_NOT_REGISTERED);

  /* Counters moved: tasks on a, slices on a's tcp, bytes served by b's tcp. */
  CHECK(counter(a, "", "tasks_submitted") >= tasks0 + 5);
  CHECK(counter(a, "", "submits_refused") >= 2);
  CHECK(counter(a, "tcp", "slices_completed") > slices0);
  CHECK(counter(b, "tcp", "served_bytes") >= served0 + 5 * len);

  CHECK_OK(hawser_close_segment(a, seg));
  CHECK_RC(hawser_close_segment(a, seg), HAWSER_E_SEGMENT_NOT_FOUND);
  hawser_engine_destroy(a);
  hawser_engine_destroy(b);
  free(target);
  free(src);
  free(dst);
  return 0;
}

/* A batch with unfinished work cannot be freed; cancel ends it, then it can. */
static int cancel_ends_a_batch_that_free_refused_as_busy(void) {
  hawser_engine_t *a = NULL, *b = NULL;
  /* Over tcp (two engines of one process would otherwise take shm, which
   * copies the 32 MiB at once): one connection, one slice in flight, 4 KiB
   * slices, so 32 MiB is 8192 round trips. */
  hawser_kv_t slow[4] = {
      {"transport", "tcp"}, {"tcp.connections", "1"}, {"tcp.inflight", "1"}, {"tcp.slice_size", "4096"}};
  hawser_engine_options_t o = {slow, 4};
  CHECK_OK(hawser_engine_create_with_options("p2p", "capi-slow", "127.0.0.1", 0, &o, &a));
  CHECK_OK(create_engine("capi-target", &b));
  const size_t len = 32 * MIB;
  unsigned char* target = aligned(len);
  unsigned char* src = aligned(len);
  CHECK(target && src);
  CHECK_OK(hawser_register_memory(b, target, len, "cpu:0", 1));
  CHECK_OK(hawser_register_memory(a, src, len, "cpu:0", 0));
  char name[64];
  hawser_segment_id_t seg = 0;
  CHECK_OK(hawser_segment_name(b, name, sizeof(name)));
  CHECK_OK(hawser_open_segment(a, name, &seg));

  hawser_batch_id_t batch = 0;
  hawser_request_t w = {HAWSER_OP_WRITE, src, seg, (uint64_t)(uintptr_t)target, len};
  hawser_status_t st;
  CHECK_OK(hawser_allocate_batch(a, 1, &batch));
  CHECK_OK(hawser_submit(a, batch, &w, 1));
  CHECK_RC(hawser_free_batch(a, batch), HAWSER_E_BATCH_BUSY);
  CHECK_ERROR_NAMES("unfinished");
  CHECK_OK(hawser_cancel(a, batch));
  CHECK_OK(hawser_wait(a, batch, 60000));
  CHECK_OK(hawser_task_status(a, batch, 0, &st));
  if (st.state != HAWSER_CANCELED && st.state != HAWSER_FAILED)
    fprintf(stderr, "task state %d after cancel, %llu bytes moved\n", st.state,
            (unsigned long long)st.transferred_bytes);
  CHECK(st.state == HAWSER_CANCELED || st.state == HAWSER_FAILED);
  CHECK(st.transferred_bytes < len);
  CHECK(st.error_code < 0);
  CHECK(strlen(st.error_message) > 0);
  CHECK_OK(hawser_batch_status(a, batch, &st));
  CHECK(st.state == HAWSER_CANCELED || st.state == HAWSER_FAILED);
  CHECK_OK(hawser_free_batch(a, batch));
  CHECK_RC(hawser_free_batch(a, batch), HAWSER_E_INVALID_BATCH);
  CHECK_RC(hawser_cancel(a, batch), HAWSER_E_INVALID_BATCH);

  /* A wait that times out. */
  CHECK_OK(hawser_allocate_batch(a, 1, &batch));
  CHECK_OK(hawser_submit(a, batch, &w, 1));
  CHECK_RC(hawser_wait(a, batch, 1), HAWSER_E_TIMEOUT);
  CHECK_OK(hawser_cancel(a, batch));
  CHECK_OK(hawser_wait(a, batch, 60000));
  CHECK_OK(hawser_free_batch(a, batch));

  /* transfer_sync that times out: canceled, freed, HAWSER_E_TIMEOUT. */
  hawser_status_t sts[1];
  CHECK_RC(hawser_transfer_sync(a, &w, 1, 1, sts), HAWSER_E_TIMEOUT);
  CHECK(sts[0].state == HAWSER_CANCELED || sts[0].state == HAWSER_FAILED || sts[0].state == HAWSER_COMPLETED);
  CHECK(counter(a, "", "sync_timeouts") == 1);

  CHECK_OK(hawser_close_segment(a, seg));
  hawser_engine_destroy(a);
  hawser_engine_destroy(b);
  free(target);
  free(src);
  return 0;
}

/* file:// and a named file segment (two files, one reached through local_path_map). */
static int file_segments_read_and_write_through_the_c_api(void) {
  hawser_engine_t* e = NULL;
  CHECK_OK(create_engine("capi-files", &e));
  CHECK(has_transport(e, "file"));
  const size_t flen = 256 * 1024;
  char p0[256], p1[256];
  CHECK(temp_file(p0, sizeof(p0), flen, 3) == 0);
  CHECK(temp_file(p1, sizeof(p1), flen, 4) == 0);
  unsigned char* want = malloc(2 * flen);
  unsigned char* mem = aligned(2 * flen);
  CHECK(want && mem);
  fill(want, flen, 3);
  fill(want + flen, flen, 4);
  CHECK_OK(hawser_register_memory(e, mem, 2 * flen, "cpu:0", 0));

  /* file:// */
  char uri[300];
  snprintf(uri, sizeof(uri), "file://%s", p0);
  hawser_segment_id_t fseg = 0;
  CHECK_OK(hawser_open_segment(e, uri, &fseg));
  hawser_segment_buffer_t bufs[4];
  size_t n = 4;
  CHECK_OK(hawser_segment_buffers(e, fseg, bufs, &n));
  CHECK(n == 1);
  CHECK(bufs[0].addr == 0 && bufs[0].length == flen);
  CHECK(strcmp(bufs[0].location, p0) == 0);
  hawser_route_t route;
  CHECK_OK(hawser_explain_route(e, fseg, NULL, &route));
  CHECK(strcmp(route.transport, "file") == 0);
  hawser_request_t r = {HAWSER_OP_READ, mem, fseg, 0, flen};
  CHECK_OK(hawser_transfer_sync(e, &r, 1, 60000, NULL));
  CHECK(memcmp(mem, want, flen) == 0);
  /* A write at an unaligned offset, read back through the segment. */
  memset(mem, 0xAB, 1000);
  hawser_request_t wr = {HAWSER_OP_WRITE, mem, fseg, 777, 1000};
  CHECK_OK(hawser_transfer_sync(e, &wr, 1, 60000, NULL));
  memset(want + 777, 0xAB, 1000);
  memset(mem, 0, flen);
  CHECK_OK(hawser_transfer_sync(e, &r, 1, 60000, NULL));
  CHECK(memcmp(mem, want, flen) == 0);
  hawser_request_t past_end = {HAWSER_OP_READ, mem, fseg, flen - 10, 20};
  CHECK_RC(hawser_transfer_sync(e, &past_end, 1, 60000, NULL), HAWSER_E_OUT_OF_RANGE);
  CHECK_OK(hawser_close_segment(e, fseg));

  /* A named segment: file 0's default path does not exist; this engine's server name maps it. */
  hawser_kv_t map0[2] = {{"some-other-host", "/nonexistent/elsewhere"}, {"capi-files", p0}};
  hawser_file_desc_t files[2] = {{"/nonexistent/hawser_c_api_default", flen, map0, 2}, {p1, flen, NULL, 0}};
  CHECK_OK(hawser_register_file_segment(e, "capi-named", files, 2));
  hawser_segment_id_t nseg = 0;
  CHECK_OK(hawser_open_segment(e, "capi-named", &nseg));
  n = 4;
  CHECK_OK(hawser_segment_buffers(e, nseg, bufs, &n));
  CHECK(n == 2);
  CHECK(bufs[0].addr == 0 && bufs[0].length == flen);
  CHECK(bufs[1].addr == flen && bufs[1].length == flen);
  CHECK(strcmp(bufs[1].location, p1) == 0);
  /* One read spanning both files. */
  memset(mem, 0, 2 * flen);
  hawser_request_t span = {HAWSER_OP_READ, mem, nseg, flen - 4096, 8192};
  hawser_status_t st;
  CHECK_OK(hawser_transfer_sync(e, &span, 1, 60000, &st));
  CHECK(st.state == HAWSER_COMPLETED && st.transferred_bytes == 8192);
  CHECK(memcmp(mem, want + flen - 4096, 8192) == 0);
  hawser_batch_id_t batch = 0;
  CHECK_OK(hawser_allocate_batch(e, 1, &batch));
  hawser_request_t whole = {HAWSER_OP_READ, mem, nseg, 0, 2 * flen};
  CHECK_OK(hawser_submit(e, batch, &whole, 1));
  CHECK_OK(hawser_wait(e, batch, 60000));
  CHECK_OK(hawser_batch_status(e, batch, &st));
  CHECK(st.state == HAWSER_COMPLETED && st.transferred_bytes == 2 * flen);
  CHECK(memcmp(mem, want, 2 * flen) == 0);
  CHECK_OK(hawser_free_batch(e, batch));
  CHECK_OK(hawser_close_segment(e, nseg));
  CHECK_OK(hawser_unregister_file_segment(e, "capi-named"));
  CHECK_RC(hawser_unregister_file_segment(e, "capi-named"), HAWSER_E_SEGMENT_NOT_FOUND);
  CHECK_RC(hawser_open_segment(e, "capi-named", &nseg), HAWSER_E_SEGMENT_NOT_FOUND);

  /* Mapped only for another host, no default path: HAWSER_E_PATH_NOT_MAPPED at submit. */
  hawser_kv_t map_other[1] = {{"some-other-host", p0}};
  hawser_file_desc_t unmapped = {NULL, flen, map_other, 1};
  CHECK_OK(hawser_register_file_segment(e, "capi-unmapped", &unmapped, 1));
  CHECK_OK(hawser_open_segment(e, "capi-unmapped", &nseg));
  hawser_request_t r2 = {HAWSER_OP_READ, mem, nseg, 0, 4096};
  CHECK_RC(hawser_transfer_sync(e, &r2, 1, 60000, NULL), HAWSER_E_PATH_NOT_MAPPED);
  CHECK_ERROR_NAMES("capi-files");
  CHECK_OK(hawser_close_segment(e, nseg));
  CHECK_OK(hawser_unregister_file_segment(e, "capi-unmapped"));
  /* Bad descriptions. */
  hawser_file_desc_t empty = {p0, 0, NULL, 0};
  CHECK_RC(hawser_register_file_segment(e, "capi-empty", &empty, 1), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_file_segment(e, "capi-none", files, 0), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_register_file_segment(e, "file://x", files, 1), HAWSER_E_INVALID_ARGUMENT);

  CHECK(counter(e, "", "tasks_submitted") >= 5);
  CHECK_OK(hawser_unregister_memory(e, mem));
  hawser_engine_destroy(e);
  unlink(p0);
  unlink(p1);
  free(want);
  free(mem);
  return 0;
}

/* transports() lists the installed ones cheapest first; diagnose() covers every built one. */
static int transports_and_diagnosis_agree(void) {
  hawser_engine_t* e = NULL;
  CHECK_OK(create_engine("capi-diag", &e));
  const char* names[16];
  size_t nt = 16;
  CHECK_OK(hawser_transports(e, names, &nt));
  CHECK(nt >= 1);
  CHECK(has_transport(e, "tcp"));
  hawser_diagnosis_t d[16];
  size_t nd = 16;
  CHECK_OK(hawser_diagnose(e, d, &nd));
  CHECK(nd >= nt);
  size_t installed = 0;
  for (size_t i = 0; i < nd; ++i) {
    CHECK(strlen(d[i].transport) > 0);
    CHECK(strlen(d[i].moves) > 0);
    CHECK(d[i].fact_count == 0 || d[i].facts != NULL);
    if (d[i].installed) {
      ++installed;
      CHECK(strcmp(d[i].reason, "") == 0);
    } else {
      CHECK(strlen(d[i].reason) > 0); /* why not */
    }
  }
  CHECK(installed == nt);
  /* Every installed name is diagnosed as installed, and names come cheapest first. */
  int last_rank = -1000000;
  for (size_t t = 0; t < nt; ++t) {
    int rank = 0, seen = 0;
    for (size_t i = 0; i < nd; ++i)
      if (strcmp(d[i].transport, names[t]) == 0 && d[i].installed) {
        seen = 1;
        rank = d[i].cost_rank;
      }
    CHECK(seen);
    CHECK(rank >= last_rank);
    last_rank = rank;
  }
  /* Engine counters are present before any work, and the batch counters move. */
  CHECK(counter(e, "", "batches_allocated") == 0);
  CHECK(counter(e, "", "batches_open") == 0);
  hawser_batch_id_t b = 0;
  CHECK_OK(hawser_allocate_batch(e, 4, &b));
  CHECK(counter(e, "", "batches_allocated") == 1);
  CHECK(counter(e, "", "batches_open") == 1);
  CHECK_OK(hawser_free_batch(e, b));
  CHECK(counter(e, "", "batches_open") == 0);
  CHECK(counter(e, "tcp", "no_such_counter") == UINT64_MAX);
  hawser_engine_destroy(e);
  return 0;
}

/* The device records: the transports' own, in fields; the file transport always has its io_uring. */
static int devices_are_records_of_the_diagnosed_transports(void) {
  hawser_engine_t* e = NULL;
  size_t n = 0;
  CHECK_RC(hawser_devices(NULL, NULL, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_OK(create_engine("capi-devices", &e));
  CHECK_RC(hawser_devices(e, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("count is null");
  CHECK_OK(hawser_devices(e, NULL, &n)); /* a size query */
  CHECK(n >= 1);
  hawser_device_t dev[32];
  CHECK(n <= 32);
  size_t small = n - 1;
  CHECK_RC(hawser_devices(e, dev, &small), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(small == n);
  size_t got = 32;
  CHECK_OK(hawser_devices(e, dev, &got));
  CHECK(got == n);
  hawser_diagnosis_t d[16];
  size_t nd = 16;
  CHECK_OK(hawser_diagnose(e, d, &nd));
  int io_urings = 0;
  for (size_t i = 0; i < got; ++i) {
    int diagnosed = 0;
    for (size_t j = 0; j < nd; ++j) diagnosed |= strcmp(d[j].transport, dev[i].transport) == 0;
    CHECK(diagnosed);
    CHECK(strcmp(dev[i].kind, "nic") == 0 || strcmp(dev[i].kind, "gpu") == 0 || strcmp(dev[i].kind, "io_uring") == 0 ||
          strcmp(dev[i].kind, "cufile") == 0);
    CHECK(strlen(dev[i].name) > 0);
    CHECK(dev[i].used ? strcmp(dev[i].reason, "") == 0 : strlen(dev[i].reason) > 0);
    if (strcmp(dev[i].kind, "io_uring") == 0) {
      ++io_urings;
      CHECK(strcmp(dev[i].transport, "file") == 0);
      CHECK(strcmp(dev[i].name, "io_uring") == 0);
      CHECK(strcmp(dev[i].mode, "usable") == 0 || strcmp(dev[i].mode, "unavailable") == 0 ||
            strcmp(dev[i].mode, "off") == 0 || strcmp(dev[i].mode, "absent") == 0);
      CHECK(dev[i].index == -1 && dev[i].port == 0 && strcmp(dev[i].pci_bus_id, "") == 0);
    }
    if (strcmp(dev[i].kind, "cufile") == 0)
      CHECK(strcmp(dev[i].mode, "gds") == 0 || strcmp(dev[i].mode, "compat") == 0 ||
            strcmp(dev[i].mode, "absent") == 0 || strcmp(dev[i].mode, "off") == 0);
  }
  CHECK(io_urings == 1);
  hawser_engine_destroy(e);
  return 0;
}

/* ---- main ------------------------------------------------------------------ */

static const struct c_case cases[] = {
    {"bad_inputs_get_their_exact_codes", bad_inputs_get_their_exact_codes},
    {"init_options_are_applied_and_checked", init_options_are_applied_and_checked},
    {"memory_registers_singly_and_in_batches", memory_registers_singly_and_in_batches},
    {"two_engines_write_a_batch_and_read_it_back", two_engines_write_a_batch_and_read_it_back},
    {"cancel_ends_a_batch_that_free_refused_as_busy", cancel_ends_a_batch_that_free_refused_as_busy},
    {"file_segments_read_and_write_through_the_c_api", file_segments_read_and_write_through_the_c_api},
    {"transports_and_diagnosis_agree", transports_and_diagnosis_agree},
    {"devices_are_records_of_the_diagnosed_transports", devices_are_records_of_the_diagnosed_transports},
    {"a_route_contract_refuses_at_submit_or_picks_the_allowed_transport",
     a_route_contract_refuses_at_submit_or_picks_the_allowed_transport},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
