/* hawser's C API for signals and notification outcomes (hawser/c_api.h,
 * "Signals") from C (C11, -Wpedantic -Werror): two engines in one process
 * over tcp; the target waits on what the initiator writes.
 *
 * Usage: c_c_signal_test [case]   (no argument: every case)
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hawser/c_api.h"

#include "c_check.h"

struct pair {
  hawser_engine_t *target, *init;
  unsigned char *mem, *local;
  hawser_segment_id_t seg;
  char init_name[128];
};

static int pair_open(struct pair* p) {
  memset(p, 0, sizeof(*p));
  hawser_kv_t cfg[1] = {{"transport", "tcp"}};
  hawser_engine_options_t o = {cfg, 1};
  CHECK_OK(hawser_engine_create_with_options("p2p", "target", "127.0.0.1", 0, &o, &p->target));
  CHECK_OK(hawser_engine_create_with_options("p2p", "init", "127.0.0.1", 0, &o, &p->init));
  p->mem = calloc(1, 1 << 20);
  p->local = calloc(1, 1 << 20);
  CHECK(p->mem && p->local);
  CHECK_OK(hawser_register_memory(p->target, p->mem, 1 << 20, "cpu:0", 1));
  CHECK_OK(hawser_register_memory(p->init, p->local, 1 << 20, "cpu:0", 0));
  char name[128];
  CHECK_OK(hawser_segment_name(p->target, name, sizeof(name)));
  CHECK_OK(hawser_open_segment(p->init, name, &p->seg));
  CHECK_OK(hawser_segment_name(p->init, p->init_name, sizeof(p->init_name)));
  return 0;
}

static void pair_close(struct pair* p) {
  hawser_engine_destroy(p->init);
  hawser_engine_destroy(p->target);
  free(p->mem);
  free(p->local);
}

static int a_signal_completes_once_its_writes_landed_and_is_then_consumed(void) {
  struct pair p;
  if (pair_open(&p)) return 1;
  for (size_t i = 0; i < 8192; ++i) p.local[i] = (unsigned char)(i * 13u + 1u);
  hawser_request_t w[2] = {{HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 4096},
                           {HAWSER_OP_WRITE, p.local + 4096, p.seg, (uint64_t)(uintptr_t)p.mem + 4096, 4096}};
  hawser_batch_id_t b;
  CHECK_OK(hawser_allocate_batch(p.init, 2, &b));
  CHECK_OK(hawser_submit_with_signal(p.init, b, w, 2, "req42"));
  hawser_signal_result_t r;
  CHECK_OK(hawser_wait_signal(p.target, p.init_name, "req42", 2, 20000, &r));
  CHECK(r.state == HAWSER_SIGNAL_COMPLETED);
  CHECK(r.reason == HAWSER_SIGNAL_REASON_NONE);
  CHECK(r.landed == 2);
  CHECK(r.error_code == 0);
  CHECK(strcmp(r.peer, p.init_name) == 0);
  CHECK(memcmp(p.mem, p.local, 8192) == 0);
  CHECK_OK(hawser_wait(p.init, b, 20000));
  CHECK_OK(hawser_free_batch(p.init, b));
  /* Consumed: a second wait starts from nothing. */
  CHECK_OK(hawser_wait_signal(p.target, p.init_name, "req42", 2, 20, &r));
  CHECK(r.state == HAWSER_SIGNAL_TIMEOUT);
  CHECK(r.error_code == HAWSER_E_TIMEOUT);
  CHECK(r.landed == 0);
  CHECK(strcmp(hawser_signal_state_name(r.state), "TIMEOUT") == 0);
  pair_close(&p);
  return 0;
}

static int notify_outcomes_hold_the_delivered_notification(void) {
  struct pair p;
  if (pair_open(&p)) return 1;
  hawser_request_t w = {HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 4096};
  hawser_notification_t n = {"kv", 2, "done", 4};
  hawser_status_t st;
  CHECK_OK(hawser_transfer_sync_with_notify(p.init, &w, 1, &n, 20000, &st));
  size_t count = 0;
  CHECK_OK(hawser_get_notify_outcomes(p.target, NULL, &count));
  CHECK(count == 1);
  hawser_notify_outcome_t got[2];
  count = 2;
  CHECK_OK(hawser_get_notify_outcomes(p.target, got, &count));
  CHECK(count == 1);
  CHECK(got[0].kind == HAWSER_NOTIFY_KIND_DELIVERED);
  CHECK(got[0].name_len == 2 && memcmp(got[0].name, "kv", 2) == 0);
  CHECK(got[0].message_len == 4 && memcmp(got[0].message, "done", 4) == 0);
  CHECK(got[0].error_code == 0);
  CHECK(strcmp(got[0].peer, p.init_name) == 0);
  pair_close(&p);
  return 0;
}

static int bad_arguments_are_invalid(void) {
  struct pair p;
  if (pair_open(&p)) return 1;
  hawser_signal_result_t r;
  CHECK_RC(hawser_wait_signal(NULL, "a", "b", 1, 0, &r), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_wait_signal(p.target, NULL, "b", 1, 0, &r), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("peer");
  CHECK_RC(hawser_wait_signal(p.target, "a", NULL, 1, 0, &r), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_wait_signal(p.target, "a", "b", 1, 0, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_wait_signal(p.target, "a", "b", 0, 0, &r), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("expected is 0");
  hawser_batch_id_t b;
  CHECK_OK(hawser_allocate_batch(p.init, 1, &b));
  hawser_request_t w = {HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 64};
  CHECK_RC(hawser_submit_with_signal(p.init, b, &w, 1, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_submit_with_signal(p.init, b, &w, 1, ""), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_get_notify_outcomes(p.target, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK(strcmp(hawser_signal_state_name(7), "UNKNOWN") == 0);
  CHECK(strcmp(hawser_signal_reason_name(HAWSER_SIGNAL_REASON_PEER_LOST), "PEER_LOST") == 0);
  CHECK_OK(hawser_free_batch(p.init, b));
  pair_close(&p);
  return 0;
}

static const struct c_case cases[] = {
    {"a_signal_completes_once_its_writes_landed_and_is_then_consumed",
     a_signal_completes_once_its_writes_landed_and_is_then_consumed},
    {"notify_outcomes_hold_the_delivered_notification", notify_outcomes_hold_the_delivered_notification},
    {"bad_arguments_are_invalid", bad_arguments_are_invalid},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
