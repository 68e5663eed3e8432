/* The Mooncake-compatible C API (hawser/mooncake_c.h) from C (C11,
 * -Wpedantic -Werror), as a program written for Mooncake's
 * transfer_engine_c.h uses it: two engines in one process
 * (P2PHANDSHAKE on 127.0.0.1), register, open the peer's segment by its
 * "ip:port", write and read with the bytes checked, task states numbered as
 * Mooncake's, notifications, and Mooncake's return numbers for bad input.
 * The engines use tcp (HAWSER_TRANSPORT), so that a dead peer fails in flight.
 *
 * Usage: c_mooncake_c_test [case]   (no argument: every case)
 * Each case prints "ok - <case>" or "FAIL <case>: ..." and the program exits
 * 1 when any case failed.
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/mooncake_c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_cases.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "FAIL %s: %s:%d: %s\n", g_case, __FILE__, __LINE__, #cond);   \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

#define CHECK_RC(call, want)                                                                            \
  do {                                                                                                  \
    long long rc_ = (long long)(call);                                                                  \
    long long want_ = (long long)(want);                                                                \
    if (rc_ != want_) {                                                                                 \
      fprintf(stderr, "FAIL %s: %s:%d: %s returned %lld, want %lld\n", g_case, __FILE__, __LINE__, #call, \
              rc_, want_);                                                                              \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)

#define MIB ((size_t)1 << 20)

static void* aligned(size_t len) {
  void* p = aligned_alloc(4096, len);
  if (p) memset(p, 0, len);
  return p;
}

static void fill(unsigned char* p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; ++i) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 12));
}

static int same(const unsigned char* p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; ++i)
    if (p[i] != (unsigned char)(i * 131u + seed * 7u + (i >> 12))) return 0;
  return 1;
}

static void pause_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&t, NULL);
}

/* Polls getTransferStatus until task `task` is terminal (or 30 s): its state, or -1. */
static int wait_task(transfer_engine_t e, batch_id_t b, size_t task, transfer_status_t* st) {
  for (int i = 0; i < 30000; ++i) {
    if (getTransferStatus(e, b, task, st) != 0) return -1;
    if (st->status != STATUS_WAITING && st->status != STATUS_PENDING) return st->status;
    pause_ms(1);
  }
  return -1;
}

/* Two engines: `target` exposes `mem` (tgt_len bytes); `init` opened it as *seg. */
struct pair {
  transfer_engine_t target, init;
  unsigned char *mem, *local;
  size_t tgt_len, local_len;
  segment_id_t seg;
  char name[64];
};

static int pair_open(struct pair* p, size_t tgt_len, size_t local_len) {
  memset(p, 0, sizeof(*p));
  p->tgt_len = tgt_len;
  p->local_len = local_len;
  p->target = createTransferEngine("P2PHANDSHAKE", "target", "127.0.0.1", 0, 1);
  CHECK(p->target != NULL);
  p->init = createTransferEngine("P2PHANDSHAKE", "initiator", "127.0.0.1", 0, 1);
  CHECK(p->init != NULL);
  p->mem = aligned(tgt_len);
  p->local = aligned(local_len);
  CHECK(p->mem && p->local);
  CHECK_RC(registerLocalMemory(p->target, p->mem, tgt_len, "cpu:0", 1), 0);
  CHECK_RC(registerLocalMemory(p->init, p->local, local_len, "*", 1), 0);
  /* With P2PHANDSHAKE the peer's segment is named by its "ip:port". */
  CHECK_RC(getLocalIpAndPort(p->target, p->name, sizeof(p->name)), 0);
  CHECK(strncmp(p->name, "127.0.0.1:", 10) == 0);
  p->seg = openSegment(p->init, p->name);
  CHECK(p->seg > 0);
  return 0;
}

static void pair_close(struct pair* p) {
  destroyTransferEngine(p->init);
  destroyTransferEngine(p->target);
  free(p->mem);
  free(p->local);
}

