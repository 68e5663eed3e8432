#!/usr/bin/env bash
# hawser tcp transport: GPU memory at both ends vs host memory at both ends,
# loopback, in one run.
#
# Starts two `hawser serve` targets, one with GPU memory (--location cuda:0)
# and one with host memory, then for every block size and op runs, REPEAT
# times in turn, `hawser bench --local-location cuda:0` against the GPU
# target and `hawser bench` (host buffers) against the host target; prints
# the median GB/s (10^9 bytes/s) of each and the ratio GPU / host of the
# same rounds (interleaving makes a busy machine's load hit both alike), and
# the GPU staging counters of the GPU runs (proof the staging path ran).
# Data is verified in every run. Only tcp runs (HAWSER_TRANSPORT=tcp, and
# rdma not installed): on a host with RDMA NICs rdma would carry the data.
#
# Needs a GPU: exits 1 with the reason when `hawser serve --location cuda:0`
# cannot start. HAWSER_GPU_CUDA_DRIVER picks the CUDA driver (the stand-in
# driver, build/tests/libhawser_fake_cuda.so, only checks the script works:
# its copies are memcpy on threads, so its figures mean nothing).
#
# Usage: bench/tcp_gpu.sh            (from the repository root)
# Environment (all optional):
#   HAWSER        path of the hawser binary   (default: build/bin/hawser, then build-*/bin/hawser)
#   PORT          GPU target port              (default 17820; the host target uses PORT+1)
#   MEMORY        memory each target exposes   (default 1G)
#   BLOCKS        block sizes                  (default "64K 1M 4M")
#   OPS           ops                          (default "read write")
#   BATCH         requests per batch           (default 32)
#   THREADS       bench threads                (default 2)
#   DURATION      seconds per run              (default 3)
#   REPEAT        rounds per case              (default 3)
#   every HAWSER_TCP_* tunable (tcp.slice_size, tcp.gpu_staging_buffers, ...) reaches all engines.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }

PORT=${PORT:-17820}
HPORT=$((PORT + 1))
MEMORY=${MEMORY:-1G}
BLOCKS=${BLOCKS:-"64K 1M 4M"}
OPS=${OPS:-"read write"}
BATCH=${BATCH:-32}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
export HAWSER_TRANSPORT=tcp
# rdma left out altogether (it would register the GPU memory too, and fail
# where the NICs cannot reach GPU memory); set HAWSER_RDMA_VERBS_LIB to keep it.
export HAWSER_RDMA_VERBS_LIB=${HAWSER_RDMA_VERBS_LIB:-/nonexistent/libibverbs.so.1}

bench_work tcp-gpu-bench

# start_serve NAME PORT ARGS...: a target in the background, until "ready".
start_serve() {
  local name=$1 port=$2
  shift 2
  "$HAWSER" serve --listen "127.0.0.1:$port" --memory "$MEMORY" "$@" >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -q '^ready' "$work/$name.log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}

if ! start_serve gpu "$PORT" --location cuda:0; then
  echo "bench/tcp_gpu.sh needs a GPU: hawser serve --location cuda:0 did not start:" >&2
  sed 's/^/  /' "$work/gpu.log" >&2
  exit 1
fi
start_serve host "$HPORT" || { echo "hawser serve (host memory) did not start:" >&2; cat "$work/host.log" >&2; exit 1; }

# One hawser bench case: prints "GB/s staged_bytes" (staged = the tcp GPU
# staging counters of that run; 0 for host buffers).
run_bench() {
  local op=$1 block=$2 port=$3
  shift 3
  "$HAWSER" bench --target "127.0.0.1:$port" --op "$op" --block-size "$block" --batch-size "$BATCH" \
    --threads "$THREADS" --seconds "$DURATION" --json "$@" >"$work/bench.out" 2>"$work/bench.err" || {
    echo "hawser bench $op $block $* failed:" >&2; cat "$work/bench.err" >&2; tail -1 "$work/bench.out" >&2; exit 1; }
  local gb to from
  read -r gb to from < <(python3 "$here/bench/bench_result.py" "$work/bench.out" tcp gbps \
    stats.tcp.gpu_staged_to_device_bytes:0 stats.tcp.gpu_staged_from_device_bytes:0) || exit 1
  echo "$gb $((to + from))"
}

median() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "hawser: $HAWSER"
echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "gpu target: $(grep '^location' "$work/gpu.log")  cuda driver: ${HAWSER_GPU_CUDA_DRIVER:-libcuda.so.1 (default)}"
echo "case: loopback, serve --memory $MEMORY, bench --batch-size $BATCH --threads $THREADS --seconds $DURATION;" \
     "median of $REPEAT interleaved rounds; gpu = bench --local-location cuda:0 against serve --location cuda:0"
env | grep '^HAWSER_TCP_' | sed 's/^/env: /' || true
echo
printf '%-6s %-6s %10s %10s %8s   %s\n' block op gpu_gpu host_host ratio "runs (GB/s)"
worst=""
for block in $BLOCKS; do
  for op in $OPS; do
    g=(); h=()
    for _ in $(seq "$REPEAT"); do
      read -r gb staged < <(run_bench "$op" "$block" "$PORT" --local-location cuda:0)
      [[ "$staged" -gt 0 ]] || { echo "the GPU run staged no bytes: not the GPU path" >&2; exit 1; }
      g+=("$gb")
      read -r gb staged < <(run_bench "$op" "$block" "$HPORT")
      h+=("$gb")
    done
    gm=$(median "${g[@]}")
    hm=$(median "${h[@]}")
    ratio=$(python3 -c "print('%.2f' % ($gm / $hm if $hm > 0 else 0))")
    worst=$(python3 -c "w='$worst'; print(min(float(w), $ratio) if w else $ratio)")
    printf '%-6s %-6s %10s %10s %8s   gpu %s | host %s\n' "$block" "$op" "$gm" "$hm" "$ratio" "${g[*]}" "${h[*]}"
  done
done
echo
echo "GB/s = 10^9 bytes/s. ratio = GPU-to-GPU median / host-to-host median of the same rounds (aim: >= 0.8)."
echo "lowest ratio: $worst"
