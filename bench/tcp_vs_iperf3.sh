#!/usr/bin/env bash
# hawser's tcp transport against parallel iperf3 on loopback, in one run.
#
# The limit: as many iperf3 processes as the bench has threads, one stream
# each, run at once and summed (iperf3 3.12 drives all -P streams from one
# thread, so one process with -P 2 is capped by one core). Each iperf3 client
# writes in blocks of the bench's block size (-l; iperf3 takes at most 1 MiB,
# so 4M runs it at -l 1M). Starts `hawser serve` and
# THREADS `iperf3 -s` servers in the background, then for every block size
# runs, REPEAT times in turn, the iperf3 clients, `hawser bench` read and
# `hawser bench` write (HAWSER_TRANSPORT=tcp: loopback would otherwise take
# shm). Prints every round's figures and ratio, then the medians. CPU time
# is counted on both sides: iperf3 clients + servers over the run; hawser
# bench + serve over the bench's timed run (not its set-up and check).
# "cores" is CPU seconds per second, "cpu/GB" CPU seconds per 10^9 bytes.
#
# A second baseline says where a gap comes from: bench/socket_loop.cpp
# (built here with c++ -O2), THREADS sender/receiver pairs of plain blocking
# send()/recv() over loopback, each cycling through DEPTH x BATCH blocks per side:
# the bench's memory footprint, where iperf3 reuses one buffer that stays in
# the CPU caches. Its sockets get the buffer sizes hawser gives its data
# sockets (`hawser config tcp.sock_buf tcp.loopback_send_buf`: by default
# a 256 KiB send buffer over loopback). hawser/loop is hawser's own cost;
# loop/iperf3 is what the working set costs the kernel's copies.
#
# The working set, both ways (SETS): "all" runs the bench as it is, every
# request in flight with a block of its own (THREADS x DEPTH x BATCH blocks
# per side); "one" runs it with --span BLOCK, every request of a thread on
# one block per side: the memory iperf3 moves (one -l buffer per process)
# and the loop's too (its span cut to one block). Rows read/all, write/all,
# read/one, write/one.
#
# Usage: bench/tcp_vs_iperf3.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary   (default: build/bin/hawser, then build-*/bin/hawser)
#   PORT          hawser serve port            (default 17800; iperf3 uses PORT+1 ...)
#   MEMORY        memory the target exposes    (default 1G)
#   BLOCKS        block sizes                  (default "64K 1M 4M")
#   BATCH         requests per batch           (default 32)
#   DEPTH         batches in flight per bench thread (default 2: a thread
#                 submits its next batch while one is still moving, so the
#                 connections never drain between batches, as iperf3's
#                 stream never does; 1 = one batch after another)
#   THREADS       bench threads = iperf3 processes (default 2)
#   DURATION      seconds per run              (default 3)
#   REPEAT        rounds per block size        (default 3)
#   SETS          working sets, "all" and/or "one" (default "all one")
#   CXX           compiler for the loop        (default c++)
#   Every HAWSER_* variable (HAWSER_TCP_CONNECTIONS, HAWSER_TCP_IO_THREADS, ...)
#   reaches both engines.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v iperf3 >/dev/null || { echo "iperf3 is not installed (apt-get install iperf3)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }

PORT=${PORT:-17800}
MEMORY=${MEMORY:-1G}
BLOCKS=${BLOCKS:-"64K 1M 4M"}
BATCH=${BATCH:-32}
DEPTH=${DEPTH:-2}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
SETS=${SETS:-"all one"}
for set in $SETS; do
  case $set in all|one) ;; *) echo "SETS: '$set' is neither all nor one" >&2; exit 2;; esac
done
export HAWSER_TRANSPORT=tcp

bench_work tcp-bench
"${CXX:-c++}" -O2 -std=c++17 -pthread -o "$work/socket_loop" "$here/bench/socket_loop.cpp"

start_serve "$PORT" "$MEMORY" "$work/serve.log"
pids+=("$serve_pid")
iperf_pids=()
for i in $(seq "$THREADS"); do
  iperf3 -s -p $((PORT + i)) >"$work/iperf_s$i.log" 2>&1 &
  iperf_pids+=($!)
  pids+=($!)
done
sleep 0.3
iperf_watch=$(IFS=,; echo "${iperf_pids[*]}")

# iperf3's -l for a block size: the block, at most 1M (iperf3's maximum).
iperf_len() {
  local b
  b=$(size_bytes "$1")
  echo $((b < 1048576 ? b : 1048576))
}

# The effective value of a hawser knob (environment, else default).
knob() {
  "$HAWSER" config "$1" | sed -n "s/^$1 = '\(.*\)'.*/\1/p"
}
# The loop's SO_SNDBUF and SO_RCVBUF: what hawser gives a loopback data socket.
sock_buf=$(size_bytes "$(knob tcp.sock_buf)")
if [ "$sock_buf" -gt 0 ]; then
  loop_bufs="$sock_buf $sock_buf"
else
  loop_bufs="$(size_bytes "$(knob tcp.loopback_send_buf)") 0"
fi

# One loop round (bench/socket_loop.cpp): THREADS pairs, DEPTH x BATCH
# blocks per side each (set "all") or one ("one"). Prints "GB/s cores
# cpu_per_GB".
run_loop() {
  local b span
  b=$(size_bytes "$1")
  span=$((b * BATCH * DEPTH))
  [ "$2" = one ] && span=$b
  # shellcheck disable=SC2086
  "$work/socket_loop" "$b" "$span" "$THREADS" "$DURATION" $loop_bufs |
    awk '{ printf "%.3f %.2f %.3f\n", $1, $2, $2 / $1 }'
}

