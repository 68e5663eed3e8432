#!/usr/bin/env bash
# A paged KV cache against the same bytes contiguous, for every path hawser
# has: `hawser bench --layout kv` (tools/bench_kv.h) for each transport,
# block size and op. Each run moves LAYERS x K/V x KV_BLOCKS chunks,
# scattered by a different block table on each side (pools of KV_POOL
# blocks per tensor), as ONE block request, and in the same interleaved
# rounds the same bytes contiguous (one block request) and as 1 MiB
# requests; every byte of every transfer verified; medians of ROUNDS.
#
# Rows (TRANSPORTS):
#   tcp       host memory both ends, HAWSER_TRANSPORT=tcp, loopback
#   shm       host memory both ends, two processes
#   file      file segment <-> host memory (file side contiguous)
#   nvlink    GPU memory both ends, one GPU (cuda:0), two processes; and
#             cuda:1 -> cuda:0 where the host has two GPUs (nvlink_x2)
#   tcp_gpu   GPU memory both ends over tcp
#   file_gpu  file segment <-> GPU memory
# and, where there is a GPU, kv_gpu_baseline for the same layout: one
# contiguous cuMemcpyAsync, one per chunk, the driver's batched copy, and its
# own gather kernel (whole GPU; 8/16/32/64 CTAs): the nvlink rows are set
# against it too. On a host
# without a GPU the GPU rows are skipped, saying why.
#
# Prints one table (GB/s = 10^9 bytes/s; ratio = KV / contiguous of the
# same run; / 1MiB = KV / the 1 MiB requests), then the issue's aims.
#
# Usage: bench/kv.sh                  (from the repository root)
# Environment (all optional):
#   HAWSER      the hawser binary       (default: build/bin/hawser, then build-*/bin/hawser)
#   BASELINE    kv_gpu_baseline          (default: next to hawser)
#   LAYERS      (default 8)   KV_BLOCKS (default 500)   KV_POOL (default 2 x KV_BLOCKS)
#   SIZES       block sizes              (default "4K 16K 32K 64K 256K")
#   OPS         (default "read write")   ROUNDS (default 5)
#   TRANSPORTS  (default "tcp shm file nvlink tcp_gpu file_gpu")
#   KV_PLAN     1: a prepared plan posted each round instead of submitBlocks (default 0)
#   KV_REPEAT   transfers of each way timed one after another in a round, each
#               waited for before the next (default 1: a request issued alone)
#   FILE        the file segment's file  (default /var/tmp/hawser-bench/kv-data; made as large as needed)
#   PORT        first port for hawser serve (default 17960)
#   BASELINE_SECONDS  seconds per baseline measurement (default 1)
#   RESULTS     keep every run's JSON line in this file
#   HAWSER_GPU_CUDA_DRIVER and every HAWSER_* tunable reach all engines.
set -euo pipefail
export NCCL_NVLS_ENABLE=0  # never NVLink multicast

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
BASELINE=${BASELINE:-$(dirname "$HAWSER")/kv_gpu_baseline}
LAYERS=${LAYERS:-8}
KV_BLOCKS=${KV_BLOCKS:-500}
KV_POOL=${KV_POOL:-$((2 * KV_BLOCKS))}
SIZES=${SIZES:-"4K 16K 32K 64K 256K"}
OPS=${OPS:-"read write"}
ROUNDS=${ROUNDS:-5}
TRANSPORTS=${TRANSPORTS:-"tcp shm file nvlink tcp_gpu file_gpu"}
KV_PLAN=${KV_PLAN:-0}
KV_REPEAT=${KV_REPEAT:-1}
FILE=${FILE:-/var/tmp/hawser-bench/kv-data}
PORT=${PORT:-17960}
BASELINE_SECONDS=${BASELINE_SECONDS:-1}

bench_work kv-bench
: >"$work/results"

# The largest block size decides the memory of a target and the file's length.
max=0
for s in $SIZES; do b=$(size_bytes "$s"); (( b > max )) && max=$b; done
pool_bytes=$(( 2 * LAYERS * KV_POOL * max ))
file_bytes=$(( 2 * LAYERS * KV_BLOCKS * max ))

# GPUs: how many, or why none.
gpus=0
gpu_why=""
if [[ ! -x "$BASELINE" ]]; then
  gpu_why="kv_gpu_baseline not found at $BASELINE (cmake --build build --target kv_gpu_baseline; or set BASELINE=)"
else
  read -r gpus gpu_why <<<"$("$BASELINE" --count)"
  [[ "${gpus:-0}" -ge 1 ]] || gpu_why="no usable GPU: ${gpu_why:-no reason given}"
fi
skipped=()

# start_target NAME LOCATION [ENV...]: `hawser serve` of pool_bytes at LOCATION; sets target.
start_target() {
  local name=$1 location=$2
  shift 2
  local port=$((PORT++))
  env "$@" "$HAWSER" serve --listen "127.0.0.1:$port" --memory "$pool_bytes" --location "$location" \
    >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local _
  for _ in $(seq 300); do
    grep -q '^ready' "$work/$name.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^ready' "$work/$name.log" || { echo "hawser serve ($name) did not start:" >&2; cat "$work/$name.log" >&2; return 1; }
  target=$(sed -n 's/^segment: //p' "$work/$name.log")
  serve_pid=$pid
}
stop_target() { kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; }

failed=0
# run_row ROW TARGET LOCAL_LOCATION [ENV...]: every size and op; one JSON line each into results.
run_row() {
  local row=$1 tgt=$2 loc=$3
  shift 3
  local plan=()
  [[ "$KV_PLAN" == 1 ]] && plan=(--kv-plan)
  for s in $SIZES; do
    for op in $OPS; do
      if env "$@" "$HAWSER" bench --target "$tgt" --local-location "$loc" --layout kv --layers "$LAYERS" \
          --kv-blocks "$KV_BLOCKS" --kv-pool "$KV_POOL" --block-size "$s" --op "$op" --rounds "$ROUNDS" \
          --kv-repeat "$KV_REPEAT" "${plan[@]}" --json >"$work/bench.out" 2>"$work/bench.err"; then
        tail -1 "$work/bench.out" | sed "s/^{/{\"row\":\"$row\",/" >>"$work/results"
      else
        echo "hawser bench ($row, $s, $op) failed:" >&2
        cat "$work/bench.err" >&2
        echo "{\"row\":\"$row\",\"block_size\":$(size_bytes "$s"),\"op\":\"$op\",\"failed\":true}" >>"$work/results"
        failed=1
      fi
    done
  done
}

make_file() {
  mkdir -p "$(dirname "$FILE")"
  local have=0
  [[ -f "$FILE" ]] && have=$(stat -c %s "$FILE")
  # Real blocks (not fallocate: unwritten extents read as zeros without I/O).
  (( have >= file_bytes )) || dd if=/dev/zero of="$FILE" bs=1M count=$(( (file_bytes + 1048575) / 1048576 )) \
    oflag=direct status=none
}

