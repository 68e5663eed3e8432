#!/usr/bin/env bash
# What memcpy loses where its data fills a core's L2 when something else is
# touched beside it: bench/memcpy_rate.cpp (reads, 64 KiB blocks, THREADS
# threads, the target on huge pages) with MEMCPY_RATE_TOUCH=N, N cache lines
# of the thread's own touched after each block (the same lines every round),
# the stand-in for what an engine touches a request besides the bytes (its
# task and slice, counters: written or read; its code: executed). Working
# sets of half, once and twice the L2 a thread and side (SETS); rounds
# interleave every case. Prints each case's median GB/s, its ratio to N=0's
# in the same set, and the median of its per-round ratios to N=0 (":r").
#
# Usage: bench/l2_edge.sh                  (from the repository root)
# Environment (all optional):
#   L2        bytes of L2 a core (default: /sys's index2 size of cpu0, else 2M)
#   THREADS   threads (default 4)
#   TOUCH     the N to try (default "0 2 4 8 16 32"); an item w:W,r:R,x:X is one
#             case touching W, R and X lines of each kind (kind "mix")
#   KINDS     how the lines are touched (MEMCPY_RATE_TOUCH_KIND): w written,
#             r read, x executed (default "w")
#   SETS      working sets (default "half once twice")
#   ENGINE    1: each round also runs hawser bench on each set (shm shared
#             mappings into one hawser serve's allocateHostMemory, reads, the
#             same blocks, batch and threads, depth 1), kind "shm": the engine
#             in the same rounds as memcpy with the lines of its footprint
#             (bench/cache_footprint.sh counts them)
#   HAWSER    the hawser binary for ENGINE=1 (default: build/bin/hawser, then build-*/bin/hawser)
#   BASE_HAWSER  with ENGINE=1: another build's hawser, run in the same rounds too (row "shm base"),
#             against the same serve
#   PORT      the hawser serve's port for ENGINE=1 (default 17860)
#   ROUNDS    interleaved rounds (default 3)
#   DURATION  seconds a run (default 1)
#   CXX       compiler (default c++)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
CXX=${CXX:-c++}
l2_sys=$(cat /sys/devices/system/cpu/cpu0/cache/index2/size 2>/dev/null || true)
L2=${L2:-${l2_sys:-2M}}
THREADS=${THREADS:-4}
TOUCH=${TOUCH:-"0 2 4 8 16 32"}
KINDS=${KINDS:-w}
SETS=${SETS:-"half once twice"}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-1}
l2=$(size_bytes "$L2")
block=65536
ENGINE=${ENGINE:-0}
PORT=${PORT:-17860}
bench_work l2-edge
if [[ $ENGINE == 1 ]]; then
  find_hawser
  need_python3
  start_serve "$PORT" 512M "$work/serve.log" --host-memory shared
  pids+=("$serve_pid")
fi
"$CXX" -O2 -std=c++17 -pthread -I"$here/src" -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp" "$here/src/base/huge_pages.cpp"
# A thread copies BATCH blocks from its slots of the target into its own: a
# side of SET bytes, two sides in its L2 at "once".
declare -A blocks=([half]=$(( l2 / 4 / block )) [once]=$(( l2 / 2 / block )) [twice]=$(( l2 / block )))
for _ in $(seq "$ROUNDS"); do
  for s in $SETS; do
    b=${blocks[$s]:?"SETS: half, once or twice, not '$s'"}
    for k in $KINDS; do
      for n in $TOUCH; do
        [[ $n == 0 && $k != "${KINDS%% *}" ]] && continue  # N=0 is the same for every kind
        [[ $n == *:* && $k != "${KINDS%% *}" ]] && continue  # a mix names its kinds
        echo "$s $([[ $n == *:* ]] && echo mix || echo "$k") $n $(MEMCPY_RATE_TOUCH=$n MEMCPY_RATE_TOUCH_KIND=$k \
          "$work/memcpy_rate" $block "$b" "$THREADS" "$DURATION" $(( block * b * THREADS )) local-thp)"
      done
    done
    if [[ $ENGINE == 1 ]]; then
      HAWSER_SHM_THREADS=$THREADS "$HAWSER" bench --target "127.0.0.1:$PORT" --op read --block-size $block \
        --batch-size "$b" --threads "$THREADS" --depth 1 --seconds "$DURATION" --json >"$work/b.out" 2>"$work/b.err" || {
        echo "hawser bench ($s): failed" >&2; cat "$work/b.err" >&2; exit 1; }
      echo "$s shm engine $(python3 "$here/bench/bench_result.py" "$work/b.out" shm gbps)"
      if [[ -n ${BASE_HAWSER:-} ]]; then
        HAWSER_SHM_THREADS=$THREADS "$BASE_HAWSER" bench --target "127.0.0.1:$PORT" --op read --block-size $block \
          --batch-size "$b" --threads "$THREADS" --depth 1 --seconds "$DURATION" --json >"$work/b.out" 2>"$work/b.err" || {
          echo "hawser bench ($s, BASE_HAWSER): failed" >&2; cat "$work/b.err" >&2; exit 1; }
        echo "$s shm base $(python3 "$here/bench/bench_result.py" "$work/b.out" shm gbps)"
      fi
    fi
  done
done >"$work/rounds"
echo "$(host_line); L2 $l2 bytes a core, $THREADS threads, 64 KiB blocks, reads; medians of $ROUNDS interleaved rounds"
python3 - "$work/rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    s, k, n, g = line.split()
    rows.setdefault((s, k, n), []).append(float(g))
# ":r": the median of each round's ratio to that round's N=0 (rounds
# interleave every case, so a host whose speed drifts moves both alike).
print("%-6s %4s %14s %9s %7s %7s %s" % ("set", "kind", "lines", "GB/s", "/ N=0", "/N=0:r", "rounds"))
def order(k, n):
    return (k == "shm", n != "0", 0 if n.isdigit() else 1, int(n) if n.isdigit() else 0, k, n)
for s in ("half", "once", "twice"):
    zero = [v for (s_, k, n), v in rows.items() if s_ == s and n == "0"]
    base = statistics.median(zero[0]) if zero else None
    for (set_, k, n), v in sorted(rows.items(), key=lambda x: (x[0][0], order(x[0][1], x[0][2]))):
        if set_ != s:
            continue
        m = statistics.median(v)
        per = statistics.median(a / b for a, b in zip(v, zero[0])) if zero else None
        print("%-6s %4s %14s %9.2f %7s %7s %s" % (s, k if n != "0" else "-", n, m, "%.2f" % (m / base) if base else "-",
                                                  "%.2f" % per if per else "-", " ".join("%.1f" % x for x in v)))
PY
