/* The C API's config, probe and host memory functions from C (C11,
 * -Wpedantic -Werror): the config table, effective values and where they
 * come from (options win over the environment, which wins over the
 * default), refusals naming the key; hawser_probe_segment against a live
 * and a gone engine; host memory peers can map.
 *
 * Usage: c_c_config_test [case]   (no argument: every case)
 */
#define _POSIX_C_SOURCE 200809L

#include "hawser/c_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_check.h"

static int config_table_lists_every_key_with_its_env_and_default(void) {
  size_t n = 0;
  CHECK_OK(hawser_config_keys(NULL, &n));
  CHECK(n > 20);
  hawser_config_key_t small[1];
  size_t one = 1;
  CHECK_RC(hawser_config_keys(small, &one), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(one == n);
  hawser_config_key_t* keys = calloc(n, sizeof(*keys));
  CHECK(keys != NULL);
  CHECK_OK(hawser_config_keys(keys, &n));
  int found = 0;
  for (size_t i = 0; i < n; ++i) {
    if (strcmp(keys[i].key, "tcp.connections") != 0) continue;
    found = 1;
    CHECK(strcmp(keys[i].env, "HAWSER_TCP_CONNECTIONS") == 0);
    CHECK(strcmp(keys[i].type, "int") == 0);
    CHECK(strcmp(keys[i].default_value, "2") == 0);
    CHECK(strcmp(keys[i].range, "1..64") == 0);
    CHECK(keys[i].doc[0] != '\0' && keys[i].secret == 0);
  }
  free(keys);
  CHECK(found);
  CHECK_RC(hawser_config_keys(NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  return 0;
}

static int options_win_over_the_environment_which_wins_over_the_default(void) {
  int64_t v = 0;
  int src = -1;
  unsetenv("HAWSER_TCP_CONNECTIONS");
  CHECK_OK(hawser_config_int(NULL, "tcp.connections", &v, &src));
  CHECK(v == 2 && src == HAWSER_CONFIG_DEFAULT);
  setenv("HAWSER_TCP_CONNECTIONS", "3", 1);
  CHECK_OK(hawser_config_int(NULL, "tcp.connections", &v, &src));
  CHECK(v == 3 && src == HAWSER_CONFIG_ENVIRONMENT);
  hawser_kv_t kv[] = {{"tcp.connections", "5"}, {"tcp.slice_size", "64K"}, {"shm.shared_mappings", "false"}};
  hawser_engine_options_t o = {kv, 3};
  CHECK_OK(hawser_config_int(&o, "tcp.connections", &v, &src));
  CHECK(v == 5 && src == HAWSER_CONFIG_OPTIONS);
  unsetenv("HAWSER_TCP_CONNECTIONS");
  CHECK_OK(hawser_config_int(&o, "tcp.slice_size", &v, NULL));
  CHECK(v == 65536);
  int b = -1;
  CHECK_OK(hawser_config_bool(&o, "shm.shared_mappings", &b, &src));
  CHECK(b == 0 && src == HAWSER_CONFIG_OPTIONS);
  CHECK_OK(hawser_config_bool(NULL, "shm.shared_mappings", &b, &src));
  CHECK(b == 1 && src == HAWSER_CONFIG_DEFAULT);
  /* The text, with the size-query convention. */
  size_t len = 0;
  CHECK_OK(hawser_config_value(&o, "tcp.slice_size", NULL, &len, NULL));
  CHECK(len == 4);
  char tiny[2];
  size_t tl = sizeof(tiny);
  CHECK_RC(hawser_config_value(&o, "tcp.slice_size", tiny, &tl, NULL), HAWSER_E_CAPACITY_EXCEEDED);
  CHECK(tl == 4);
  char text[16];
  len = sizeof(text);
  CHECK_OK(hawser_config_value(&o, "tcp.slice_size", text, &len, &src));
  CHECK(strcmp(text, "64K") == 0 && len == 4 && src == HAWSER_CONFIG_OPTIONS);
  return 0;
}

static int bad_keys_and_values_are_refused_naming_them(void) {
  int64_t v = 0;
  CHECK_RC(hawser_config_int(NULL, "tcp.no_such_knob", &v, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("tcp.no_such_knob");
  hawser_kv_t kv[] = {{"tcp.connections", "500"}};
  hawser_engine_options_t o = {kv, 1};
  CHECK_RC(hawser_config_int(&o, "tcp.connections", &v, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("HAWSER_TCP_CONNECTIONS");
  CHECK_RC(hawser_validate_config(&o), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("tcp.connections");
  hawser_kv_t good[] = {{"tcp.connections", "4"}};
  hawser_engine_options_t g = {good, 1};
  CHECK_OK(hawser_validate_config(&g));
  CHECK_OK(hawser_validate_config(NULL));
  int b = 0;
  CHECK_RC(hawser_config_bool(NULL, "tcp.connections", &b, NULL), HAWSER_E_INVALID_ARGUMENT);
  hawser_kv_t null_value[] = {{"tcp.connections", NULL}};
  hawser_engine_options_t nv = {null_value, 1};
  CHECK_RC(hawser_validate_config(&nv), HAWSER_E_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("options->config[0].value");
  CHECK_RC(hawser_config_int(NULL, NULL, &v, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_config_int(NULL, "tcp.connections", NULL, NULL), HAWSER_E_INVALID_ARGUMENT);
  return 0;
}

static int probe_answers_for_a_live_peer_and_says_why_not_for_a_gone_one(void) {
  hawser_engine_t *a = NULL, *b = NULL;
  CHECK_OK(hawser_engine_create("p2p", "a", "127.0.0.1", 0, &a));
  CHECK_OK(hawser_engine_create("p2p", "b", "127.0.0.1", 0, &b));
  char name[128];
  CHECK_OK(hawser_segment_name(b, name, sizeof(name)));
  CHECK_OK(hawser_probe_segment(a, name));
  hawser_engine_destroy(b);
  CHECK_RC(hawser_probe_segment(a, name), HAWSER_E_SEGMENT_NOT_FOUND); /* p2p: nobody answers for it */
  CHECK_ERROR_NAMES(name);
  CHECK_RC(hawser_probe_segment(a, NULL), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_probe_segment(NULL, name), HAWSER_E_INVALID_ARGUMENT);
  hawser_engine_destroy(a);
  return 0;
}

static int host_memory_is_zeroed_page_aligned_and_freed_at_its_address_only(void) {
  void* p = NULL;
  CHECK_OK(hawser_allocate_host_memory(5000, &p));
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0);
  for (size_t i = 0; i < 8192; ++i) CHECK(((unsigned char*)p)[i] == 0);
  memset(p, 7, 8192); /* rounded up to two pages */
  CHECK_RC(hawser_free_host_memory((char*)p + 4096), HAWSER_E_INVALID_ARGUMENT);
  CHECK_OK(hawser_free_host_memory(p));
  CHECK_RC(hawser_allocate_host_memory(0, &p), HAWSER_E_INVALID_ARGUMENT);
  CHECK_RC(hawser_allocate_host_memory(4096, NULL), HAWSER_E_INVALID_ARGUMENT);
  return 0;
}

static const struct c_case cases[] = {
    {"config_table_lists_every_key_with_its_env_and_default", config_table_lists_every_key_with_its_env_and_default},
    {"options_win_over_the_environment_which_wins_over_the_default",
     options_win_over_the_environment_which_wins_over_the_default},
    {"bad_keys_and_values_are_refused_naming_them", bad_keys_and_values_are_refused_naming_them},
    {"probe_answers_for_a_live_peer_and_says_why_not_for_a_gone_one",
     probe_answers_for_a_live_peer_and_says_why_not_for_a_gone_one},
    {"host_memory_is_zeroed_page_aligned_and_freed_at_its_address_only",
     host_memory_is_zeroed_page_aligned_and_freed_at_its_address_only},
};

int main(int argc, char** argv) { return run_cases(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }
