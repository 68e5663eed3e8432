#!/usr/bin/env bash
# The file transport against fio, on the same file, in the same run.
#
# For each of READ and WRITE: fio (ioengine=io_uring, direct=1, the same
# block size and queue depth, registered buffers and files like hawser's
# defaults) and `hawser bench --target file://PATH` (threads x batch = queue
# depth), interleaved, --repeat times; prints the median GB/s of each and
# hawser/fio as a ratio. Both touch the same region: hawser bench cycles over
# threads*batch blocks at the start of the segment, so fio gets
# --size=threads*batch*bs on the same file.
#
# With --files N (N > 1) the same is done on a named file segment of N
# backing files (hawser segment register) against fio on the same N files
# (fio --filename=a:b:...), the region spread evenly over the files.
#
#   bench/file_vs_fio.sh [--file PATH] [--bs 1M] [--qd 32] [--threads 8]
#                        [--seconds 5] [--repeat 3] [--files 1]
#                        [--hawser BIN] [--fio BIN] [--json]
# Exit: 0 ok; 1 a run failed; 2 bad usage; 77 fio or hawser missing.
set -euo pipefail

FILE=/var/tmp/hawser-bench/data
BS=1M
QD=32
THREADS=8
SECONDS_PER_RUN=5
REPEAT=3
NFILES=1
HAWSER=""
FIO=fio
JSON=0

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --file) FILE=$2; shift 2 ;;
    --bs) BS=$2; shift 2 ;;
    --qd) QD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --files) NFILES=$2; shift 2 ;;
    --hawser) HAWSER=$2; shift 2 ;;
    --fio) FIO=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done

here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$HAWSER" ]; then
  for c in "$here"/build/bin/hawser "$here"/build-*/bin/hawser; do [ -x "$c" ] && HAWSER=$c && break; done
fi
[ -n "$HAWSER" ] && [ -x "$HAWSER" ] || { echo "hawser binary not found (use --hawser BIN)" >&2; exit 77; }
command -v "$FIO" >/dev/null || { echo "fio not found (apt-get install fio, or --fio BIN)" >&2; exit 77; }
command -v python3 >/dev/null || { echo "python3 is needed to parse JSON" >&2; exit 77; }

bytes() {  # 1M -> 1048576
  python3 -c "import sys;s=sys.argv[1].upper();m={'K':1<<10,'M':1<<20,'G':1<<30}
print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"
}
bs_bytes=$(bytes "$BS")
[ $((QD % THREADS)) -eq 0 ] || { echo "--qd $QD must be a multiple of --threads $THREADS" >&2; exit 2; }
BATCH=$((QD / THREADS))
span=$((QD * bs_bytes))  # the region both tools work on

dir=$(dirname "$FILE")
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Real blocks (not fallocate: unwritten extents read as zeros without I/O).
make_file() {  # path bytes
  local have=0
  [ -f "$1" ] && have=$(stat -c %s "$1")
  if [ "$have" -lt "$2" ]; then
    dd if=/dev/zero of="$1" bs=1M count=$((($2 + 1048575) / 1048576)) oflag=direct status=none
  fi
}

files=()
if [ "$NFILES" -le 1 ]; then
  make_file "$FILE" "$span"
  files=("$FILE")
  target="file://$FILE"
  seg_env=()
else
  per=$(((span / NFILES + bs_bytes - 1) / bs_bytes * bs_bytes))
  for i in $(seq 0 $((NFILES - 1))); do
    f="$FILE.part$i"
    make_file "$f" "$per"
    truncate -s "$per" "$f"
    files+=("$f")
  done
  segjson="$tmp/segments.json"
  "$HAWSER" segment register bench-multi "${files[@]}" --file-segments "$segjson" --replace >/dev/null
  target="bench-multi"
  seg_env=(HAWSER_FILE_SEGMENTS="$segjson")
fi
fio_files=$(IFS=:; echo "${files[*]}")

run_fio() {  # op -> GB/s
  "$FIO" --name=hawser-cmp --filename="$fio_files" --size="$span" --direct=1 --rw="$1" --bs="$BS" \
    --ioengine=io_uring --iodepth="$QD" --fixedbufs --registerfiles --numjobs=1 --time_based \
    --runtime="$SECONDS_PER_RUN" --output-format=json 2>/dev/null |
    python3 -c "import json,sys;j=json.load(sys.stdin)['jobs'][0];print(j['$1']['bw_bytes']/1e9)"
}
run_hawser() {  # op -> GB/s
  env "${seg_env[@]}" HAWSER_FILE_IO_DEPTH="$QD" "$HAWSER" bench --target "$target" --op "$1" \
    --block-size "$BS" --batch-size "$BATCH" --threads "$THREADS" --seconds "$SECONDS_PER_RUN" --json 2>"$tmp/err" |
    tail -1 | python3 -c "import json,sys;j=json.load(sys.stdin)
assert j['verified'], 'hawser bench: data not verified'
print(j['gbps'])" || { cat "$tmp/err" >&2; return 1; }
}

declare -A res
for r in $(seq "$REPEAT"); do
  for op in read write; do
    res[fio_$op]="${res[fio_$op]:-} $(run_fio $op)"
    res[hawser_$op]="${res[hawser_$op]:-} $(run_hawser $op)"
  done
done

python3 - "$JSON" "$BS" "$QD" "$THREADS" "$BATCH" "$NFILES" "$REPEAT" "$SECONDS_PER_RUN" "$target" \
  "${res[fio_read]}" "${res[hawser_read]}" "${res[fio_write]}" "${res[hawser_write]}" <<'EOF'
import json, statistics, sys
js, bs, qd, th, batch, nf, rep, secs, target = sys.argv[1:10]
vals = [[float(x) for x in a.split()] for a in sys.argv[10:14]]
rows = []
for op, f, h in (("read", vals[0], vals[1]), ("write", vals[2], vals[3])):
    mf, mh = statistics.median(f), statistics.median(h)
    rows.append({"op": op, "fio_gbps": round(mf, 3), "hawser_gbps": round(mh, 3),
                 "ratio": round(mh / mf, 3) if mf else None,
                 "fio_runs": [round(x, 3) for x in f], "hawser_runs": [round(x, 3) for x in h]})
if js == "1":
    print(json.dumps({"target": target, "files": int(nf), "block_size": bs, "queue_depth": int(qd),
                      "threads": int(th), "batch": int(batch), "repeat": int(rep), "seconds": float(secs),
                      "results": rows}))
else:
    print(f"target {target} ({nf} file(s)), bs {bs}, queue depth {qd} (hawser: {th} threads x batch {batch}), "
          f"{rep} x {secs}s runs, medians")
    print(f"{'op':<6} {'fio GB/s':>9} {'hawser GB/s':>12} {'hawser/fio':>11}")
    for r in rows:
        print(f"{r['op']:<6} {r['fio_gbps']:>9.3f} {r['hawser_gbps']:>12.3f} {r['ratio']:>11.3f}")
    for r in rows:
        print(f"  {r['op']}: fio {r['fio_runs']}  hawser {r['hawser_runs']}")
EOF
