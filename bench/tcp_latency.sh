#!/usr/bin/env bash
# One small transfer's round trip through hawser's tcp transport against a
# socket ping-pong (`sockperf ping-pong --tcp`, full round trip) on loopback,
# in one run.
#
# The limit: sockperf's TCP ping-pong sends SIZE bytes and waits for SIZE
# bytes back, one message at a time, on one connection. hawser: `hawser
# bench --batch-size 1 --threads 1`, each batch one READ or WRITE of SIZE
# bytes through transferSync (allocate, submit, wait, free), data verified;
# its p50/p99 are those of the whole call. For every size, REPEAT rounds run
# sockperf, hawser read and hawser write in turn; prints every round's
# p50/p99 and ratio (hawser / sockperf), then the medians, and the CPU time
# of both sides (client + server process; "cores" = CPU seconds per second).
# Then the operations per second of 4 KiB transfers at batch 1, 8 and 32
# (one thread, OPS_BATCHES).
#
# sockperf takes at most 65507 bytes per message: its "64K" runs at 65507.
#
# Usage: bench/tcp_latency.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary (default: build/bin/hawser, then build-*/bin/hawser)
#   PORT          hawser serve port (default 17830; sockperf uses PORT+1)
#   SIZES         transfer sizes (default "64 4K 64K")
#   DURATION      seconds per run (default 3)
#   REPEAT        rounds per size (default 3)
#   OPS_BATCHES   batch sizes of the 4 KiB operations-per-second runs (default "1 8 32"; "" skips them)
#   Every HAWSER_* variable reaches both engines.
# Needs sockperf (Debian: apt-get install sockperf); installs it when run as
# root and it is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
if ! command -v sockperf >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "sockperf is missing: installing Debian's sockperf (apt-get install sockperf)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sockperf >/dev/null; }
  fi
  command -v sockperf >/dev/null || { echo "sockperf is not installed (apt-get install sockperf)" >&2; exit 2; }
fi
command -v python3 >/dev/null || { echo "python3 is needed to read the results" >&2; exit 2; }

PORT=${PORT:-17830}
SPORT=$((PORT + 1))
SIZES=${SIZES:-"64 4K 64K"}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
OPS_BATCHES=${OPS_BATCHES-"1 8 32"}
export HAWSER_TRANSPORT=tcp

bench_work lat-bench

start_serve "$PORT" 256M "$work/serve.log"
pids+=("$serve_pid")
sockperf server --tcp -i 127.0.0.1 -p "$SPORT" >"$work/sockperf_s.log" 2>&1 &
sock_pid=$!
pids+=("$sock_pid")
sleep 0.3

# One sockperf ping-pong. Prints "p50_us p99_us round_trips_per_s cores".
run_sockperf() {
  local m
  m=$(size_bytes "$1")
  ((m > 65507)) && m=65507
  python3 "$here/bench/run_timed.py" --watch "$sock_pid" --out "$work/sp" -- \
    "sockperf ping-pong --tcp -i 127.0.0.1 -p $SPORT -m $m -t $DURATION --full-rtt" >"$work/sp.cpu"
  python3 - "$work/sp.0" "$work/sp.cpu" <<'EOF'
import json, re, sys
out, cpu = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
def pick(pat):
    m = re.search(pat, out)
    if not m: sys.exit("sockperf: no '%s' in its output:\n%s" % (pat, out))
    return float(m.group(1))
p50 = pick(r"percentile 50\.000 =\s*([\d.]+)")
p99 = pick(r"percentile 99\.000 =\s*([\d.]+)")
n = pick(r"Total (\d+) observations")
secs = pick(r"RunTime=([\d.]+) sec")
warm = pick(r"Warm up time=(\d+) msec") / 1000.0
print("%.1f %.1f %.0f %.2f" % (p50, p99, n / max(secs - warm, 1e-9), (cpu["cpu_s"] + cpu["watched_cpu_s"]) / cpu["wall_s"]))
EOF
}

# One hawser bench run. Prints "p50_us p99_us ops_per_s cores".
run_bench() {
  local op=$1 size=$2 batch=${3:-1}
  "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$op" --block-size "$size" --batch-size "$batch" --threads 1 \
    --seconds "$DURATION" --cpu-pid "$serve_pid" --json >"$work/bench.out" 2>"$work/bench.err" || {
    echo "hawser bench $op $size failed:" >&2; cat "$work/bench.err" >&2; tail -1 "$work/bench.out" >&2; exit 1; }
  python3 "$here/bench/bench_result.py" "$work/bench.out" tcp p50_us:1 p99_us:1 ops_per_s:0 cores:2
}

echo "hawser: $HAWSER"
host_line
echo "sockperf $(sockperf --version 2>&1 | grep -o 'version [0-9.]*' | head -1 | cut -d' ' -f2): ping-pong --tcp -m SIZE" \
     "-t $DURATION --full-rtt | hawser bench --batch-size 1 --threads 1 --seconds $DURATION (tcp)"
env | grep '^HAWSER_' | grep -v '^HAWSER=' | sed 's/^/env: /' || true
echo
printf '%-5s %-5s %-5s %21s %21s %13s   %s\n' round size op "hawser p50/p99 us" "sockperf p50/p99 us" "ratio p50/p99" "cores hawser/sockperf"
rows=()
for size in $SIZES; do
  for r in $(seq "$REPEAT"); do
    read -r s50 s99 sops scores < <(run_sockperf "$size")
    for op in read write; do
      read -r h50 h99 hops hcores < <(run_bench "$op" "$size")
      read -r q50 q99 < <(python3 -c "print('%.2f %.2f' % ($h50 / $s50, $h99 / $s99))")
      printf '%-5s %-5s %-5s %21s %21s %13s   %s\n' "$r" "$size" "$op" "$h50 / $h99" "$s50 / $s99" "$q50 / $q99" \
        "$hcores / $scores"
      rows+=("$size $op $h50 $h99 $s50 $s99 $q50 $q99 $hcores $scores $hops $sops")
    done
  done
done
echo
PYTHONPATH="$here/bench" python3 - "${rows[@]}" <<'EOF'
import sys
from row_medians import groups
print("medians of the rounds (ratio = median of the per-round ratios; aim: p50 <= 1.5, p99 <= 2):")
print(f"{'size':<5} {'op':<5} {'hawser p50/p99 us':>18} {'sockperf p50/p99':>17} {'ratio p50/p99':>14} "
      f"{'cores h/s':>10} {'ops/s h/s':>16}")
for (size, op), m in groups(sys.argv[1:]):
    print(f"{size:<5} {op:<5} {m(2):8.1f}/{m(3):<9.1f} {m(4):7.1f}/{m(5):<9.1f} {m(6):6.2f}/{m(7):<7.2f} "
          f"{m(8):4.2f}/{m(9):<5.2f} {m(10):7.0f}/{m(11):<8.0f}")
EOF
if [[ -n "$OPS_BATCHES" ]]; then
  echo
  echo "4 KiB transfers, one thread, operations per second (median of $REPEAT runs each):"
  for batch in $OPS_BATCHES; do
    for op in read write; do
      ops=()
      for _ in $(seq "$REPEAT"); do
        read -r h50 h99 hops hcores < <(run_bench "$op" 4K "$batch")
        ops+=("$hops")
      done
      python3 -c "import statistics,sys; print('batch %-3s %-5s %8.0f ops/s   runs %s' % (sys.argv[1], sys.argv[2], statistics.median(float(x) for x in sys.argv[3:]), ' '.join(sys.argv[3:])))" \
        "$batch" "$op" "${ops[@]}"
    done
  done
fi
