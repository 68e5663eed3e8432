#!/usr/bin/env bash
# hawser tcp transport vs iperf3 on loopback, in one run.
#
# Starts `hawser serve` in the background, then for every block size runs,
# REPEAT times in turn, iperf3 (server + client, -P = the engine's TCP data
# connections) and `hawser bench` read and write; prints the median GB/s
# (10^9 bytes/s) of each and the ratio to the iperf3 median measured in the
# same rounds (interleaving makes a busy machine's load hit both alike).
#
# Usage: bench/tcp_vs_iperf3.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary   (default: build/bin/hawser, then build-*/bin/hawser)
#   PORT          hawser serve port            (default 17800; iperf3 uses PORT+1)
#   MEMORY        memory the target exposes    (default 1G)
#   BLOCKS        block sizes                  (default "64K 1M 4M")
#   BATCH         requests per batch           (default 32)
#   THREADS       bench threads                (default 2)
#   DURATION      seconds per run              (default 3)
#   REPEAT        rounds per block size        (default 3)
#   HAWSER_TCP_CONNECTIONS  data connections per peer (default 2, the engine's default);
#                 every HAWSER_TCP_* tunable reaches both engines.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }

PORT=${PORT:-17800}
IPORT=$((PORT + 1))
MEMORY=${MEMORY:-1G}
BLOCKS=${BLOCKS:-"64K 1M 4M"}
BATCH=${BATCH:-32}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
STREAMS=${HAWSER_TCP_CONNECTIONS:-2}

work=$(mktemp -d /tmp/hawser-tcp-bench-XXXXXX)
serve_pid=""
iperf_pid=""
cleanup() {
  [[ -n "$iperf_pid" ]] && kill "$iperf_pid" 2>/dev/null || true
  [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n "$serve_pid" ]] && wait "$serve_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$HAWSER" serve --listen "127.0.0.1:$PORT" --memory "$MEMORY" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do
  grep -q '^ready' "$work/serve.log" 2>/dev/null && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
grep -q '^ready' "$work/serve.log" || { echo "hawser serve did not become ready" >&2; cat "$work/serve.log" >&2; exit 1; }

# GB/s of one iperf3 run (receiver side), -P $STREAMS.
run_iperf() {
  iperf3 -s -1 -p "$IPORT" >"$work/iperf_s.log" 2>&1 &
  iperf_pid=$!
  sleep 0.3
  iperf3 -c 127.0.0.1 -p "$IPORT" -P "$STREAMS" -t "$DURATION" -J >"$work/iperf.json"
  wait "$iperf_pid" 2>/dev/null || true
  iperf_pid=""
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bytes"]/d["end"]["sum_received"]["seconds"]/1e9))' "$work/iperf.json"
}

# GB/s of one hawser bench case (its JSON summary is the last line).
run_bench() {
  local op=$1 block=$2
  "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$op" --block-size "$block" --batch-size "$BATCH" \
    --threads "$THREADS" --seconds "$DURATION" --json >"$work/bench.out" 2>"$work/bench.err" || {
    echo "hawser bench $op $block failed:" >&2; cat "$work/bench.err" >&2; tail -1 "$work/bench.out" >&2; exit 1; }
  tail -1 "$work/bench.out" | python3 -c '
import json,sys
d=json.loads(sys.stdin.read())
if not d.get("verified", False): sys.exit("bench data not verified: %s" % d)
print("%.3f %.0f %.0f" % (d["gbps"], d["p50_us"], d["p99_us"]))'
}

median() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "hawser: $HAWSER"
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg); iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
echo "case: loopback, serve --memory $MEMORY, bench --batch-size $BATCH --threads $THREADS --seconds $DURATION;" \
     "iperf3 -P $STREAMS -t $DURATION; median of $REPEAT interleaved rounds"
env | grep '^HAWSER_TCP_' | sed 's/^/env: /' || true
echo
printf '%-6s %-6s %10s %10s %8s %9s %9s   %s\n' block op hawser iperf3 ratio p50_us p99_us "runs (GB/s)"
for block in $BLOCKS; do
  ip=(); rd=(); wr=(); rdl=(); wrl=()
  for _ in $(seq "$REPEAT"); do
    ip+=("$(run_iperf)")
    read -r g p50 p99 < <(run_bench read "$block"); rd+=("$g"); rdl+=("$p50 $p99")
    read -r g p50 p99 < <(run_bench write "$block"); wr+=("$g"); wrl+=("$p50 $p99")
  done
  base=$(median "${ip[@]}")
  for op in read write; do
    if [[ $op == read ]]; then runs=("${rd[@]}"); lat=("${rdl[@]}"); else runs=("${wr[@]}"); lat=("${wrl[@]}"); fi
    g=$(median "${runs[@]}")
    p50=$(median $(for l in "${lat[@]}"; do echo "${l% *}"; done))
    p99=$(median $(for l in "${lat[@]}"; do echo "${l#* }"; done))
    ratio=$(python3 -c "print('%.2f' % ($g / $base))")
    printf '%-6s %-6s %10s %10s %8s %9.0f %9.0f   %s | iperf3 %s\n' "$block" "$op" "$g" "$base" "$ratio" "$p50" "$p99" \
      "${runs[*]}" "${ip[*]}"
  done
done
echo
echo "GB/s = 10^9 bytes/s. ratio = hawser median / iperf3 median of the same rounds."
