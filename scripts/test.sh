#!/usr/bin/env bash
# Every test: install what is missing, build Release and ASan+UBSan, run
# ctest on both, then the Python tests (when the binding is built).
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
jobs=${HAWSER_TEST_JOBS:-2}
stage "build (Release)" bash scripts/build.sh release
stage "ctest (Release)" ctest --test-dir build -j "$jobs" --output-on-failure --timeout 300
# Engines in network namespaces move verified data while peers are killed,
# stopped and cut off and etcd restarts (docs/faults.md). 77: it cannot run
# on this host (not root, no namespaces), and says why.
chaos_soak() {
  local rc=0
  bash bench/chaos_soak.sh 60 || rc=$?
  [ "$rc" -eq 77 ] && { echo "chaos soak skipped"; return 0; }
  return "$rc"
}
stage "chaos soak (60 s)" chaos_soak
stage "build (ASan+UBSan)" bash scripts/build.sh asan
asan_ctest() {
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 600
}
stage "ctest (ASan+UBSan)" asan_ctest
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
fi
echo "all tests passed in $(( $(date +%s) - start )) s"
