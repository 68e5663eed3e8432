/* Block requests and plans through the C API (hawser/c_api.h, "Block
 * requests"), from C: two engines in one process over tcp. Bytes verified
 * for a block list, parallel arrays, a strided layout and a plan posted
 * twice; each bad block's exact code, with its index in the last error; a
 * route contract given with each form (the *_routed calls) refusing it with
 * its exact message, or letting it through.
 *
 * Usage: c_c_blocks_test [case]   (no argument: every case)
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"


#define MIB ((size_t)1 << 20)
#define N 500

static unsigned char byte_at(size_t off, unsigned seed) { return (unsigned char)(off * 131u + seed * 7u + (off >> 12)); }

/* Two engines forced to tcp: `init` with local memory `lmem`, the target with
 * `tmem` (filled), and the target opened as `seg`. */
struct pair {
  hawser_engine_t *init, *target;
  unsigned char *lmem, *tmem;
  hawser_segment_id_t seg;
};

static int open_pair(struct pair* p) {
  hawser_kv_t cfg[1] = {{"transport", "tcp"}};
  hawser_engine_options_t opts = {cfg, 1};
  char name[64];
  memset(p, 0, sizeof *p);
  p->lmem = aligned_alloc(4096, 4 * MIB);
  p->tmem = aligned_alloc(4096, 4 * MIB);
  CHECK(p->lmem && p->tmem);
  memset(p->lmem, 0, 4 * MIB);
  for (size_t i = 0; i < 4 * MIB; ++i) p->tmem[i] = byte_at(i, 3);
  CHECK_OK(hawser_engine_create_with_options("p2p", "blocks-target", "127.0.0.1", 0, &opts, &p->target));
  CHECK_OK(hawser_engine_create_with_options("p2p", "blocks-init", "127.0.0.1", 0, &opts, &p->init));
  CHECK_OK(hawser_register_memory(p->target, p->tmem, 4 * MIB, "cpu:0", 1));
  CHECK_OK(hawser_register_memory(p->init, p->lmem, 4 * MIB, "cpu:0", 0));
  CHECK_OK(hawser_segment_name(p->target, name, sizeof name));
  CHECK_OK(hawser_open_segment(p->init, name, &p->seg));
  return 0;
}

static void close_pair(struct pair* p) {
  hawser_engine_destroy(p->init);
  hawser_engine_destroy(p->target);
  free(p->lmem);
  free(p->tmem);
}

/* Waits for task `task` of `b` and checks it COMPLETED with `bytes`. */
static int completed(hawser_engine_t* e, hawser_batch_id_t b, size_t task, size_t bytes) {
  hawser_status_t st;
  CHECK_OK(hawser_wait(e, b, 30000));
  CHECK_OK(hawser_task_status(e, b, task, &st));
  CHECK(st.state == HAWSER_COMPLETED);
  CHECK(st.transferred_bytes == bytes);
  return 0;
}

static int block_list_arrays_and_strided_move_the_bytes(void) {
  struct pair p;
  if (open_pair(&p)) return 1;
  uint64_t tbase = (uint64_t)(uintptr_t)p.tmem;
  hawser_block_t blocks[N];
  uint64_t l[N], r[N];
  hawser_batch_id_t b;
  size_t task = 99;
  /* Block i: 1000 bytes from target offset (N-1-i)*4096+1 to local i*2048. */
  for (size_t i = 0; i < N; ++i) {
    blocks[i].local = p.lmem + i * 2048;
    blocks[i].remote = tbase + (N - 1 - i) * 4096 + 1;
    blocks[i].length = 1000;
  }
  CHECK_OK(hawser_allocate_batch(p.init, 3, &b));
  CHECK_OK(hawser_submit_blocks(p.init, b, HAWSER_OP_READ, p.seg, blocks, N, &task));
  CHECK(task == 0);
  if (completed(p.init, b, 0, N * 1000)) return 1;
  for (size_t i = 0; i < N; ++i)
    for (size_t k = 0; k < 1000; k += 97) CHECK(p.lmem[i * 2048 + k] == byte_at((N - 1 - i) * 4096 + 1 + k, 3));

  /* Parallel arrays, one length for all: a WRITE of local i*2048 to target 2 MiB + i*1000 (packed). */
  for (size_t i = 0; i < N; ++i) {
    l[i] = (uint64_t)(uintptr_t)(p.lmem + i * 2048);
    r[i] = tbase + 2 * MIB + i * 1000;
  }
  CHECK_OK(hawser_submit_block_arrays(p.init, b, HAWSER_OP_WRITE, p.seg, l, r, NULL, 1000, N, &task));
  CHECK(task == 1);
  if (completed(p.init, b, 1, N * 1000)) return 1;
  for (size_t i = 0; i < N; ++i) CHECK(memcmp(p.tmem + 2 * MIB + i * 1000, p.lmem + i * 2048, 1000) == 0);

  /* Strided: read those packed blocks back into every 3000th byte at 1 MiB. */
  hawser_strided_t sb = {p.lmem + MIB, tbase + 2 * MIB, 1000, 3000, 1000, N};
  CHECK_OK(hawser_submit_strided(p.init, b, HAWSER_OP_READ, p.seg, &sb, &task));
  CHECK(task == 2);
  if (completed(p.init, b, 2, N * 1000)) return 1;
  for (size_t i = 0; i < N; ++i) CHECK(memcmp(p.lmem + MIB + i * 3000, p.lmem + i * 2048, 1000) == 0);
  CHECK_OK(hawser_free_batch(p.init, b));
  close_pair(&p);
  return 0;
}

