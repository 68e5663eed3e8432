/* hawser_metrics and hawser_metrics_text from C (C11, -Wpedantic -Werror):
 * two engines in one process, a write and a read, and the samples that
 * count them (docs/metrics.md).
 *
 * Usage: c_metrics_test
 * Prints "ok - <case>" or "FAIL <case>: <file>:<line>: <check> ..."; exits 1 on a failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

/* The label `key` of metric sample `m`, or NULL. */
static const char* label(const hawser_metric_t* m, const char* key) {
  for (size_t i = 0; i < m->label_count; ++i)
    if (strcmp(m->labels[i].key, key) == 0) return m->labels[i].value;
  return NULL;
}

/* Value of the sample `name` with transport/peer/direction labels (NULL: not
 * checked); -1 when there is none. */
static double value(hawser_engine_t* e, const char* name, const char* transport, const char* peer,
                    const char* direction) {
  size_t n = 0;
  if (hawser_metrics(e, NULL, &n) != 0) return -1;
  n += 64; /* room for series created in between */
  hawser_metric_t* ms = calloc(n, sizeof(*ms));
  double v = -1;
  if (ms && hawser_metrics(e, ms, &n) == 0) {
    for (size_t i = 0; i < n; ++i) {
      const char* t = label(&ms[i], "transport");
      const char* p = label(&ms[i], "peer");
      const char* d = label(&ms[i], "direction");
      if (strcmp(ms[i].name, name) != 0) continue;
      if (transport && (!t || strcmp(t, transport) != 0)) continue;
      if (peer && (!p || strcmp(p, peer) != 0)) continue;
      if (direction && (!d || strcmp(d, direction) != 0)) continue;
      v = ms[i].value;
      break;
    }
  }
  free(ms);
  return v;
}

static int samples_and_text_count_the_bytes_moved(void) {
  hawser_kv_t cfg[1] = {{"transport", "tcp"}};
  hawser_engine_options_t opts = {cfg, 1};
  hawser_engine_t *a = NULL, *b = NULL;
  CHECK_RC(hawser_engine_create_with_options("p2p", "a", "127.0.0.1", 0, &opts, &a), 0);
  CHECK_RC(hawser_engine_create_with_options("p2p", "b", "127.0.0.1", 0, &opts, &b), 0);
  const size_t len = 200000;
  unsigned char* src = aligned_alloc(4096, 1 << 20);
  unsigned char* dst = aligned_alloc(4096, 1 << 20);
  CHECK(src && dst);
  for (size_t i = 0; i < len; ++i) src[i] = (unsigned char)(i * 7u + 3u);
  memset(dst, 0, 1 << 20);
  CHECK_RC(hawser_register_memory(a, src, 1 << 20, "cpu:0", 0), 0);
  CHECK_RC(hawser_register_memory(b, dst, 1 << 20, "cpu:0", 1), 0);
  char peer[128];
  CHECK_RC(hawser_segment_name(b, peer, sizeof(peer)), 0);
  hawser_segment_id_t seg = 0;
  CHECK_RC(hawser_open_segment(a, peer, &seg), 0);
  hawser_request_t w = {HAWSER_OP_WRITE, src, seg, (uint64_t)(uintptr_t)dst, len};
  CHECK_RC(hawser_transfer_sync(a, &w, 1, 10000, NULL), 0);
  CHECK(memcmp(src, dst, len) == 0);
  CHECK(value(a, "hawser_transferred_bytes_total", "tcp", peer, "write") == (double)len);
  CHECK(value(a, "hawser_tasks_total", "tcp", peer, "write") == 1);
  CHECK(value(a, "hawser_task_duration_seconds_count", "tcp", NULL, "write") == 1);
  CHECK(value(a, "hawser_task_duration_seconds_bucket", "tcp", NULL, "write") >= 0);
  CHECK(value(b, "hawser_served_bytes_total", "tcp", NULL, "write") == (double)len);

  /* The text: a size query, a buffer too small, then the text itself. */
  size_t need = 0;
  CHECK_RC(hawser_metrics_text(a, NULL, &need), 0);
  CHECK(need > 1);
  char tiny[4];
  size_t have = sizeof(tiny);
  CHECK_RC(hawser_metrics_text(a, tiny, &have), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(have > sizeof(tiny));
  have += 4096;
  char* text = malloc(have);
  CHECK(text != NULL);
  CHECK_RC(hawser_metrics_text(a, text, &have), 0);
  CHECK(strlen(text) + 1 == have);
  char line[256];
  snprintf(line, sizeof(line), "hawser_transferred_bytes_total{transport=\"tcp\",peer=\"%s\",direction=\"write\"} %zu\n",
           peer, len);
  CHECK(strstr(text, line) != NULL);
  CHECK(strstr(text, "# TYPE hawser_task_duration_seconds histogram\n") != NULL);
  free(text);
  CHECK_RC(hawser_metrics(NULL, NULL, &have), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_metrics_text(a, NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  hawser_engine_destroy(a);
  hawser_engine_destroy(b);
  free(src);
  free(dst);
  return 0;
}

static const struct c_case cases[] = {
    {"samples_and_text_count_the_bytes_moved", samples_and_text_count_the_bytes_moved},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
