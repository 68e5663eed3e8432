#!/usr/bin/env bash
# shm's two mechanisms against memcpy on this machine, in one run: shared
# mappings (the target's memory from allocateHostMemory, mapped once, copied
# with memcpy) and cross-memory attach (the target's memory private:
# process_vm_readv/writev), each against the memcpy baseline of the same
# block size, working set and thread count (bench/memcpy_rate.cpp, built
# here with c++ -O2: THREADS threads, each copying BATCH blocks between its
# own slots and the same slots of a region as large as the target range
# hawser bench cycles through, in the op's direction; the slots on
# transparent huge pages as hawser bench's local buffers are, the target
# region a memfd mapped shared as allocateHostMemory's is).
#
# Working sets (per side, all threads together): "warm" fits the CPU caches,
# "cold" does not (both sides cycle through it, round after round); at most
# 64 blocks a thread (column ws: the working set each run had).
# Threads: hawser bench --threads N with shm.threads N (one and several
# copying threads), against memcpy with N threads. Rounds interleave memcpy,
# shared and cma, so a busy machine's load hits them alike; the medians and
# each mechanism's ratio to the memcpy median are printed, and (columns
# ":r") the median of each round's ratio to that round's memcpy, which a
# host whose speed drifts between rounds moves less: the aims are judged on
# these. Checks that shm alone carried the data, with the mechanism
# expected (counters).
#
# Every round starts both hawser serve afresh, as memcpy_rate maps a fresh
# target every round: on the edge of a core's L2, where the physical pages
# of the target fall (their cache sets) moves a run by up to a fifth (64K x 8
# one-thread writes on the 2-core VM: 48 against 60 GB/s), and with one
# serve for all rounds a run's shm rounds would all be lucky or all unlucky
# together. Each serve exposes the largest working set (at least 16 MiB).
#
# Usage: bench/shm_mechanisms.sh            (from the repository root)
# Environment (all optional):
#   HAWSER    path of the hawser binary (default: build/bin/hawser, then build-*/bin/hawser)
#   CXX       compiler for the baseline (default c++)
#   PORT      first of two ports for the two hawser serve (default 17830)
#   BLOCKS    block sizes (default "64K 1M 16M")
#   SETS      working sets, NAME:BYTES per side (default "warm:4M cold:256M")
#   THREADS   thread counts (default "1 2")
#   OPS       (default "read write")
#   CMA       0: shared mappings only (the cma columns print 0; its serve is not started)
#   SAME_PAGES 1: each round also runs memcpy_rate on the shared serve's own
#             memory (its memfd through /proc/PID/fd): the very pages hawser
#             copies to or from, so that their placement is the same for both;
#             printed after the row as "same-pages" with the median of each
#             round's shared / same-pages ratio
#   DURATION  seconds per run (default 2)
#   REPEAT    rounds (default 3)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
CXX=${CXX:-c++}
PORT=${PORT:-17830}
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
BLOCKS=${BLOCKS:-"64K 1M 16M"}
SETS=${SETS:-"warm:4M cold:256M"}
THREADS=${THREADS:-"1 2"}
OPS=${OPS:-"read write"}
DURATION=${DURATION:-2}
REPEAT=${REPEAT:-3}
CMA=${CMA:-1}
SAME_PAGES=${SAME_PAGES:-0}

work=$(mktemp -d /tmp/hawser-shm-mech-XXXXXX)
pids=()
stop_serves() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_serves
  rm -rf "$work"
}
trap cleanup EXIT
"$CXX" -O2 -std=c++17 -pthread -I"$here/src" -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp" "$here/src/base/huge_pages.cpp"

MEMORY=$((16 << 20))
for set in $SETS; do
  b=$(size_bytes "${set#*:}")
  (( b > MEMORY )) && MEMORY=$b
done

start_serve() {  # PORT KIND
  "$HAWSER" serve --listen "127.0.0.1:$1" --memory "$MEMORY" --host-memory "$2" >"$work/serve-$2.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do grep -q '^ready' "$work/serve-$2.log" 2>/dev/null && return 0; sleep 0.05; done
  echo "hawser serve ($2) did not become ready" >&2; cat "$work/serve-$2.log" >&2; exit 1
}
# Both serves, new (their memory placed anew).
restart_serves() {
  stop_serves
  start_serve "$PORT" shared
  [[ $CMA == 1 ]] && start_serve "$((PORT + 1))" private
  return 0
}