static transfer_request_t req(int op, void* src, segment_id_t seg, const void* remote, uint64_t len) {
  transfer_request_t r;
  memset(&r, 0, sizeof(r)); /* file_id 0: memory */
  r.opcode = op;
  r.source = src;
  r.target_id = seg;
  r.target_offset = (uint64_t)(uintptr_t)remote;
  r.length = len;
  return r;
}

/* ---- cases ------------------------------------------------------------------ */

static int layouts_and_numbers_are_mooncakes(void) {
  /* What a Mooncake program compiles against. */
  CHECK(STATUS_WAITING == 0 && STATUS_PENDING == 1 && STATUS_INVALID == 2 && STATUS_CANCELED == 3);
  CHECK(STATUS_COMPLETED == 4 && STATUS_TIMEOUT == 5 && STATUS_FAILED == 6);
  CHECK(OPCODE_READ == 0 && OPCODE_WRITE == 1 && LOCAL_SEGMENT == 0 && INVALID_BATCH == UINT64_MAX);
  CHECK(sizeof(segment_id_t) == 4 && sizeof(file_id_t) == 4 && sizeof(batch_id_t) == 8);
  /* The LP64 layouts of Mooncake's structs. */
  CHECK(sizeof(transfer_request_t) == 40 && offsetof(transfer_request_t, source) == 8 &&
        offsetof(transfer_request_t, target_id) == 16 && offsetof(transfer_request_t, file_id) == 20 &&
        offsetof(transfer_request_t, target_offset) == 24 &&
        offsetof(transfer_request_t, length) == 32);
  CHECK(sizeof(transfer_status_t) == 16 && offsetof(transfer_status_t, transferred_bytes) == 8);
  CHECK(sizeof(notify_msg_t) == 16 && sizeof(buffer_entry_t) == 16);
  return 0;
}

static int write_then_read_moves_the_bytes(void) {
  struct pair p;
  if (pair_open(&p, 8 * MIB, 8 * MIB)) return 1;
  fill(p.local, 4 * MIB, 3);
  batch_id_t b = allocateBatchID(p.init, 4);
  CHECK(b != INVALID_BATCH);
  /* Two writes in one submit, to two places of the target. */
  transfer_request_t w[2] = {req(OPCODE_WRITE, p.local, p.seg, p.mem + 4096, 3 * MIB),
                             req(OPCODE_WRITE, p.local + 3 * MIB, p.seg, p.mem + 4096 + 3 * MIB, MIB)};
  CHECK_RC(submitTransfer(p.init, b, w, 2), 0);
  transfer_status_t st;
  for (size_t t = 0; t < 2; ++t) {
    CHECK_RC(wait_task(p.init, b, t, &st), STATUS_COMPLETED);
    CHECK(st.transferred_bytes == w[t].length);
  }
  CHECK(same(p.mem + 4096, 4 * MIB, 3));
  /* A read back, in the same batch: task ids continue. */
  transfer_request_t r = req(OPCODE_READ, p.local + 4 * MIB, p.seg, p.mem + 4096, 4 * MIB);
  CHECK_RC(submitTransfer(p.init, b, &r, 1), 0);
  CHECK_RC(wait_task(p.init, b, 2, &st), STATUS_COMPLETED);
  CHECK(st.transferred_bytes == 4 * MIB);
  CHECK(same(p.local + 4 * MIB, 4 * MIB, 3));
  CHECK_RC(submitTransfer(p.init, b, NULL, 0), 0); /* an empty submit is fine */
  CHECK_RC(freeBatchID(p.init, b), 0);
  CHECK_RC(closeSegment(p.init, p.seg), 0);
  pair_close(&p);
  return 0;
}

