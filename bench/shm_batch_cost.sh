#!/usr/bin/env bash
# Where shm's shared-mapping reads lose to memcpy, batch by batch: the
# engine's fixed cost (256 B requests: one request or 16 a batch, one and
# four threads) beside batches of 64 KiB and 1 MiB blocks whose data fits a
# core's L2 or sits on its edge, each against memcpy of the same blocks,
# working set and threads (bench/memcpy_rate.cpp). `hawser bench --depth 1`
# (transferSync): its p50 is one batch's time; memcpy's time for the batch
# is its bytes over the memcpy thread's rate. Rounds interleave every case.
#
# Usage: bench/shm_batch_cost.sh            (from the repository root)
# Environment (all optional):
#   HAWSER    path of the hawser binary (default: build/bin/hawser, then build-*/bin/hawser)
#   CXX       compiler for the baseline (default c++)
#   PORT      hawser serve port (default 17840)
#   ROUNDS    interleaved rounds (default 5)
#   DURATION  seconds a run (default 1)
# Prints each case's median GB/s, the bench's median p50 (us) and, for
# memcpy, its time for one batch of a thread (us).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
need_python3
CXX=${CXX:-c++}
PORT=${PORT:-17840}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-1}

work=$(mktemp -d /tmp/hawser-shm-cost-XXXXXX)
serve=""
cleanup() {
  [[ -n "$serve" ]] && { kill "$serve" 2>/dev/null || true; wait "$serve" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
"$CXX" -O2 -std=c++17 -pthread -I"$here/src" -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp" "$here/src/base/huge_pages.cpp"
"$HAWSER" serve --listen "127.0.0.1:$PORT" --memory 512M --host-memory shared >"$work/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do grep -q '^ready' "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
grep -q '^ready' "$work/serve.log" || { echo "hawser serve did not become ready" >&2; cat "$work/serve.log" >&2; exit 1; }

# Cases: NAME BLOCK BATCH THREADS; memcpy runs for those with a block of 64K or more.
cases=("256x16_t1 256 16 1" "256x1_t4 256 1 4" "256x16_t4 256 16 4" "64Kx4_t4 64K 4 4" "64Kx8_t4 64K 8 4"
       "64Kx16_t4 64K 16 4" "1Mx1_t4 1M 1 4" "1Mx1_t8 1M 1 8")
for r in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    set -- $c
    b=$(size_bytes "$2")
    if (( b >= 65536 )); then
      echo "$1 memcpy $("$work/memcpy_rate" "$b" "$3" "$4" "$DURATION" $((b * $3 * $4)) local-thp)"
    fi
    HAWSER_SHM_THREADS=$4 "$HAWSER" bench --target "127.0.0.1:$PORT" --op read --block-size "$2" --batch-size "$3" \
      --threads "$4" --depth 1 --seconds "$DURATION" --json >"$work/b.out" 2>"$work/b.err" || {
      echo "hawser bench $c: failed" >&2; cat "$work/b.err" >&2; exit 1; }
    echo "$1 shared $(python3 "$here/bench/bench_result.py" "$work/b.out" shm gbps p50_us)"
  done
done >"$work/rounds"
echo "hawser: $HAWSER"
echo "$(host_line); medians of $ROUNDS interleaved rounds"
python3 - "$work/rounds" "${cases[@]}" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, kind, *vals = line.split()
    rows.setdefault((name, kind), []).append([float(v) for v in vals])
def unit(s):
    return int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s)
print("%-10s %9s %9s %6s %9s %11s" % ("case", "memcpy", "shared", "ratio", "p50 us", "memcpy us"))
for c in sys.argv[2:]:
    name, block, batch, threads = c.split()
    sh = rows[(name, "shared")]
    g = statistics.median(v[0] for v in sh)
    p50 = statistics.median(v[1] for v in sh)
    if (name, "memcpy") in rows:
        m = statistics.median(v[0] for v in rows[(name, "memcpy")])
        us = unit(block) * int(batch) / (m / int(threads) * 1e9) * 1e6
        print("%-10s %9.2f %9.2f %6.2f %9.1f %11.1f" % (name, m, g, g / m, p50, us))
    else:
        print("%-10s %9s %9.2f %6s %9.1f %11s" % (name, "", g, "", p50, ""))
PY
