#!/usr/bin/env bash
# Block requests on small blocks, against limits measured in the same run:
# for tcp (forced, loopback) and shm (a second process of this host), and
# each layout (contiguous, scattered, strided), `hawser bench --blocks N`
# against a `hawser serve` target. Each run interleaves ROUNDS rounds of: the
# block request (a plan posted), the same bytes as 1 MiB requests, one block
# alone (round trip) and one request per block; medians. Prints one line per
# transport and layout, then the aims:
#   tcp, contiguous: bytes/s at least 0.9 of the 1 MiB requests' (blocks merged into runs)
#   shm, contiguous: at least 1,000,000 blocks/s
#   scattered/strided: blocks/s against one block alone (reported, no aim)
#
# Usage: bench/blocks.sh                   (from the repository root)
# Environment (all optional):
#   HAWSER    path of the hawser binary    (default: build/bin/hawser, then build-*/bin/hawser)
#   BLOCKS    blocks per request           (default 65536)
#   SIZE      block size                   (default 4K)
#   ROUNDS    interleaved rounds           (default 5)
#   LAYOUTS   (default "contiguous scattered strided")
#   OP        read or write                (default read)
#   PORT      first port for hawser serve  (default 17940)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
BLOCKS=${BLOCKS:-65536}
SIZE=${SIZE:-4K}
ROUNDS=${ROUNDS:-5}
LAYOUTS=${LAYOUTS:-"contiguous scattered strided"}
OP=${OP:-read}
PORT=${PORT:-17940}
bytes=$(size_bytes "$SIZE")
memory=$(( 2 * BLOCKS * bytes + (1 << 20) ))

work=$(mktemp -d /tmp/hawser-blocks-bench-XXXXXX)
serve_pid=""
stop_serve() {
  [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n "$serve_pid" ]] && wait "$serve_pid" 2>/dev/null || true
  serve_pid=""
}
trap 'stop_serve; rm -rf "$work"' EXIT

for transport in tcp shm; do
  port=$((PORT++))
  env_t=()
  [[ "$transport" == tcp ]] && env_t=(HAWSER_TRANSPORT=tcp)
  env "${env_t[@]}" "$HAWSER" serve --listen "127.0.0.1:$port" --memory "$memory" >"$work/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 100); do grep -q ready "$work/serve.log" && break; sleep 0.1; done
  grep -q ready "$work/serve.log" || { cat "$work/serve.log" >&2; exit 1; }
  for layout in $LAYOUTS; do
    env "${env_t[@]}" "$HAWSER" bench --target "127.0.0.1:$port" --op "$OP" --blocks "$BLOCKS" --block-size "$SIZE" \
      --layout "$layout" --rounds "$ROUNDS" --json | tail -1 | sed "s/^{/{\"transport\":\"$transport\",/" >>"$work/results"
  done
  stop_serve
done

python3 - "$work/results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'transport':<9} {'layout':<10} {'runs':>6} {'GB/s':>7} {'blocks/s':>10} {'/ 1MiB req':>10} "
      f"{'/ one block':>11} {'/ req per block':>15} {'post CPU ms':>11} verified")
bad = False
for r in rows:
    print(f"{r['transport']:<9} {r['layout']:<10} {r['runs']:>6} {r['block_gbps']:>7.3f} {r['block_blocks_per_s']:>10.0f} "
          f"{r['ratio_to_mib_requests']:>10.3f} {r['ratio_to_single_block']:>11.1f} {r['ratio_to_request_per_block']:>15.2f} "
          f"{r['post_cpu_ms']:>11.3f} {r['verified']}")
    bad |= not r["verified"]
for r in rows:
    if r["layout"] != "contiguous":
        continue
    if r["transport"] == "tcp":
        print(f"tcp contiguous: {r['ratio_to_mib_requests']:.3f} of the 1 MiB requests' bytes/s (aim 0.9)")
    if r["transport"] == "shm":
        print(f"shm contiguous: {r['block_blocks_per_s']:.0f} blocks/s (aim 1,000,000), "
              f"{r['ratio_to_mib_requests']:.3f} of the 1 MiB requests' bytes/s")
sys.exit(1 if bad else 0)
EOF
