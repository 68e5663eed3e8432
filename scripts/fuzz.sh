#!/usr/bin/env bash
# Fuzzes every libFuzzer target of an address build (default build-asan/fuzz)
# for a bounded time each, on its seed corpus (tests/fuzz/corpus/<name>/)
# plus the new inputs it finds (kept in a scratch folder, not the repo).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (20)] [BUILD_DIR (build-asan)]
# Env: HAWSER_FUZZ_JOBS targets at once (default 2); HAWSER_FUZZ_OUT folder
# for logs and crash inputs (default: a temporary folder, kept on a crash).
# Prints one line per target: executions, corpus size, crash or not.
# A crash fails the run: fix its cause, then add the input printed here to
# tests/fuzz/corpus/<name>/ as crash-<what> (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
build=${2:-build-asan}
jobs=${HAWSER_FUZZ_JOBS:-2}
out=${HAWSER_FUZZ_OUT:-$(mktemp -d /tmp/hawser-fuzz.XXXXXX)}
mkdir -p "$out"
shopt -s nullglob
targets=("$build"/fuzz/*_fuzz)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no targets in $build/fuzz (an address build with clang: scripts/build.sh asan)" >&2
  exit 1
fi

fuzz_one() {
  local bin=$1 secs=$2 out=$3
  local target name
  target=$(basename "$bin")
  name=${target%_fuzz}
  mkdir -p "$out/$name/new" "$out/$name/crashes"
  # -timeout: one input running longer is a hang (a finding too).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$name/crashes/" "$out/$name/new" "tests/fuzz/corpus/$name" \
    >"$out/$name/log" 2>&1
  local rc=$?
  local execs units
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$name/log" | grep -o '[0-9]*$' || true)
  units=$(find "$out/$name/new" "tests/fuzz/corpus/$name" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    printf 'fuzz %-16s %9s execs in %s s, corpus %s inputs, no crash\n' "$name" "${execs:-?}" "$secs" "$units"
  else
    printf 'fuzz %-16s %9s execs, CRASH (exit %d): %s\n' "$name" "${execs:-?}" "$rc" "$(ls "$out/$name/crashes"/* 2>/dev/null | head -1)"
    grep -m 20 -E 'ERROR|FUZZ_CHECK|runtime error|SUMMARY|terminate' "$out/$name/log" | sed 's/^/    /'
    return 1
  fi
}
export -f fuzz_one

set +e
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'fuzz_one "$@"' _ {} "$secs" "$out"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "fuzz: a target crashed; logs and inputs in $out"
  exit 1
fi
[ -n "${HAWSER_FUZZ_OUT:-}" ] || rm -rf "$out"
