#!/usr/bin/env bash
# hawser shm transport vs memcpy on this machine, in one run.
#
# Starts `hawser serve` in the background (a second process of this host, so
# the engine picks shm), then for every block size runs, REPEAT times in
# turn, the memcpy baseline (bench/memcpy_rate.cpp, built here with c++ -O2:
# the same slots, block size and source region as `hawser bench`, copied by
# as many threads as the shm transport copies with) and `hawser bench` read
# and write; prints the median GB/s (10^9 bytes/s) of each and the ratio to
# the memcpy median measured in the same rounds (interleaving makes a busy
# machine's load hit both alike). Checks that shm carried the data.
#
# Usage: bench/shm_vs_memcpy.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary   (default: build/bin/hawser, then build-*/bin/hawser)
#   CXX           compiler for the baseline   (default c++)
#   PORT          hawser serve port            (default 17810)
#   MEMORY        memory the target exposes    (default 1G)
#   BLOCKS        block sizes                  (default "64K 1M 64M")
#   BATCH         requests per batch, at most  (default 32; fewer so that a thread's slots fit LOCAL)
#   LOCAL         bytes of local slots, all threads together (default 64M; at least one block per thread)
#   THREADS       bench threads                (default 2)
#   DURATION      seconds per run              (default 3)
#   REPEAT        rounds per block size        (default 3)
#   HAWSER_SHM_THREADS  copy threads (default 0: min(4, CPUs)); the baseline uses as many.
#                 every HAWSER_SHM_* tunable reaches both engines.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
CXX=${CXX:-c++}
command -v "$CXX" >/dev/null || { echo "no C++ compiler ($CXX) for the memcpy baseline" >&2; exit 2; }

PORT=${PORT:-17810}
MEMORY=${MEMORY:-1G}
BLOCKS=${BLOCKS:-"64K 1M 64M"}
BATCH=${BATCH:-32}
LOCAL=${LOCAL:-64M}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
COPY_THREADS=${HAWSER_SHM_THREADS:-0}
if [[ "$COPY_THREADS" == 0 ]]; then COPY_THREADS=$(( $(nproc) < 4 ? $(nproc) : 4 )); fi

work=$(mktemp -d /tmp/hawser-shm-bench-XXXXXX)
serve_pid=""
cleanup() {
  [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n "$serve_pid" ]] && wait "$serve_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$CXX" -O2 -std=c++17 -pthread -I"$here/src" -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp" "$here/src/base/huge_pages.cpp"

"$HAWSER" serve --listen "127.0.0.1:$PORT" --memory "$MEMORY" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do
  grep -q '^ready' "$work/serve.log" 2>/dev/null && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
grep -q '^ready' "$work/serve.log" || { echo "hawser serve did not become ready" >&2; cat "$work/serve.log" >&2; exit 1; }
memory_bytes=$(size_bytes "$MEMORY")

# GB/s of one hawser bench case (its JSON summary is the last line); fails
# unless the data was verified and shm alone carried it.
run_bench() {
  local op=$1 block=$2 batch=$3
  "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$op" --block-size "$block" --batch-size "$batch" \
    --threads "$THREADS" --seconds "$DURATION" --json >"$work/bench.out" 2>"$work/bench.err" || {
    echo "hawser bench $op $block failed:" >&2; cat "$work/bench.err" >&2; tail -1 "$work/bench.out" >&2; exit 1; }
  python3 "$here/bench/bench_result.py" "$work/bench.out" shm gbps p50_us:0 p99_us:0
}

median() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "hawser: $HAWSER"
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "case: two processes, serve --memory $MEMORY, bench --threads $THREADS --seconds $DURATION," \
     "batch min($BATCH, $LOCAL / threads / block); memcpy baseline with $COPY_THREADS thread(s)" \
     "(= shm copy threads); median of $REPEAT interleaved rounds"
env | grep '^HAWSER_SHM_' | sed 's/^/env: /' || true
echo
printf '%-6s %-6s %5s %10s %10s %8s %9s %9s   %s\n' block op batch hawser memcpy ratio p50_us p99_us "runs (GB/s)"
local_bytes=$(size_bytes "$LOCAL")
for block in $BLOCKS; do
  b=$(size_bytes "$block")
  batch=$(( local_bytes / THREADS / b ))
  (( batch > BATCH )) && batch=$BATCH
  (( batch < 1 )) && batch=1
  mc=(); rd=(); wr=(); rdl=(); wrl=()
  for _ in $(seq "$REPEAT"); do
    mc+=("$("$work/memcpy_rate" "$b" "$batch" "$COPY_THREADS" "$DURATION" "$memory_bytes")")
    read -r g p50 p99 < <(run_bench read "$block" "$batch"); rd+=("$g"); rdl+=("$p50 $p99")
    read -r g p50 p99 < <(run_bench write "$block" "$batch"); wr+=("$g"); wrl+=("$p50 $p99")
  done
  base=$(median "${mc[@]}")
  for op in read write; do
    if [[ $op == read ]]; then runs=("${rd[@]}"); lat=("${rdl[@]}"); else runs=("${wr[@]}"); lat=("${wrl[@]}"); fi
    g=$(median "${runs[@]}")
    p50=$(median $(for l in "${lat[@]}"; do echo "${l% *}"; done))
    p99=$(median $(for l in "${lat[@]}"; do echo "${l#* }"; done))
    ratio=$(python3 -c "print('%.2f' % ($g / $base))")
    printf '%-6s %-6s %5s %10s %10s %8s %9.0f %9.0f   %s | memcpy %s\n' "$block" "$op" "$batch" "$g" "$base" "$ratio" \
      "$p50" "$p99" "${runs[*]}" "${mc[*]}"
  done
done
echo
echo "GB/s = 10^9 bytes/s. ratio = hawser (shm) median / memcpy median of the same rounds."
