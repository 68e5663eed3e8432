#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run calls only this). Stages, each timed:
#   deps                 install what is missing (scripts/deps.sh)
#   build (Release)      gcc -O3: library, CLI, Python module, bench helpers
#   ctest (Release)      the checks that need an unsanitized build: packaging
#                        (find_package of an installed copy), docs' config tables
#   pytest               the Python binding against the Release build
#   chaos soak (60 s)    engines in network namespaces move verified data while
#                        peers are killed, stopped and cut off and etcd restarts
#                        (bench/chaos_soak.sh, docs/faults.md)
#   build (ASan+UBSan)   clang: every test program and the libFuzzer targets,
#                        linked against the same sanitized objects
#   ctest (ASan+UBSan)   every test program's cases, the C tests, and each fuzz
#                        target's corpus replayed (regression inputs included)
#   fuzz                 each fuzz target for HAWSER_FUZZ_SECONDS (10) on its
#                        corpus plus new inputs (scripts/fuzz.sh)
#   build (TSan)         clang ThreadSanitizer: the programs labelled tsan;
#                        compiled while the ASan tests run (they mostly wait)
#   ctest (TSan)         their cases; any race report fails the test
# docs/testing.md says why each test runs where it does.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
times=()
# stage NAME COMMAND...: runs it and records how long it took.
stage() {
  local name=$1 t0
  shift
  echo "== $name =="
  t0=$(date +%s)
  "$@"
  times+=("$(printf '%-24s %5d s' "$name" $(( $(date +%s) - t0 )))")
  echo "== $name: $(( $(date +%s) - t0 )) s =="
}
report_times() {
  echo "== stage times =="
  printf '  %s\n' "${times[@]}"
}
trap report_times EXIT
stage "deps" bash scripts/deps.sh
# ctest runs 4 tests at once on 2 cores: most of them wait (on etcd, on
# sockets, on a peer's timeout), few compute. HAWSER_TEST_JOBS overrides.
jobs=${HAWSER_TEST_JOBS:-4}
# Cold builds are the bulk of a CI run: unity builds and a shared precompiled
# header for the test programs (docs/testing.md).
# Given to the builds only: the programs under test read HAWSER_* as config.
unity=${HAWSER_UNITY:-ON} pch=${HAWSER_PCH:-ON}
build() { env HAWSER_UNITY="$unity" HAWSER_PCH="$pch" bash scripts/build.sh "$@"; }
stage "build (Release)" env HAWSER_TEST_PROGRAMS=OFF HAWSER_UNITY="$unity" HAWSER_PCH="$pch" bash scripts/build.sh release
stage "ctest (Release)" ctest --test-dir build -j "$jobs" --output-on-failure --timeout 600
if [ -d python ] && ls python/tests/test_*.py >/dev/null 2>&1; then
  echo "== pytest =="
  t0=$(date +%s)
  set +e
  py=/usr/bin/python3
  [ -x "$py" ] || py=python3
  report=$(mktemp)
  PYTHONPATH="$PWD/build/python" "$py" -m pytest -q -rs --junitxml="$report" python/tests
  rc=$?
  # pytest exits 0 when every test was skipped (the module not built, say):
  # a run that passed nothing is a failure here. Count from its report.
  passed=$("$py" - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0)
    sys.exit()
n = 0
for s in root.iter("testsuite"):
    n += int(s.get("tests", 0)) - int(s.get("failures", 0)) - int(s.get("errors", 0)) - int(s.get("skipped", 0))
print(n)
PY
)
  rm -f "$report"
  set -e
  # pytest exits 5 when it collected no test: that is a failure here too.
  [ $rc -eq 0 ] || { echo "pytest failed (exit $rc)"; exit 1; }
  [ "${passed:-0}" -gt 0 ] || { echo "pytest passed no test (all skipped or none collected): a failure"; exit 1; }
  times+=("$(printf '%-24s %5d s' "pytest" $(( $(date +%s) - t0 )))")
  echo "== pytest: $(( $(date +%s) - t0 )) s =="
fi
# 77: the soak cannot run on this host (not root, no namespaces), and says why.
chaos_soak() {
  local rc=0
  bash bench/chaos_soak.sh 60 || rc=$?
  [ "$rc" -eq 77 ] && { echo "chaos soak skipped"; return 0; }
  return "$rc"
}
stage "chaos soak (60 s)" chaos_soak
stage "build (ASan+UBSan)" build asan
asan_ctest() {
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 600
}
# The TSan build compiles while the ASan tests mostly wait (HAWSER_OVERLAP=0:
# one after the other). Its own time is in the table; "build (TSan) rest"
# is what was left of it after the fuzz stage.
tsan_log=build-tsan/build.log
if [ "${HAWSER_OVERLAP:-1}" = 1 ]; then
  mkdir -p build-tsan
  rm -f "$tsan_log.done"
  # Its own session, so that a failing stage can end the whole build with the run.
  setsid env HAWSER_UNITY="$unity" HAWSER_PCH="$pch" bash -c 't0=$(date +%s); rc=0; bash scripts/build.sh tsan >"$1" 2>&1 || rc=$?
                  echo "$rc $(( $(date +%s) - t0 ))" >"$1.done"' _ "$tsan_log" &
  tsan_pid=$!
  trap 'kill -- -"$tsan_pid" 2>/dev/null || true; report_times' EXIT
fi
stage "ctest (ASan+UBSan)" asan_ctest
stage "fuzz" bash scripts/fuzz.sh "${HAWSER_FUZZ_SECONDS:-10}" build-asan
if [ "${HAWSER_OVERLAP:-1}" = 1 ]; then
  tsan_wait() {
    wait "$tsan_pid" || true
    cat "$tsan_log"
    read -r rc secs <"$tsan_log.done"
    times+=("$(printf '%-24s %5d s' "build (TSan) alongside" "$secs")")
    [ "$rc" = 0 ] || { echo "the TSan build failed (exit $rc)"; return 1; }
  }
  stage "build (TSan) rest" tsan_wait
else
  stage "build (TSan)" build tsan
fi
tsan_ctest() {
  # halt_on_error: a race fails its test. The suppressions file names each
  # third-party frame it silences and why (tests/tsan.supp).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan -L tsan -j "$jobs" --output-on-failure --timeout 600
}
stage "ctest (TSan)" tsan_ctest
echo "all tests passed in $(( $(date +%s) - start )) s"