static int a_plan_is_prepared_once_and_posted_twice(void) {
  struct pair p;
  if (open_pair(&p)) return 1;
  uint64_t tbase = (uint64_t)(uintptr_t)p.tmem;
  hawser_plan_id_t plan = 0;
  hawser_plan_info_t info;
  hawser_batch_id_t b;
  /* 1024 blocks of 1 KiB, contiguous on both sides: one run. */
  hawser_strided_t sb = {p.lmem, tbase + 8192, 1024, 1024, 1024, 1024};
  CHECK_OK(hawser_prepare_strided(p.init, HAWSER_OP_WRITE, p.seg, &sb, &plan));
  CHECK_OK(hawser_plan_info(p.init, plan, &info));
  CHECK(info.blocks == 1024 && info.runs == 1 && info.bytes == MIB);
  CHECK_OK(hawser_allocate_batch(p.init, 2, &b));
  for (unsigned round = 0; round < 2; ++round) {
    size_t task = 99;
    for (size_t i = 0; i < MIB; ++i) p.lmem[i] = byte_at(i, 10 + round);
    CHECK_OK(hawser_post_plan(p.init, b, plan, &task));
    CHECK(task == round);
    if (completed(p.init, b, round, MIB)) return 1;
    CHECK(memcmp(p.tmem + 8192, p.lmem, MIB) == 0);
  }
  CHECK_RC(hawser_post_plan(p.init, b, plan, NULL), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK_OK(hawser_free_batch(p.init, b));
  /* A plan from a block list. */
  hawser_block_t blocks[2] = {{p.lmem, tbase, 100}, {p.lmem + 100, tbase + 100, 100}};
  hawser_plan_id_t plan2 = 0;
  CHECK_OK(hawser_prepare_blocks(p.init, HAWSER_OP_READ, p.seg, blocks, 2, &plan2));
  CHECK_OK(hawser_plan_info(p.init, plan2, &info));
  CHECK(info.blocks == 2 && info.runs == 1 && info.bytes == 200);
  CHECK_OK(hawser_release_plan(p.init, plan));
  CHECK_OK(hawser_release_plan(p.init, plan2));
  CHECK_RC(hawser_release_plan(p.init, plan), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("not prepared");
  CHECK_RC(hawser_plan_info(p.init, plan, &info), HAWSER_E_INVALID_ARGUMENT);
  close_pair(&p);
  return 0;
}

static int bad_blocks_get_their_exact_codes_and_index(void) {
  struct pair p;
  if (open_pair(&p)) return 1;
  uint64_t tbase = (uint64_t)(uintptr_t)p.tmem;
  hawser_block_t blocks[8];
  hawser_batch_id_t b;
  hawser_plan_id_t plan = 0;
  for (size_t i = 0; i < 8; ++i) {
    blocks[i].local = p.lmem + i * 8192;
    blocks[i].remote = tbase + i * 8192;
    blocks[i].length = 4096;
  }
  CHECK_OK(hawser_allocate_batch(p.init, 1, &b));
  blocks[6].remote = tbase + 4 * MIB - 100;
  CHECK_RC(hawser_submit_blocks(p.init, b, HAWSER_OP_READ, p.seg, blocks, 8, NULL), HAWSER_E_OUT_OF_RANGE);
  CHECK_ERROR_NAMES("blocks[6]");
  CHECK_RC(hawser_prepare_blocks(p.init, HAWSER_OP_READ, p.seg, blocks, 8, &plan), HAWSER_E_OUT_OF_RANGE);
  CHECK_ERROR_NAMES("blocks[6]");
  blocks[6].remote = tbase + 6 * 8192;
  blocks[2].local = p.lmem + 8192 + 10; /* overlaps blocks[1] locally: refused for a READ */
  CHECK_RC(hawser_submit_blocks(p.init, b, HAWSER_OP_READ, p.seg, blocks, 8, NULL), HAWSER_E_ADDRESS_OVERLAPPED);
  CHECK_ERROR_NAMES("blocks[2]");
  blocks[2].local = (void*)(uintptr_t)4096;
  CHECK_RC(hawser_submit_blocks(p.init, b, HAWSER_OP_WRITE, p.seg, blocks, 8, NULL), HAWSER_E_NOT_REGISTERED);
  CHECK_ERROR_NAMES("blocks[2]");
  CHECK_RC(hawser_submit_blocks(p.init, b, HAWSER_OP_READ, p.seg, blocks, 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("blocks is empty");
  CHECK_RC(hawser_submit_blocks(p.init, b, HAWSER_OP_READ, p.seg, NULL, 3, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("blocks is null");
  CHECK_RC(hawser_submit_blocks(p.init, b, 9, p.seg, blocks, 8, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("opcode 9");
  {
    uint64_t l[2] = {(uint64_t)(uintptr_t)p.lmem, (uint64_t)(uintptr_t)(p.lmem + 4096)};
    uint64_t r[2] = {tbase, tbase + 4096};
    uint64_t lens[2] = {4096, 0};
    CHECK_RC(hawser_submit_block_arrays(p.init, b, HAWSER_OP_READ, p.seg, l, r, lens, 0, 2, NULL),
             HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("blocks[1]: length is 0");
    CHECK_RC(hawser_submit_block_arrays(p.init, b, HAWSER_OP_READ, p.seg, NULL, r, NULL, 64, 2, NULL),
             HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("blocks.local is null");
  }
  {
    hawser_strided_t sb = {p.lmem, tbase, 4096, 4096, 4096, 0};
    CHECK_RC(hawser_submit_strided(p.init, b, HAWSER_OP_READ, p.seg, &sb, NULL), HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("count is 0");
    sb.count = 4;
    sb.remote_stride = 100; /* a WRITE's destinations overlap */
    CHECK_RC(hawser_submit_strided(p.init, b, HAWSER_OP_WRITE, p.seg, &sb, NULL), HAWSER_E_ADDRESS_OVERLAPPED);
    CHECK_ERROR_NAMES("blocks[1]");
    CHECK_RC(hawser_submit_strided(p.init, b, HAWSER_OP_READ, p.seg, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
    CHECK_RC(hawser_prepare_strided(p.init, HAWSER_OP_READ, p.seg, &sb, NULL), HAWSER_E_INVALID_ARGUMENT);
    CHECK_ERROR_NAMES("out is null");
  }
  CHECK_RC(hawser_post_plan(p.init, b, 4242, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_post_plan(NULL, b, 1, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_submit_blocks(p.init, b + 77, HAWSER_OP_READ, p.seg, blocks, 1, NULL), HAWSER_E_INVALID_BATCH);
  CHECK_OK(hawser_free_batch(p.init, b));
  close_pair(&p);
  return 0;
}

/* The last error is exactly `want`. */
#define CHECK_ERROR_IS(want) CHECK(strcmp(hawser_last_error(), (want)) == 0)

/* A route contract given with a block request or plan (the *_routed calls, docs/routes.md): the pair
 * is forced to tcp, so a contract allowing shm only refuses every form at submit (or prepare) with
 * HAWSER_E_NO_TRANSPORT naming tcp, shm and why; one allowing tcp moves the bytes, and a plan keeps the
 * contract it was prepared under; NULL is the engine's (none). */
static int a_route_contract_given_with_a_block_request_refuses_it_or_lets_it_through(void) {
  struct pair p;
  if (open_pair(&p)) return 1;
  const uint64_t tbase = (uint64_t)(uintptr_t)p.tmem;
  char name[64], refusal[600], strided_refusal[512];
  CHECK_OK(hawser_segment_name(p.target, name, sizeof name));
  snprintf(strided_refusal, sizeof strided_refusal,
           "no_transport: segment '%s': the route contract (transports shm, from the request) forbids the route "
           "this request would take, tcp; the expected route, shm, is not the transport forced by config "
           "'transport'",
           name);
  snprintf(refusal, sizeof refusal, "no_transport: blocks[0]: %s", strided_refusal + strlen("no_transport: "));
  const hawser_route_contract_t shm_only = {HAWSER_ROUTE_SHM, 0};
  const hawser_route_contract_t tcp_only = {HAWSER_ROUTE_TCP, 0};
  hawser_block_t blocks[2] = {{p.lmem, tbase + 4096, 1000}, {p.lmem + 8192, tbase, 1000}};
  uint64_t l[2] = {(uint64_t)(uintptr_t)(p.lmem + 16384), (uint64_t)(uintptr_t)(p.lmem + 20480)};
  uint64_t r[2] = {tbase + 8192, tbase + 12288};
  hawser_strided_t sb = {p.lmem + 32768, tbase + 16384, 512, 1024, 512, 8};
  hawser_batch_id_t b;
  hawser_plan_id_t plan = 0;
  size_t task = 99;
  CHECK_OK(hawser_allocate_batch(p.init, 8, &b));

  CHECK_RC(hawser_submit_blocks_routed(p.init, b, HAWSER_OP_READ, p.seg, blocks, 2, &shm_only, &task),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(refusal);
  CHECK_RC(hawser_submit_block_arrays_routed(p.init, b, HAWSER_OP_READ, p.seg, l, r, NULL, 1000, 2, &shm_only, NULL),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(refusal);
  CHECK_RC(hawser_submit_strided_routed(p.init, b, HAWSER_OP_READ, p.seg, &sb, &shm_only, NULL),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(strided_refusal);
  CHECK_RC(hawser_prepare_blocks_routed(p.init, HAWSER_OP_READ, p.seg, blocks, 2, &shm_only, &plan),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(refusal);
  CHECK_RC(hawser_prepare_block_arrays_routed(p.init, HAWSER_OP_READ, p.seg, l, r, NULL, 1000, 2, &shm_only, &plan),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(refusal);
  CHECK_RC(hawser_prepare_strided_routed(p.init, HAWSER_OP_READ, p.seg, &sb, &shm_only, &plan),
           HAWSER_E_NO_TRANSPORT);
  CHECK_ERROR_IS(strided_refusal);
  CHECK(plan == 0);

  /* Nothing was added by the refusals: the first task accepted is task 0. */
  CHECK_OK(hawser_submit_blocks_routed(p.init, b, HAWSER_OP_READ, p.seg, blocks, 2, &tcp_only, &task));
  CHECK(task == 0);
  if (completed(p.init, b, 0, 2000)) return 1;
  CHECK(memcmp(p.lmem, p.tmem + 4096, 1000) == 0 && memcmp(p.lmem + 8192, p.tmem, 1000) == 0);
  CHECK_OK(hawser_submit_block_arrays_routed(p.init, b, HAWSER_OP_READ, p.seg, l, r, NULL, 1000, 2, &tcp_only, &task));
  if (completed(p.init, b, 1, 2000)) return 1;
  CHECK(memcmp(p.lmem + 16384, p.tmem + 8192, 1000) == 0 && memcmp(p.lmem + 20480, p.tmem + 12288, 1000) == 0);
  CHECK_OK(hawser_submit_strided_routed(p.init, b, HAWSER_OP_READ, p.seg, &sb, NULL, &task));
  if (completed(p.init, b, 2, 8 * 512)) return 1;
  for (size_t i = 0; i < 8; ++i) CHECK(memcmp(p.lmem + 32768 + i * 1024, p.tmem + 16384 + i * 512, 512) == 0);
  /* Plans prepared under a contract that allows tcp: each posts and moves its bytes. */
  hawser_plan_id_t plans[3] = {0, 0, 0};
  memset(p.lmem, 0, 64 * 1024);
  CHECK_OK(hawser_prepare_blocks_routed(p.init, HAWSER_OP_READ, p.seg, blocks, 2, &tcp_only, &plans[0]));
  CHECK_OK(hawser_prepare_block_arrays_routed(p.init, HAWSER_OP_READ, p.seg, l, r, NULL, 1000, 2, &tcp_only,
                                              &plans[1]));
  CHECK_OK(hawser_prepare_strided_routed(p.init, HAWSER_OP_READ, p.seg, &sb, &tcp_only, &plans[2]));
  for (size_t k = 0; k < 3; ++k) {
    CHECK_OK(hawser_post_plan(p.init, b, plans[k], &task));
    CHECK(task == 3 + k);
    if (completed(p.init, b, task, k == 2 ? 8 * 512 : 2000)) return 1;
    CHECK_OK(hawser_release_plan(p.init, plans[k]));
  }
  CHECK(memcmp(p.lmem, p.tmem + 4096, 1000) == 0 && memcmp(p.lmem + 20480, p.tmem + 12288, 1000) == 0);
  for (size_t i = 0; i < 8; ++i) CHECK(memcmp(p.lmem + 32768 + i * 1024, p.tmem + 16384 + i * 512, 512) == 0);
  CHECK_OK(hawser_free_batch(p.init, b));
  close_pair(&p);
  return 0;
}

static const struct c_case cases[] = {
    {"block_list_arrays_and_strided_move_the_bytes", block_list_arrays_and_strided_move_the_bytes},
    {"a_plan_is_prepared_once_and_posted_twice", a_plan_is_prepared_once_and_posted_twice},
    {"bad_blocks_get_their_exact_codes_and_index", bad_blocks_get_their_exact_codes_and_index},
    {"a_route_contract_given_with_a_block_request_refuses_it_or_lets_it_through",
     a_route_contract_given_with_a_block_request_refuses_it_or_lets_it_through},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