static int the_own_segment_is_local_segment(void) {
  transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "self", NULL, 0, 0);
  CHECK(e != NULL);
  unsigned char* a = aligned(MIB);
  unsigned char* c = aligned(MIB);
  CHECK(a && c);
  buffer_entry_t bufs[2] = {{a, MIB}, {c, MIB}};
  CHECK_RC(registerLocalMemoryBatch(e, bufs, 2, "cpu:0"), 0);
  char name[64];
  CHECK_RC(getLocalIpAndPort(e, name, sizeof(name)), 0);
  CHECK_RC(openSegment(e, name), LOCAL_SEGMENT);
  fill(a, MIB, 11);
  batch_id_t b = allocateBatchID(e, 1);
  transfer_request_t w = req(OPCODE_WRITE, a, LOCAL_SEGMENT, c, MIB);
  CHECK_RC(submitTransfer(e, b, &w, 1), 0);
  transfer_status_t st;
  CHECK_RC(wait_task(e, b, 0, &st), STATUS_COMPLETED);
  CHECK(same(c, MIB, 11));
  CHECK_RC(freeBatchID(e, b), 0);
  /* Transports are installed at creation; install/uninstall are accepted as Mooncake's. */
  CHECK(installTransport(e, "tcp", NULL) != NULL);
  CHECK(installTransport(e, "efa", NULL) == NULL);
  CHECK_RC(uninstallTransport(e, "tcp"), 0);
  CHECK_RC(discoverTopology(e), 0);
  CHECK_RC(syncSegmentCache(e), 0);
  void* addrs[2] = {a, c};
  CHECK_RC(unregisterLocalMemoryBatch(e, addrs, 2), 0);
  destroyTransferEngine(e);
  free(a);
  free(c);
  return 0;
}

static int a_dead_peer_fails_the_task_as_failed(void) {
  struct pair p;
  if (pair_open(&p, MIB, MIB)) return 1;
  destroyTransferEngine(p.target);
  p.target = NULL;
  batch_id_t b = allocateBatchID(p.init, 1);
  transfer_request_t r = req(OPCODE_READ, p.local, p.seg, p.mem, 4096);
  CHECK_RC(submitTransfer(p.init, b, &r, 1), 0); /* the cached descriptor still has it */
  transfer_status_t st;
  CHECK_RC(wait_task(p.init, b, 0, &st), STATUS_FAILED);
  CHECK(st.transferred_bytes == 0);
  CHECK_RC(freeBatchID(p.init, b), 0);
  /* Notifying a dead peer: Mooncake's socket error. */
  notify_msg_t m = {(char*)"n", (char*)"m"};
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), MC_ERR_SOCKET);
  pair_close(&p);
  return 0;
}

static int notifications_follow_the_write_and_go_alone(void) {
  struct pair p;
  if (pair_open(&p, 2 * MIB, 2 * MIB)) return 1;
  int n = -1;
  notify_msg_t* got = getNotifsFromEngine(p.target, &n);
  CHECK(got != NULL && n == 0); /* none yet: an empty array, not an error */
  CHECK_RC(freeNotifsMsgBuf(got, n), 0);

  fill(p.local, 2 * MIB, 21);
  batch_id_t b = allocateBatchID(p.init, 1);
  transfer_request_t w = req(OPCODE_WRITE, p.local, p.seg, p.mem, 2 * MIB);
  notify_msg_t m = {(char*)"kv-ready", (char*)"layer 7"};
  CHECK_RC(submitTransferWithNotify(p.init, b, &w, 1, m), 0);
  transfer_status_t st;
  CHECK_RC(wait_task(p.init, b, 0, &st), STATUS_COMPLETED);
  /* The receiver takes it, and the written bytes are there when it does. */
  for (int i = 0; i < 20000 && n <= 0; ++i) {
    got = getNotifsFromEngine(p.target, &n);
    CHECK(got != NULL);
    if (n == 0) {
      freeNotifsMsgBuf(got, n);
      pause_ms(1);
    }
  }
  CHECK_RC(n, 1);
  CHECK(same(p.mem, 2 * MIB, 21));
  CHECK(strcmp(got[0].name, "kv-ready") == 0 && strcmp(got[0].msg, "layer 7") == 0);
  CHECK_RC(freeNotifsMsgBuf(got, n), 0);
  CHECK_RC(freeBatchID(p.init, b), 0);

  /* Alone, in the order sent. */
  notify_msg_t a = {(char*)"a", (char*)"1"}, c = {(char*)"c", (char*)"2"};
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, a), 0);
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, c), 0);
  got = getNotifsFromEngine(p.target, &n);
  CHECK(got != NULL);
  CHECK_RC(n, 2);
  CHECK(strcmp(got[0].name, "a") == 0 && strcmp(got[1].name, "c") == 0 && strcmp(got[1].msg, "2") == 0);
  freeNotifsMsgBuf(got, n);
  pair_close(&p);
  return 0;
}

