/* The checks of the C test programs in tests/c: each case is a
 * function returning 0 or 1; a failed check prints the case (g_case, set by
 * run_cases of c_cases.h), the place, the check and hawser's last error, and
 * returns 1 from the case. Needs hawser/c_api.h, <stdio.h> and <string.h>. */
#ifndef HAWSER_TESTS_C_CHECK_H
#define HAWSER_TESTS_C_CHECK_H

#include "c_cases.h"

/* Fails the current case (returns 1 from it) with the check's text. */
#define CHECK(cond)                                                                                       \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      fprintf(stderr, "FAIL %s: %s:%d: %s (last error: %s)\n", g_case, __FILE__, __LINE__, #cond,      \
              hawser_last_error());                                                                       \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

/* Fails the current case unless `call` returns `want` (both named in the message). */
#define CHECK_RC(call, want)                                                                              \
  do {                                                                                                    \
    int rc_ = (call);                                                                                     \
    int want_ = (want);                                                                                   \
    if (rc_ != want_) {                                                                                   \
      fprintf(stderr, "FAIL %s: %s:%d: %s returned %d (%s), want %d (%s); last error: %s\n", g_case,     \
              __FILE__, __LINE__, #call, rc_, hawser_code_name(rc_), want_, hawser_code_name(want_),      \
              hawser_last_error());                                                                       \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

#define CHECK_OK(call) CHECK_RC(call, HAWSER_OK)

/* The last error contains `needle`. */
#define CHECK_ERROR_NAMES(needle) CHECK(strstr(hawser_last_error(), (needle)) != NULL)

#endif