no_rdma=(HAWSER_RDMA_VERBS_LIB="${HAWSER_RDMA_VERBS_LIB:-/nonexistent/libibverbs.so.1}")
for t in $TRANSPORTS; do
  case "$t" in
    tcp)
      start_target tcp cpu HAWSER_TRANSPORT=tcp || { failed=1; continue; }
      run_row tcp "$target" cpu HAWSER_TRANSPORT=tcp
      stop_target ;;
    shm)
      start_target shm cpu || { failed=1; continue; }
      run_row shm "$target" cpu
      stop_target ;;
    file)
      make_file
      run_row file "file://$FILE" cpu ;;
    nvlink|tcp_gpu|file_gpu)
      if [[ "$gpus" -lt 1 ]]; then skipped+=("$t"); continue; fi
      case "$t" in
        nvlink)
          start_target nvlink cuda:0 || { failed=1; continue; }
          run_row nvlink "$target" cuda:0
          if [[ "$gpus" -ge 2 ]]; then run_row nvlink_x2 "$target" cuda:1; else skipped+=("nvlink_x2"); fi
          stop_target ;;
        tcp_gpu)
          # rdma left out (it would register the GPU memory too); tcp only.
          start_target tcp_gpu cuda:0 HAWSER_TRANSPORT=tcp "${no_rdma[@]}" || { failed=1; continue; }
          run_row tcp_gpu "$target" cuda:0 HAWSER_TRANSPORT=tcp "${no_rdma[@]}"
          stop_target ;;
        file_gpu)
          make_file
          run_row file_gpu "file://$FILE" cuda:0 ;;
      esac ;;
    *) echo "unknown transport row '$t' (tcp shm file nvlink tcp_gpu file_gpu)" >&2; exit 2 ;;
  esac
done

# The GPU's own figures for the same layout.
: >"$work/baseline"
if [[ "$gpus" -ge 1 && " $TRANSPORTS " == *" nvlink "* ]]; then
  sizes_csv=$(echo "$SIZES" | xargs | tr ' ' ',')
  "$BASELINE" --layers "$LAYERS" --kv-blocks "$KV_BLOCKS" --kv-pool "$KV_POOL" --block-sizes "$sizes_csv" \
    --seconds "$BASELINE_SECONDS" >"$work/baseline" 2>"$work/baseline.err" || {
    echo "kv_gpu_baseline failed:" >&2; cat "$work/baseline.err" >&2; failed=1; }
  grep -h 'skipped' "$work/baseline.err" >&2 || true
fi
[[ -n "${RESULTS:-}" ]] && cat "$work/results" "$work/baseline" >"$RESULTS"

echo "hawser: $HAWSER; layout $LAYERS layers x K/V x $KV_BLOCKS blocks (pools of $KV_POOL) per block size;" \
     "$ROUNDS interleaved rounds, medians; $KV_REPEAT transfer(s) of each way in a row a round; submit: $([[ "$KV_PLAN" == 1 ]] && echo 'a plan posted' || echo submitBlocks)"
host_line
rc=0
python3 - "$work/results" "$work/baseline" <<'EOF' || rc=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
def kib(b): return f"{b // 1024}K"
print(f"{'row':<10} {'block':>5} {'op':<5} {'KV GB/s':>9} {'contig GB/s':>11} {'ratio':>6} {'1MiB GB/s':>9} "
      f"{'/ 1MiB':>6} {'runs':>6} {'transport':<9} {'mechanism':<11} {'CTAs':>4} verified")
for r in rows:
    if r.get("failed"):
        print(f"{r['row']:<10} {kib(r['block_size']):>5} {r['op']:<5} FAILED")
        continue
    print(f"{r['row']:<10} {kib(r['block_size']):>5} {r['op']:<5} {r['kv_gbps']:>9.3f} {r['contiguous_gbps']:>11.3f} "
          f"{r['ratio']:>6.3f} {r['mib_requests_gbps']:>9.3f} {r['ratio_to_mib_requests']:>6.3f} {r['kv_runs']:>6} "
          f"{'+'.join(r['transports']) or '?':<9} {r['copy_mechanism']:<11} {str(r['copy_ctas_max']):>4} "
          f"{'yes' if r['verified'] else 'NO'}")
