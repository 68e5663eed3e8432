/* The runner of the C test programs in tests/c: a program lists its cases
 * (functions returning 0 on success, 1 on failure) and hands them to
 * run_cases, which runs each (or only the one named by argv[1]), sets
 * g_case for the checks' messages and prints "ok - NAME" per passed case.
 * Needs <stdio.h> and <string.h>. */
#ifndef HAWSER_TESTS_C_CASES_H
#define HAWSER_TESTS_C_CASES_H

static const char* g_case = "";

struct c_case {
  const char* name;
  int (*run)(void);
};

/* 0 when every case run passed, 1 when one failed, 2 when argv[1] names no case. */
static int run_cases(const struct c_case* cases, size_t n, int argc, char** argv) {
  int failed = 0, ran = 0;
  for (size_t i = 0; i < n; ++i) {
    if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
    g_case = cases[i].name;
    ++ran;
    if (cases[i].run() != 0) {
      ++failed;
    } else {
      printf("ok - %s\n", cases[i].name);
    }
    fflush(stdout);
  }
  if (ran == 0) {
    fprintf(stderr, "no case named '%s'\n", argv[1]);
    return 2;
  }
  printf("%d of %d case(s) passed\n", ran - failed, ran);
  return failed ? 1 : 0;
}

#endif
