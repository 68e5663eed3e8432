#!/usr/bin/env bash
# The file transport with GPU memory at the local end, against a serial
# baseline, on the same file, in the same run.
#
# For each block size (default 1M and 16M) and each of READ (file -> GPU)
# and WRITE (GPU -> file): `hawser bench --local-location cuda:N --target
# file://PATH` and bench/gpu_file_baseline (O_DIRECT pread/pwrite of one
# block at a time into a pinned buffer plus a synchronous cuMemcpy: what a
# program without hawser does), interleaved --repeat times over the same
# region; prints the median GB/s of each and hawser/baseline as a ratio, and
# which file path hawser took (the transport's gpu_* counters: gds, compat,
# staged_uring, staged_posix).
#
#   bench/file_gpu.sh [--file PATH] [--bs "1M 16M"] [--qd 32] [--threads 8]
#                     [--seconds 5] [--repeat 3] [--device 0]
#                     [--cufile auto|on|off] [--hawser BIN] [--baseline BIN]
#                     [--json]
# Exit: 0 ok; 1 a run failed; 2 bad usage; 77 no GPU, or a binary missing.
set -euo pipefail

FILE=/var/tmp/hawser-bench/gpu-data
BSS="1M 16M"
QD=32
THREADS=8
SECONDS_PER_RUN=5
REPEAT=3
DEVICE=0
CUFILE=auto
HAWSER=""
BASELINE=""
JSON=0

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --file) FILE=$2; shift 2 ;;
    --bs) BSS=$2; shift 2 ;;
    --qd) QD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --cufile) CUFILE=$2; shift 2 ;;
    --hawser) HAWSER=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"  # find_bin
[ -n "$HAWSER" ] || HAWSER=$(find_bin hawser)
[ -n "$BASELINE" ] || BASELINE=$(find_bin gpu_file_baseline)
[ -n "$HAWSER" ] && [ -x "$HAWSER" ] || { echo "hawser binary not found (use --hawser BIN)" >&2; exit 77; }
[ -n "$BASELINE" ] && [ -x "$BASELINE" ] || {
  echo "gpu_file_baseline not found (cmake --build build --target gpu_file_baseline, or --baseline BIN)" >&2; exit 77; }
command -v python3 >/dev/null || { echo "python3 is needed to parse JSON" >&2; exit 77; }
[ $((QD % THREADS)) -eq 0 ] || { echo "--qd $QD must be a multiple of --threads $THREADS" >&2; exit 2; }
BATCH=$((QD / THREADS))


tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$FILE")"

# Without a GPU there is nothing to measure: say so (the baseline's reason).
rc=0
"$BASELINE" --probe --device "$DEVICE" 2>"$tmp/probe" || rc=$?
[ "$rc" -eq 0 ] || { echo "skipped: $(cat "$tmp/probe")" >&2; exit 77; }

# Real blocks (not fallocate: unwritten extents read as zeros without I/O).
make_file() {  # path bytes
  local have=0
  [ -f "$1" ] && have=$(stat -c %s "$1")
  if [ "$have" -lt "$2" ]; then
    dd if=/dev/zero of="$1" bs=1M count=$((($2 + 1048575) / 1048576)) oflag=direct status=none
  fi
}

run_hawser() {  # op bs -> "GB/s path"
  HAWSER_FILE_IO_DEPTH="$QD" HAWSER_FILE_CUFILE="$CUFILE" HAWSER_FILE_MAX_IO_SIZE="$2" \
    "$HAWSER" bench --target "file://$FILE" --local-location "cuda:$DEVICE" --op "$1" \
    --block-size "$2" --batch-size "$BATCH" --threads "$THREADS" --seconds "$SECONDS_PER_RUN" --json \
    2>"$tmp/err" | tail -1 | python3 -c "import json,sys;j=json.load(sys.stdin)
assert j['verified'], 'hawser bench: data not verified'
c=j['stats'].get('file',{})
paths=[p for p in ('gds','compat','staged_uring','staged_posix') if c.get('gpu_%s_bytes'%p,0)]
print(j['gbps'], '+'.join(paths) or 'none')" || { cat "$tmp/err" >&2; return 1; }
}
run_base() {  # op bs span -> GB/s
  "$BASELINE" --file "$FILE" --op "$1" --bs "$2" --span "$3" --seconds "$SECONDS_PER_RUN" --device "$DEVICE" \
    2>"$tmp/err" | python3 -c "import json,sys;print(json.load(sys.stdin)['gbps'])" || { cat "$tmp/err" >&2; return 1; }
}

out="$tmp/results"
: >"$out"
for BS in $BSS; do
  bs_bytes=$(size_bytes "$BS")
  span=$((QD * bs_bytes))  # the region both work on: hawser cycles over threads*batch blocks
  make_file "$FILE" "$span"
  for r in $(seq "$REPEAT"); do
    for op in read write; do
      read -r hg path < <(run_hawser "$op" "$bs_bytes")
      bg=$(run_base "$op" "$bs_bytes" "$span")
      echo "$BS $op $hg $bg $path" >>"$out"
    done
  done
done

python3 - "$JSON" "$QD" "$THREADS" "$BATCH" "$REPEAT" "$SECONDS_PER_RUN" "$FILE" "$DEVICE" "$CUFILE" "$out" <<'EOF'
import json, statistics, sys
js, qd, th, batch, rep, secs, path, dev, cufile, out = sys.argv[1:11]
runs = {}
for line in open(out):
    bs, op, h, b, p = line.split()
    r = runs.setdefault((bs, op), {"h": [], "b": [], "path": set()})
    r["h"].append(float(h)); r["b"].append(float(b)); r["path"].add(p)
rows = []
for (bs, op), r in runs.items():
    mh, mb = statistics.median(r["h"]), statistics.median(r["b"])
    rows.append({"block_size": bs, "op": op, "hawser_gbps": round(mh, 3), "baseline_gbps": round(mb, 3),
                 "ratio": round(mh / mb, 3) if mb else None, "hawser_path": "/".join(sorted(r["path"])),
                 "hawser_runs": [round(x, 3) for x in r["h"]], "baseline_runs": [round(x, 3) for x in r["b"]]})
if js == "1":
    print(json.dumps({"file": path, "device": int(dev), "cufile": cufile, "queue_depth": int(qd),
                      "threads": int(th), "batch": int(batch), "repeat": int(rep), "seconds": float(secs),
                      "results": rows}))
else:
    print(f"file://{path} <-> cuda:{dev}, file.cufile={cufile}, queue depth {qd} (hawser: {th} threads x batch "
          f"{batch}; baseline: serial O_DIRECT + pinned cuMemcpy), {rep} x {secs}s runs, medians")
    print(f"{'bs':<5} {'op':<6} {'hawser GB/s':>12} {'baseline GB/s':>14} {'ratio':>7}  path")
    for r in rows:
        print(f"{r['block_size']:<5} {r['op']:<6} {r['hawser_gbps']:>12.3f} {r['baseline_gbps']:>14.3f} "
              f"{r['ratio']:>7.3f}  {r['hawser_path']}")
EOF
