/* hawser's C API for notifications and signals (hawser/c_api.h,
 * "Notifications", "Signals") from C (C11, -Wpedantic -Werror): two engines
 * in one process over tcp.
 *
 * Usage: c_c_notify_test [case]   (no argument: every case)
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
};

static int pair_open(struct pair* p, const char* depth) {
  memset(p, 0, sizeof(*p));
  hawser_kv_t cfg[2] = {{"transport", "tcp"}, {"notify.queue_depth", depth}};
  hawser_engine_options_t o = {cfg, 2};
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
  return 0;
}

static void pair_close(struct pair* p) {
  hawser_engine_destroy(p->init);
  hawser_engine_destroy(p->target);
  free(p->mem);
  free(p->local);
}

static hawser_notification_t note(const char* name, const char* msg, size_t msg_len) {
  hawser_notification_t n;
  n.name = name;
  n.name_len = strlen(name);
  n.message = msg;
  n.message_len = msg_len;
  return n;
}

static int sent_alone_and_after_a_write_received_in_order_with_exact_bytes(void) {
  struct pair p;
  if (pair_open(&p, "16")) return 1;
  hawser_notification_t a = note("bin", "x\0y", 3);
  CHECK_OK(hawser_send_notify(p.init, p.seg, &a));
  for (size_t i = 0; i < 4096; ++i) p.local[i] = (unsigned char)(i * 7u);
  hawser_request_t w = {HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 4096};
  hawser_notification_t b = note("after", "w", 1);
  hawser_status_t st;
  CHECK_OK(hawser_transfer_sync_with_notify(p.init, &w, 1, &b, 20000, &st));
  CHECK(st.state == HAWSER_COMPLETED);
  /* A size query takes nothing; the peer is the sender's segment name. */
  size_t count = 0;
  CHECK_OK(hawser_get_notifies(p.target, NULL, &count));
  CHECK(count == 2);
  hawser_received_notification_t one[1];
  count = 1;
  CHECK_RC(hawser_get_notifies(p.target, one, &count), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(count == 2);
  hawser_received_notification_t got[4];
  count = 4;
  CHECK_OK(hawser_get_notifies(p.target, got, &count));
  CHECK(count == 2);
  char me[128];
  CHECK_OK(hawser_segment_name(p.init, me, sizeof(me)));
  CHECK(strcmp(got[0].peer, me) == 0);
  CHECK(got[0].name_len == 3 && memcmp(got[0].name, "bin", 3) == 0);
  CHECK(got[0].message_len == 3 && memcmp(got[0].message, "x\0y", 3) == 0);
  CHECK(strcmp(got[1].name, "after") == 0 && got[1].message_len == 1);
  for (size_t i = 0; i < 4096; ++i) CHECK(p.mem[i] == (unsigned char)(i * 7u));
  count = 4;
  CHECK_OK(hawser_get_notifies(p.target, got, &count));
  CHECK(count == 0); /* taken */
  pair_close(&p);
  return 0;
}

