#!/usr/bin/env bash
# Every test: install what is missing, build Release and ASan+UBSan, run
# ctest on both, then the Python tests (when the binding is built).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
start=$(date +%s)
jobs=${HAWSER_TEST_JOBS:-2}
bash scripts/build.sh release
echo "== ctest (Release) =="
ctest --test-dir build -j "$jobs" --output-on-failure --timeout 300
bash scripts/build.sh asan
echo "== ctest (ASan + UBSan) =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 600
if [ -d python ] && ls python/tests/test_*.py >/dev/null 2>&1; then
  echo "== pytest =="
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
fi
echo "all tests passed in $(( $(date +%s) - start )) s"