static int a_full_notification_queue_is_too_many_requests_at_the_sender(void) {
  setenv("HAWSER_NOTIFY_QUEUE_DEPTH", "2", 1);
  struct pair p;
  int rc = pair_open(&p, MIB, MIB);
  unsetenv("HAWSER_NOTIFY_QUEUE_DEPTH");
  if (rc) return 1;
  notify_msg_t m = {(char*)"n", (char*)""};
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), 0);
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), 0);
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), MC_ERR_TOO_MANY_REQUESTS);
  int n = 0;
  notify_msg_t* got = getNotifsFromEngine(p.target, &n);
  CHECK(got != NULL && n == 2);
  freeNotifsMsgBuf(got, n);
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), 0); /* drained: room again */
  pair_close(&p);
  return 0;
}

static int bad_input_gets_mooncakes_numbers(void) {
  struct pair p;
  if (pair_open(&p, 8 * MIB, 4 * MIB)) return 1;
  /* Registration: ERR_* numbers. */
  CHECK_RC(registerLocalMemory(p.init, p.local + 4096, 4096, "cpu:0", 1), MC_ERR_ADDRESS_OVERLAPPED);
  CHECK_RC(registerLocalMemory(p.init, p.local, 0, "cpu:0", 1), MC_ERR_INVALID_ARGUMENT);
  CHECK_RC(registerLocalMemory(NULL, p.local, 4096, "cpu:0", 1), MC_ERR_INVALID_ARGUMENT);
  CHECK_RC(unregisterLocalMemory(p.init, p.local + 1), MC_ERR_ADDRESS_NOT_REGISTERED);
  /* Segments and batches. */
  CHECK_RC(openSegment(p.init, "127.0.0.1:1"), -1);
  CHECK_RC(closeSegment(p.init, 9999), MC_ERR_INVALID_ARGUMENT);
  CHECK(allocateBatchID(p.init, 0) == INVALID_BATCH);
  CHECK(allocateBatchID(NULL, 1) == INVALID_BATCH);
  /* Submissions: Mooncake's Status codes (positive). */
  batch_id_t b = allocateBatchID(p.init, 32);
  CHECK(b != INVALID_BATCH);
  unsigned char outside[64];
  transfer_request_t r = req(OPCODE_READ, outside, p.seg, p.mem, sizeof(outside));
  CHECK_RC(submitTransfer(p.init, b, &r, 1), MC_STATUS_ADDRESS_NOT_REGISTERED);
  r = req(7, p.local, p.seg, p.mem, 64);
  CHECK_RC(submitTransfer(p.init, b, &r, 1), MC_STATUS_INVALID_ARGUMENT);
  r = req(OPCODE_READ, p.local, p.seg, p.mem + 8 * MIB - 10, 64); /* past the target's buffer */
  CHECK_RC(submitTransfer(p.init, b, &r, 1), MC_STATUS_INVALID_ARGUMENT);
  r = req(OPCODE_READ, p.local, p.seg, p.mem, 64);
  r.file_id = 3; /* a Mooncake file buffer: not provided */
  CHECK_RC(submitTransfer(p.init, b, &r, 1), MC_STATUS_INVALID_ARGUMENT);
  CHECK(!supportFileBuffer(p.init));
  file_id_t fid = 77;
  CHECK_RC(registerLocalFile(p.init, "/tmp/x", 4096, &fid), MC_ERR_NOT_IMPLEMENTED);
  CHECK(fid == 77);
  CHECK_RC(unregisterLocalFile(p.init, "/tmp/x"), MC_ERR_NOT_IMPLEMENTED);
  r = req(OPCODE_READ, p.local, 4242, p.mem, 64); /* not an open segment */
  CHECK_RC(submitTransfer(p.init, b, &r, 1), MC_STATUS_INVALID_ARGUMENT);
  CHECK_RC(submitTransfer(p.init, b + 1000, &r, 1), MC_STATUS_INVALID_ARGUMENT);
  transfer_status_t st;
  CHECK_RC(getTransferStatus(p.init, b, 0, &st), MC_STATUS_INVALID_ARGUMENT); /* no task 0 yet */
  transfer_request_t many[33];
  for (int i = 0; i < 33; ++i) many[i] = req(OPCODE_READ, p.local, p.seg, p.mem, 4 * MIB);
  CHECK_RC(submitTransfer(p.init, b, many, 33), MC_STATUS_TOO_MANY_REQUESTS); /* capacity 32 */
  /* 128 MiB of reads in flight: the batch is busy until they end. */
  CHECK_RC(submitTransfer(p.init, b, many, 32), 0);
  CHECK_RC(freeBatchID(p.init, b), MC_STATUS_BATCH_BUSY);
  for (size_t t = 0; t < 32; ++t) CHECK_RC(wait_task(p.init, b, t, &st), STATUS_COMPLETED);
  int freed = -1;
  for (int i = 0; i < 1000 && freed != 0; ++i) {
    freed = freeBatchID(p.init, b);
    if (freed) pause_ms(1);
  }
  CHECK_RC(freed, 0);
  CHECK_RC(freeBatchID(p.init, b), MC_STATUS_INVALID_ARGUMENT); /* twice */
  /* Notifications. */
  notify_msg_t m = {(char*)"n", NULL};
  CHECK_RC(genNotifyInEngine(p.init, (uint64_t)p.seg, m), MC_ERR_INVALID_ARGUMENT);
  m.msg = (char*)"x";
  CHECK_RC(genNotifyInEngine(p.init, 4242, m), MC_ERR_INVALID_ARGUMENT);
  b = allocateBatchID(p.init, 1);
  CHECK_RC(submitTransferWithNotify(p.init, b, NULL, 0, m), MC_STATUS_INVALID_ARGUMENT); /* nothing to follow */
  CHECK_RC(freeBatchID(p.init, b), 0);
  CHECK(getNotifsFromEngine(NULL, NULL) == NULL);
  /* What hawser cannot honour. */
  CHECK_RC(warmupEfaSegment(p.init, p.name), MC_ERR_NOT_IMPLEMENTED);
  size_t count = 5;
  CHECK_RC(getNicLoadStats(p.init, NULL, &count), MC_ERR_NOT_IMPLEMENTED);
  CHECK(count == 0);
  /* Creation. */
  CHECK(createTransferEngine("P2PHANDSHAKE", "x", "127.0.0.1", 70000, 0) == NULL);
  CHECK(createTransferEngine("bogus://x", "x", "127.0.0.1", 0, 0) == NULL);
  pair_close(&p);
  return 0;
}

static const struct c_case cases[] = {
    {"layouts_and_numbers_are_mooncakes", layouts_and_numbers_are_mooncakes},
    {"write_then_read_moves_the_bytes", write_then_read_moves_the_bytes},
    {"the_own_segment_is_local_segment", the_own_segment_is_local_segment},
    {"a_dead_peer_fails_the_task_as_failed", a_dead_peer_fails_the_task_as_failed},
    {"notifications_follow_the_write_and_go_alone", notifications_follow_the_write_and_go_alone},
    {"a_full_notification_queue_is_too_many_requests_at_the_sender",
     a_full_notification_queue_is_too_many_requests_at_the_sender},
    {"bad_input_gets_mooncakes_numbers", bad_input_gets_mooncakes_numbers},
};

int main(int argc, char** argv) {
  setenv("HAWSER_TRANSPORT", "tcp", 1);
  return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
