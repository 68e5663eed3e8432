#!/usr/bin/env bash
# hawser's nvlink transport vs the CUDA driver's own copies, in one run.
#
# Starts `hawser serve --location cuda:0` in the background, then for every
# size (MiB) measures, REPEAT times in turn:
#   - GPU 0 -> GPU 1 across processes: `hawser bench --local-location cuda:1
#     --op read` (and GPU 1 -> GPU 0 with --op write), against
#     cuMemcpyPeerAsync between the two GPUs in one process (nvlink_baseline);
#   - within GPU 0 across processes: `hawser bench --local-location cuda:0`,
#     against cuMemcpyAsync device to device (nvlink_baseline);
# and prints the median GB/s (10^9 bytes/s) of each and the ratios. On a host
# with one GPU only the second part runs; on a host without a GPU it says so
# and exits 2.
#
# Usage: bench/nvlink.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary        (default: build/bin/hawser, then build-*/bin/hawser)
#   BASELINE      path of nvlink_baseline          (default: next to hawser)
#   PORT          hawser serve port                 (default 17820)
#   GPU_MEMORY    the target's GPU memory: device (cuMemAlloc, legacy IPC handle) or vmm
#                 (cuMemCreate + cuMemMap as PyTorch's expandable segments, shared by fd)
#                                                   (default device)
#   SIZES         sizes in MiB                      (default "1 16 64 256")
#   BATCH         requests per batch                (default 4)
#   THREADS       bench threads                     (default 2)
#   DURATION      seconds per run                   (default 3)
#   REPEAT        rounds per size                   (default 3)
#   HAWSER_GPU_CUDA_DRIVER  the CUDA driver (default libcuda.so.1); every HAWSER_NVLINK_* tunable
#                 reaches both engines.
set -euo pipefail
export NCCL_NVLS_ENABLE=0  # never NVLink multicast

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
# The baseline lives next to hawser (bin/ of a build, or a gpu_bundle.sh bundle).
BASELINE=${BASELINE:-$(dirname "$HAWSER")/nvlink_baseline}
[[ -x "$BASELINE" ]] || { echo "nvlink_baseline not found (cmake --build build --target nvlink_baseline); set BASELINE=" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }

read -r gpus why <<<"$("$BASELINE" --count)"
if [[ "${gpus:-0}" -lt 1 ]]; then
  echo "nvlink benchmark: this host has no usable GPU (${why:-no reason given}); nothing to measure." >&2
  exit 2
fi
[[ "$gpus" -lt 2 ]] && echo "nvlink benchmark: one GPU on this host: GPU -> GPU across GPUs skipped, within one GPU only." >&2

PORT=${PORT:-17820}
GPU_MEMORY=${GPU_MEMORY:-device}
SIZES=${SIZES:-"1 16 64 256"}
BATCH=${BATCH:-4}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
# The target holds every thread's batch of the biggest size.
max=0
for s in $SIZES; do (( s > max )) && max=$s; done
MEMORY=$(( max * BATCH * THREADS + 64 ))M

work=$(mktemp -d /tmp/hawser-nvlink-bench-XXXXXX)
serve_pid=""
cleanup() {
  [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null || true
  [[ -n "$serve_pid" ]] && wait "$serve_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$HAWSER" serve --listen "127.0.0.1:$PORT" --memory "$MEMORY" --location cuda:0 --gpu-memory "$GPU_MEMORY" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 200); do
  grep -q '^ready' "$work/serve.log" 2>/dev/null && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
grep -q '^ready' "$work/serve.log" || { echo "hawser serve did not start" >&2; cat "$work/serve.log" >&2; exit 1; }
target=$(sed -n 's/^segment: //p' "$work/serve.log")

# One hawser bench run: prints its GB/s, checks nvlink carried the data.
hbench() {  # local-location op size_mib
  local out
  out=$("$HAWSER" bench --target "$target" --local-location "$1" --op "$2" --block-size "$3M" \
        --batch-size "$BATCH" --threads "$THREADS" --seconds "$DURATION" --no-verify --json) || {
    echo "hawser bench failed: $out" >&2; exit 1; }
  python3 -c 'import json,sys
j=json.loads(sys.stdin.read().strip().splitlines()[-1])
if j["transports"]!=["nvlink"]: sys.exit("data went over %s, not nvlink" % j["transports"])
print(j["gbps"])' <<<"$out"
}
baseline() {  # size_mib -> lines of JSON
  "$BASELINE" --seconds "$DURATION" --sizes "$1"
}
pick() {  # json-lines kind [from to]
  python3 -c 'import json,sys
kind=sys.argv[1]; a=sys.argv[2:]
for l in sys.stdin:
  j=json.loads(l)
  if j["kind"]!=kind: continue
  if kind=="peer" and [str(j["from"]),str(j["to"])]!=a: continue
  print(j["gbps"])' "$@"
}
median() { tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1])/float(sys.argv[2])) if float(sys.argv[2])>0 else 'n/a')" "$1" "$2"; }

printf '%-8s %-24s %12s %12s %8s\n' size path hawser_GB/s driver_GB/s ratio
for s in $SIZES; do
  r01=() w10=() b01=() b10=() same=() bd2d=()
  for _ in $(seq "$REPEAT"); do
    base=$(baseline "$s")
    if [[ "$gpus" -ge 2 ]]; then
      r01+=("$(hbench cuda:1 read "$s")")
      w10+=("$(hbench cuda:1 write "$s")")
      b01+=("$(pick peer 0 1 <<<"$base")")
      b10+=("$(pick peer 1 0 <<<"$base")")
    fi
    same+=("$(hbench cuda:0 read "$s")")
    bd2d+=("$(pick d2d <<<"$base")")
  done
  if [[ "$gpus" -ge 2 ]]; then
    h=$(echo "${r01[*]}" | median); b=$(echo "${b01[*]}" | median)
    printf '%-8s %-24s %12.2f %12.2f %8s\n' "${s}M" "GPU0->GPU1 (read)" "$h" "$b" "$(ratio "$h" "$b")"
    h=$(echo "${w10[*]}" | median); b=$(echo "${b10[*]}" | median)
    printf '%-8s %-24s %12.2f %12.2f %8s\n' "${s}M" "GPU1->GPU0 (write)" "$h" "$b" "$(ratio "$h" "$b")"
  fi
  h=$(echo "${same[*]}" | median); b=$(echo "${bd2d[*]}" | median)
  printf '%-8s %-24s %12.2f %12.2f %8s\n' "${s}M" "within GPU0 (read)" "$h" "$b" "$(ratio "$h" "$b")"
done
echo "hawser: $HAWSER bench --batch-size $BATCH --threads $THREADS --seconds $DURATION against serve --location cuda:0 --gpu-memory $GPU_MEMORY;"
echo "driver: $BASELINE (one stream, back-to-back copies); medians of $REPEAT interleaved rounds."