static int a_full_queue_fails_the_notification_and_the_batch_says_why(void) {
  struct pair p;
  if (pair_open(&p, "1")) return 1;
  hawser_notification_t n = note("first", "", 0);
  CHECK_OK(hawser_send_notify(p.init, p.seg, &n));
  CHECK_RC(hawser_send_notify(p.init, p.seg, &n), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(strstr(hawser_last_error(), "notify.queue_depth") != NULL);
  hawser_batch_id_t b;
  CHECK_OK(hawser_allocate_batch(p.init, 2, &b));
  hawser_request_t w = {HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 64};
  hawser_notification_t m = note("second", "", 0);
  CHECK_OK(hawser_submit_with_notify(p.init, b, &w, 1, &m));
  CHECK_OK(hawser_wait(p.init, b, 20000));
  hawser_notify_status_t ns[2];
  size_t count = 2;
  CHECK_OK(hawser_notify_status(p.init, b, ns, &count));
  CHECK(count == 1);
  CHECK(ns[0].state == HAWSER_NOTIFY_FAILED);
  CHECK(ns[0].error_code == HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(strcmp(hawser_notify_state_name(ns[0].state), "FAILED") == 0);
  CHECK(strstr(ns[0].error_message, "is full") != NULL);
  CHECK_OK(hawser_free_batch(p.init, b));
  pair_close(&p);
  return 0;
}

static int bad_arguments_are_invalid(void) {
  struct pair p;
  if (pair_open(&p, "4")) return 1;
  hawser_notification_t n = note("x", "", 0);
  CHECK_RC(hawser_send_notify(NULL, p.seg, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_send_notify(p.init, p.seg, NULL), HAWSER_E_INVALID_ARGUMENT);
  hawser_notification_t bad = {NULL, 3, "", 0};
  CHECK_RC(hawser_send_notify(p.init, p.seg, &bad), HAWSER_E_INVALID_ARGUMENT);
  CHECK(strstr(hawser_last_error(), "notify->name") != NULL);
  CHECK_RC(hawser_send_notify(p.init, p.seg + 7, &n), HAWSER_E_SEGMENT_NOT_FOUND);
  hawser_batch_id_t b;
  CHECK_OK(hawser_allocate_batch(p.init, 1, &b));
  CHECK_RC(hawser_submit_with_notify(p.init, b, NULL, 0, &n), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_get_notifies(p.target, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  size_t count = 0;
  CHECK_RC(hawser_notify_status(p.init, b + 5, NULL, &count), HAWSER_E_INVALID_BATCH);
  CHECK_OK(hawser_notify_status(p.init, b, NULL, &count));
  CHECK(count == 0);
  CHECK(strcmp(hawser_notify_state_name(99), "UNKNOWN") == 0);
  CHECK_OK(hawser_free_batch(p.init, b));
  pair_close(&p);
  return 0;
}

/* ---- Signals (hawser/c_api.h, "Signals"): the target waits on what the initiator writes ---- */

static int a_signal_completes_once_its_writes_landed_and_is_then_consumed(void) {
  struct pair p;
  if (pair_open(&p, "16")) return 1;
  char me[128];
  CHECK_OK(hawser_segment_name(p.init, me, sizeof(me)));
  for (size_t i = 0; i < 8192; ++i) p.local[i] = (unsigned char)(i * 13u + 1u);
  hawser_request_t w[2] = {{HAWSER_OP_WRITE, p.local, p.seg, (uint64_t)(uintptr_t)p.mem, 4096},
                           {HAWSER_OP_WRITE, p.local + 4096, p.seg, (uint64_t)(uintptr_t)p.mem + 4096, 4096}};
  hawser_batch_id_t b;
  CHECK_OK(hawser_allocate_batch(p.init, 2, &b));
  CHECK_OK(hawser_submit_with_signal(p.init, b, w, 2, "req42"));
  hawser_signal_result_t r;
  CHECK_OK(hawser_wait_signal(p.target, me, "req42", 2, 20000, &r));
  CHECK(r.state == HAWSER_SIGNAL_COMPLETED);
  CHECK(r.reason == HAWSER_SIGNAL_REASON_NONE);
  CHECK(r.landed == 2);
  CHECK(r.error_code == 0);
  CHECK(strcmp(r.peer, me) == 0);
  CHECK(memcmp(p.mem, p.local, 8192) == 0);
  CHECK_OK(hawser_wait(p.init, b, 20000));
  CHECK_OK(hawser_free_batch(p.init, b));
  /* Consumed: a second wait starts from nothing. */
  CHECK_OK(hawser_wait_signal(p.target, me, "req42", 2, 20, &r));
  CHECK(r.state == HAWSER_SIGNAL_TIMEOUT);
  CHECK(r.error_code == HAWSER_E_TIMEOUT);
  CHECK(r.landed == 0);
  CHECK(strcmp(hawser_signal_state_name(r.state), "TIMEOUT") == 0);
  pair_close(&p);
  return 0;
}

static int notify_outcomes_hold_the_delivered_notification(void) {
  struct pair p;
  if (pair_open(&p, "16")) return 1;
  char me[128];
  CHECK_OK(hawser_segment_name(p.init, me, sizeof(me)));
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
  CHECK(strcmp(got[0].peer, me) == 0);
  pair_close(&p);
  return 0;
}

static int signal_bad_arguments_are_invalid(void) {
  struct pair p;
  if (pair_open(&p, "16")) return 1;
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
    {"sent_alone_and_after_a_write_received_in_order_with_exact_bytes",
     sent_alone_and_after_a_write_received_in_order_with_exact_bytes},
    {"a_full_queue_fails_the_notification_and_the_batch_says_why",
     a_full_queue_fails_the_notification_and_the_batch_says_why},
    {"bad_arguments_are_invalid", bad_arguments_are_invalid},
    {"a_signal_completes_once_its_writes_landed_and_is_then_consumed",
     a_signal_completes_once_its_writes_landed_and_is_then_consumed},
    {"notify_outcomes_hold_the_delivered_notification", notify_outcomes_hold_the_delivered_notification},
    {"signal_bad_arguments_are_invalid", signal_bad_arguments_are_invalid},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
