#!/usr/bin/env bash
# What the caller's thread pays to hand the engine many blocks, through the
# public API (bench/block_cost.cpp, built into bin/; two engines in one
# process): CPU ms of one call for BLOCKS blocks of 4 KiB, as
#   strided   submitStrided (limit: 1 ms for 1,048,576 blocks)
#   post      postPlan of a prepared scattered list (limit: 5 ms)
#   list      submitBlocks of that list; prepare: prepareBlocks of it
#   requests  one TransferRequest per block (the way without block requests;
#             at most 131,072 of them: a task per block costs memory)
# median of REPEAT runs each. With valgrind installed (CALLGRIND=1, the
# default when it is), also the instructions per block of each call
# (callgrind, collecting inside the call only), for CG_BLOCKS blocks.
#
# SEGMENT=file: the target is a file segment (a sparse file in a temporary
# folder) instead of another engine's memory: the file transport's part.
#
# Usage: bench/block_cost.sh
# Environment: BLOCKS (1048576), REPEAT (3), CALLGRIND (1 when valgrind is
#   installed), CG_BLOCKS (16384), SEGMENT (memory | file), BLOCK_COST (path
#   of the helper)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
BLOCKS=${BLOCKS:-1048576}
REPEAT=${REPEAT:-3}
CG_BLOCKS=${CG_BLOCKS:-16384}
CALLGRIND=${CALLGRIND:-$(command -v valgrind >/dev/null && echo 1 || echo 0)}
SEGMENT=${SEGMENT:-memory}
helper=${BLOCK_COST:-$(find_bin block_cost)}
[[ -x "$helper" ]] || { echo "block_cost not built (cmake --build build --target block_cost)" >&2; exit 2; }

work=$(mktemp -d /tmp/hawser-block-cost-XXXXXX)
trap 'rm -rf "$work"' EXIT
target=()
case "$SEGMENT" in
  memory) ;;
  file) target=(--file "$work/segment") ;;
  *) echo "SEGMENT must be memory or file" >&2; exit 2 ;;
esac

for _ in $(seq "$REPEAT"); do
  for mode in strided post list prepare requests; do
    n=$BLOCKS
    [[ $mode == requests && $n -gt 131072 ]] && n=131072
    "$helper" --mode "$mode" --blocks "$n" "${target[@]}" >>"$work/cpu"
  done
done
if [[ "$CALLGRIND" == 1 ]]; then
  for mode in requests strided list prepare post; do
    case $mode in
      requests) fn='hawser::TransferEngine::submitTransfer*' ;;
      strided) fn='hawser::TransferEngine::submitStrided*' ;;
      list) fn='hawser::TransferEngine::submitBlocks*' ;;
      prepare) fn='hawser::TransferEngine::prepareBlocks*' ;;
      post) fn='hawser::TransferEngine::postPlan*' ;;
    esac
    # Under valgrind the io_uring engine's thread never wakes (and pidfd_open
    # is unknown to it, so shm does not install): POSIX file I/O, tcp.
    HAWSER_FILE_ENGINE=posix HAWSER_TRANSPORT=tcp \
      valgrind --tool=callgrind --callgrind-out-file="$work/cg.$mode" --toggle-collect="$fn" \
      "$helper" --mode "$mode" --blocks "$CG_BLOCKS" "${target[@]}" >/dev/null 2>"$work/cg.$mode.log"
    ir=$(callgrind_annotate "$work/cg.$mode" 2>/dev/null | awk '/PROGRAM TOTALS/ && !n++ {gsub(",", "", $1); print $1}')
    echo "{\"mode\":\"$mode\",\"blocks\":$CG_BLOCKS,\"ir\":${ir:-0}}" >>"$work/ir"
  done
fi

python3 - "$work/cpu" "$work/ir" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["mode"], []).append(r)
limits = {"strided": 1.0, "post": 5.0}
print(f"{'call':<9} {'blocks':>8} {'CPU ms':>9} {'ns/block':>9}  limit")
for mode in ("strided", "post", "list", "prepare", "requests"):
    rs = by.get(mode, [])
    if not rs:
        continue
    ms = statistics.median(r["call_cpu_ms"] for r in rs)
    n = rs[0]["blocks"]
    lim = limits.get(mode)
    note = f"{ms / lim:.3f} of {lim:g} ms" if lim else ""
    print(f"{mode:<9} {n:>8} {ms:>9.3f} {ms * 1e6 / n:>9.2f}  {note}")
print(f"engine memory per in-flight run: {rows[0]['engine_bytes_per_inflight_run']} B; "
      f"at most {rows[0]['engine_window_bytes_max_per_task']} B per block request")
if os.path.exists(sys.argv[2]):
    irs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    base = next((r for r in irs if r["mode"] == "requests"), None)
    print("instructions per block inside the call (callgrind):")
    for r in irs:
        per = r["ir"] / r["blocks"]
        rel = f" ({per / (base['ir'] / base['blocks']):.4f} of one request per block)" if base and base["ir"] else ""
        print(f"  {r['mode']:<9} {per:>10.1f}{rel}")
bad = any(statistics.median(r["call_cpu_ms"] for r in by.get(m, [])) > lim for m, lim in limits.items() if by.get(m))
sys.exit(1 if bad else 0)
EOF