# GB/s of one run; fails unless verified, carried by shm, by the mechanism expected.
run_bench() {  # PORT OP BLOCK BATCH THREADS MECH
  HAWSER_SHM_THREADS=$5 "$HAWSER" bench --target "127.0.0.1:$1" --op "$2" --block-size "$3" --batch-size "$4" \
    --threads "$5" --seconds "$DURATION" --json >"$work/bench.out" 2>"$work/bench.err" || {
    echo "hawser bench $*: failed" >&2; cat "$work/bench.err" >&2; exit 1; }
  read -r g mapped calls < <(python3 "$here/bench/bench_result.py" "$work/bench.out" shm gbps \
    stats.shm.mapped_slices:0 stats.shm.copy_calls:0)
  if [[ $6 == shared && ( $mapped == 0 || $calls != 0 ) ]] || [[ $6 == cma && ( $mapped != 0 || $calls == 0 ) ]]; then
    echo "hawser bench $*: not carried by $6 (mapped_slices $mapped, copy_calls $calls)" >&2; exit 1
  fi
  echo "$g"
}

echo "hawser: $HAWSER"
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "case: two hawser serve --memory $MEMORY (shared / private host memory, started anew every round);" \
     "bench --seconds $DURATION; median of $REPEAT interleaved rounds; GB/s = 10^9 bytes/s"
echo
printf '%-5s %-5s %6s %-7s %3s %5s %9s %9s %9s %7s %7s %7s %7s\n' block set ws op thr batch memcpy shared cma "sh/mc" \
  "cma/mc" "sh/mc:r" "cma/mc:r"
for block in $BLOCKS; do
  b=$(size_bytes "$block")
  for set in $SETS; do
    sname=${set%%:*}; sbytes=$(size_bytes "${set#*:}")
    for t in $THREADS; do
      batch=$(( sbytes / t / b ))
      (( batch >= 1 )) || continue   # a working set smaller than one block per thread
      (( batch > 64 )) && batch=64   # then the working set is smaller than asked: column ws says what it was
      source=$(( batch * t * b ))
      for op in $OPS; do
        mc=(); sh=(); cm=(); sp=()
        mode=local-thp; [[ $op == write ]] && mode=local-thp-write
        for _ in $(seq "$REPEAT"); do
          restart_serves
          mc+=("$("$work/memcpy_rate" "$b" "$batch" "$t" "$DURATION" "$source" "$mode")")
          if [[ $SAME_PAGES == 1 ]]; then
            target=$(memfd_of "${pids[0]}" hawser-host-)  # the shared serve's memory
            sp+=("$("$work/memcpy_rate" "$b" "$batch" "$t" "$DURATION" "$source" "$mode" "$target")")
          fi
          sh+=("$(run_bench "$PORT" "$op" "$block" "$batch" "$t" shared)")
          if [[ $CMA == 1 ]]; then cm+=("$(run_bench "$((PORT + 1))" "$op" "$block" "$batch" "$t" cma)"); else cm+=(0); fi
        done
        read -r m s c rs rc ps pc < <(python3 - "${mc[*]}" "${sh[*]}" "${cm[*]}" <<'PY'
import statistics, sys
mc, sh, cm = ([float(x) for x in a.split()] for a in sys.argv[1:4])
med = statistics.median
print("%.2f %.2f %.2f %.2f %.2f %.2f %.2f" % (med(mc), med(sh), med(cm), med(sh) / med(mc), med(cm) / med(mc),
      med(s / m for s, m in zip(sh, mc)), med(c / m for c, m in zip(cm, mc))))
PY
        )
        printf '%-5s %-5s %6s %-7s %3s %5s %9s %9s %9s %7s %7s %7s %7s   | memcpy %s shared %s cma %s\n' "$block" \
          "$sname" "$((source >> 20))M" "$op" "$t" "$batch" "$m" "$s" "$c" "$rs" "$rc" "$ps" "$pc" \
          "${mc[*]}" "${sh[*]}" "${cm[*]}"
        if [[ $SAME_PAGES == 1 ]]; then
          python3 - "${sp[*]}" "${sh[*]}" <<'PY'
import statistics, sys
sp, sh = ([float(x) for x in a.split()] for a in sys.argv[1:3])
print("      same-pages memcpy %.2f GB/s (median), sh/same:r %.2f | same-pages %s" % (
    statistics.median(sp), statistics.median(s / m for s, m in zip(sh, sp)), " ".join("%.3f" % x for x in sp)))
PY
        fi
      done
    done
  done
done
