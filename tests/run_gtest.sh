#!/usr/bin/env bash
# Runs one GoogleTest program (or one shard of it) for ctest
# (tests/CMakeLists.txt, hawser_gtest): its exit status; 77 (ctest: skipped)
# when it failed no case and passed none because it skipped them all (no GPU
# on this host, say: each case's output says why); 1 when it ran no case.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && exit "$rc"
if grep -q '^\[==========\] 0 tests from' "$log"; then
  echo "run_gtest.sh: $1 ran no case"
  exit 1
fi
grep -q '^\[  PASSED  \] 0 tests' "$log" && grep -q '^\[  SKIPPED \]' "$log" && exit 77
exit 0