# One iperf3 round: THREADS clients at once, one stream each. Prints
# "GB/s cores cpu_per_GB".
run_iperf() {
  local block=$1 cmds=() i len
  len=$(iperf_len "$block")
  for i in $(seq "$THREADS"); do
    cmds+=("iperf3 -c 127.0.0.1 -p $((PORT + i)) -t $DURATION -l $len -J")
  done
  python3 "$here/bench/run_timed.py" --watch "$iperf_watch" --out "$work/iperf" -- "${cmds[@]}" >"$work/iperf.cpu"
  python3 - "$work/iperf" "$THREADS" "$work/iperf.cpu" <<'EOF'
import json, sys
prefix, n, cpu = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
gbps = 0.0
for i in range(n):
    try:
        d = json.load(open(f"{prefix}.{i}"))
        gbps += d["end"]["sum_received"]["bytes"] / d["end"]["sum_received"]["seconds"] / 1e9
    except Exception as e:
        sys.exit(f"iperf3 client {i} failed: {e}: {open(prefix + '.' + str(i) + '.err').read()}")
total = cpu["cpu_s"] + cpu["watched_cpu_s"]
wall = cpu["wall_s"]
print("%.3f %.2f %.3f" % (gbps, total / wall, total / (gbps * wall)))
EOF
}

# One hawser bench run. Prints "GB/s cores cpu_per_GB p50_us p99_us"; CPU
# over the timed run only (the bench's own and, --cpu-pid, the target's).
run_bench() {
  local op=$1 block=$2 span=()
  [ "$3" = one ] && span=(--span "$block")
  "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$op" --block-size "$block" --batch-size "$BATCH" --depth "$DEPTH" \
    --threads "$THREADS" --seconds "$DURATION" "${span[@]}" --cpu-pid "$serve_pid" --json >"$work/bench.out" \
    2>"$work/bench.err" || {
    echo "hawser bench $op $block ${span[*]} failed:" >&2; cat "$work/bench.err" >&2; tail -1 "$work/bench.out" >&2
    exit 1; }
  python3 "$here/bench/bench_result.py" "$work/bench.out" tcp gbps cores:2 cpu_per_gb p50_us:0 p99_us:0
}

echo "hawser: $HAWSER"
host_line
echo "iperf3 $(iperf3 --version | head -1 | awk '{print $2}'): $THREADS processes x 1 stream, -l BLOCK -t $DURATION" \
     "| hawser serve --memory $MEMORY, bench --batch-size $BATCH --depth $DEPTH --threads $THREADS --seconds $DURATION (tcp)" \
     "| loop: $THREADS socket_loop pairs x $((DEPTH * BATCH)) blocks per side, SO_SNDBUF SO_RCVBUF: $loop_bufs (0: autotuned)"
echo "memory each side touches: set all: hawser and loop THREADS x DEPTH x BATCH blocks (64K: $((THREADS * DEPTH * BATCH / 16)) MiB," \
     "1M: $((THREADS * DEPTH * BATCH)) MiB); set one: THREADS blocks (bench --span BLOCK); iperf3 one -l buffer per process"
env | grep '^HAWSER_' | grep -v '^HAWSER=' | sed 's/^/env: /' || true
echo
printf '%-5s %-6s %-9s %9s %9s %9s %7s %7s   %-22s %-22s\n' round block op/set hawser iperf3 loop "h/i" "h/loop" \
  "cores hawser/iperf3" "cpu/GB hawser/iperf3/loop"
rows=()
for block in $BLOCKS; do
  for r in $(seq "$REPEAT"); do
    read -r ig icores icpu < <(run_iperf "$block")
    for set in $SETS; do
      read -r lg lcores lcpu < <(run_loop "$block" "$set")
      for op in read write; do
        read -r g cores cpu p50 p99 < <(run_bench "$op" "$block" "$set")
        ratio=$(python3 -c "print('%.3f' % ($g / $ig))")
        lratio=$(python3 -c "print('%.3f' % ($g / $lg))")
        printf '%-5s %-6s %-9s %9s %9s %9s %7s %7s   %-22s %-22s\n' "$r" "$block" "$op/$set" "$g" "$ig" "$lg" "$ratio" \
          "$lratio" "$cores / $icores" "$cpu / $icpu / $lcpu"
        rows+=("$block $op/$set $g $ig $ratio $cores $icores $cpu $icpu $p50 $p99 $lg $lratio $lcpu")
      done
    done
  done
done
echo
PYTHONPATH="$here/bench" python3 - "${rows[@]}" <<'EOF'
import sys
from row_medians import groups
print("medians of the rounds (GB/s = 10^9 bytes/s; ratio = median of the per-round ratios):")
print(f"{'block':<6} {'op/set':<9} {'hawser':>8} {'iperf3':>8} {'ratio':>6} {'cores h/i':>11} {'cpu/GB h/i':>13} {'cpu ratio':>9}"
      f" {'p50/p99 ms':>12} {'loop':>7} {'h/loop':>6} {'cpu/GB loop':>11}")
for (block, op), m in groups(sys.argv[1:]):
    print(f"{block:<6} {op:<9} {m(2):8.3f} {m(3):8.3f} {m(4):6.2f} {m(5):5.2f}/{m(6):<5.2f} {m(7):6.3f}/{m(8):<6.3f}"
          f" {m(7) / m(8):9.2f} {m(9) / 1000:5.1f}/{m(10) / 1000:<6.1f} {m(11):7.3f} {m(12):6.2f} {m(13):11.3f}")
EOF