contig = {b["block_size"]: b["gbps"] for b in base if b.get("kind") == "contiguous"}
if base:
    print()
    print("GPU baseline (kv_gpu_baseline, one process, same layout; ratio to one contiguous cuMemcpyAsync):")
    print(f"{'block':>5} {'what':<22} {'GB/s':>9} {'ratio':>6}")
    for b in base:
        if b.get("kind") == "device":
            sms = b["sms"] if b["sms"] >= 0 else "?"
            print(f"GPU {b['gpu']} (to GPU {b['peer_gpu']}): {sms} SMs, {b['cta_threads']} threads a CTA")
        elif b.get("skipped"):
            print(f"{kib(b['block_size']):>5} {b['kind']:<22} skipped: {b['skipped']}")
        else:
            what = {"gather": f"gather, {b.get('ctas_limit')} CTAs ({b.get('ctas')})",
                    "contiguous_alone": "contiguous, one request", "gather_alone": "gather (all), one request",
                    "contiguous_waited": "contiguous, each waited"}.get(
                        b["kind"], b["kind"])
            print(f"{kib(b['block_size']):>5} {what:<22} {b['gbps']:>9.1f} {b.get('ratio_to_contiguous', 1.0):>6.3f}")
    print()
    alone = {(b["kind"], b["block_size"]): b["gbps"] for b in base
             if b.get("kind", "").endswith("_alone") or b.get("kind") == "contiguous_waited"}
    print("nvlink rows against the GPU's contiguous cuMemcpyAsync of the same bytes (back to back), and against")
    print("one contiguous copy / one whole-GPU gather issued as a request of its own (after a pause, waited for),")
    print("and against contiguous copies issued one after another, each waited for (no pause):")
    for r in rows:
        if r.get("row") == "nvlink" and not r.get("failed") and r["block_size"] in contig:
            bs = r["block_size"]
            more = "".join(f"; / {what} {alone[(k, bs)]:.1f} = {r['kv_gbps'] / alone[(k, bs)]:.3f}"
                           for k, what in (("contiguous_alone", "one copy"), ("gather_alone", "one gather"),
                                           ("contiguous_waited", "waited copies"))
                           if (k, bs) in alone and alone[(k, bs)] > 0)
            print(f"  nvlink {kib(bs)} {r['op']}: {r['kv_gbps']:.1f} / {contig[bs]:.1f} GB/s"
                  f" = {r['kv_gbps'] / contig[bs]:.3f}{more}")
def per_group(c):
    n = c.get("nvlink.groups_issued", 0)
    if not n:
        return None
    us = {k: c.get(f"nvlink.group_{k}_ns", 0) / n / 1e3 for k in ("queued", "check", "launch", "gpu", "end")}
    return n, us, c.get("nvlink.groups_inline", 0), c.get("nvlink.groups_polled", 0)
lines = []
for r in rows:
    for way in ("kv", "contiguous"):
        g = None if r.get("failed") else per_group(r.get(f"{way}_counters", {}))
        if g:
            n, us, inl, pol = g
            lines.append(f"  {r['row']} {kib(r['block_size'])} {r['op']:<5} {way:<10} {n:>4} groups ({inl} issued inline, "
                         f"{pol} ended by the waiter): " + ", ".join(f"{k} {v:.1f}" for k, v in us.items()))
if lines:
    print()
    print("nvlink: where a group's time went (us, means over the timed transfers):")
    print("\n".join(lines))
print()
print("aims (issue 25): nvlink one GPU >= 0.5 of contiguous cuMemcpyAsync at 32K, >= 0.25 at 4K; "
      "file <-> host/GPU >= 0.8 of the path's contiguous rate at 32K; tcp (host, GPU) and shm >= 0.8 at 32K.")
for r in rows:
    if r.get("failed") or r["block_size"] != 32768 or r["row"] not in ("tcp", "shm", "tcp_gpu", "file", "file_gpu"):
        continue
    print(f"  {r['row']} 32K {r['op']}: {r['ratio']:.3f} of contiguous, {r['ratio_to_mib_requests']:.3f} of 1 MiB requests")
bad = [r for r in rows if r.get("failed") or not r.get("verified")]
sys.exit(1 if bad else 0)
EOF
for s in "${skipped[@]}"; do
  case "$s" in
    nvlink_x2) echo "skipped: nvlink across two GPUs (this host has one GPU)" ;;
    *) echo "skipped: $s ($gpu_why)" ;;
  esac
done
[[ "$failed" == 0 && "$rc" == 0 ]] || exit 1
