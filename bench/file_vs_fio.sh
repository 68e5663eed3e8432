#!/usr/bin/env bash
# The file transport against fio on equal memory, on the same file and
# region, in the same run.
#
# Both sides use 2 MiB huge pages reserved for the run (vm.nr_hugepages, and a
# hugetlbfs mount for fio's --iomem=mmaphuge; both undone on exit, also on
# failure), so a 1 MiB O_DIRECT request is a few physical segments for each.
# fio: ioengine=io_uring, direct=1, --iodepth QD, registered buffers and
# files (hawser's defaults). hawser: `hawser bench --target file://PATH
# --huge-pages`, file.io_depth = QD (ops in the kernel), THREADS threads each
# keeping DEPTH batches of QD/THREADS requests submitted, so the ring never
# drains between batches. Both work on the same region: the bench cycles
# over THREADS x DEPTH x QD/THREADS blocks at the start of the segment, fio
# gets --size of that many bytes on the same file(s).
#
# For each of READ and WRITE, REPEAT interleaved rounds (fio first in odd
# rounds, hawser first in even ones); prints every round's
# GB/s, ratio (hawser / fio) and cores busy (CPU seconds per second: fio's
# own usr+sys, the bench's over its timed run), then the medians.
#
# With --files N (N > 1) the same on a named file segment of N backing files
# (hawser segment register) against fio on the same N files
# (--filename=a:b:...), the region spread evenly over the files.
#
#   bench/file_vs_fio.sh [--file PATH] [--bs 1M] [--qd 32] [--threads 1] [--depth 2]
#                        [--seconds 5] [--repeat 3] [--files 1]
#                        [--hawser BIN] [--fio BIN] [--json]
# Exit: 0 ok; 1 a run failed; 2 bad usage; 77 fio, hawser, root or huge pages missing.
set -euo pipefail

FILE=/var/tmp/hawser-bench/data
BS=1M
QD=32
THREADS=1
DEPTH=2
SECONDS_PER_RUN=5
REPEAT=3
NFILES=1
HAWSER=""
FIO=fio
JSON=0

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --file) FILE=$2; shift 2 ;;
    --bs) BS=$2; shift 2 ;;
    --qd) QD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --depth) DEPTH=$2; shift 2 ;;
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
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
if [ -z "$HAWSER" ]; then HAWSER=$(find_bin hawser); fi
[ -n "$HAWSER" ] && [ -x "$HAWSER" ] || { echo "hawser binary not found (use --hawser BIN)" >&2; exit 77; }
command -v "$FIO" >/dev/null || { echo "fio not found (apt-get install fio, or --fio BIN)" >&2; exit 77; }
command -v python3 >/dev/null || { echo "python3 is needed to parse JSON" >&2; exit 77; }
[ -w /proc/sys/vm/nr_hugepages ] || { echo "reserving huge pages needs root (/proc/sys/vm/nr_hugepages)" >&2; exit 77; }

bs_bytes=$(size_bytes "$BS")
[ $((QD % THREADS)) -eq 0 ] || { echo "--qd $QD must be a multiple of --threads $THREADS" >&2; exit 2; }
BATCH=$((QD / THREADS))
span=$((DEPTH * QD * bs_bytes))  # the region both tools work on

dir=$(dirname "$FILE")
mkdir -p "$dir"
tmp=$(mktemp -d)
huge=$((2 << 20))
hp_before=$(cat /proc/sys/vm/nr_hugepages)
mnt=""
cleanup() {
  [ -n "$mnt" ] && { umount "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true; }
  echo "$hp_before" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Huge pages: the larger of fio's buffers (QD blocks, aligned) and the
# bench's (span), plus slack; one side runs at a time.
need=$(( ((span > QD * bs_bytes ? span : QD * bs_bytes) + huge - 1) / huge + 2 ))
echo $((hp_before + need)) >/proc/sys/vm/nr_hugepages
free_pages=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if [ "$free_pages" -lt "$need" ]; then
  echo "could reserve only $free_pages of $need 2 MiB huge pages (memory too fragmented or too small)" >&2
  exit 77
fi
mnt=$(mktemp -d /tmp/hawser-hugetlbfs-XXXXXX)
mount -t hugetlbfs -o pagesize=2M none "$mnt"

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

run_fio() {  # op -> "GB/s cores"
  "$FIO" --name=hawser-cmp --filename="$fio_files" --size="$span" --direct=1 --rw="$1" --bs="$BS" \
    --ioengine=io_uring --iodepth="$QD" --fixedbufs --registerfiles --numjobs=1 --time_based \
    --runtime="$SECONDS_PER_RUN" --iomem="mmaphuge:$mnt/fio.buf" --output-format=json >"$tmp/fio.json" 2>"$tmp/fio.err" ||
    { cat "$tmp/fio.err" >&2; return 1; }
  python3 -c "import json,sys;j=json.load(open(sys.argv[1]))['jobs'][0]
print(j[sys.argv[2]]['bw_bytes']/1e9, (j['usr_cpu']+j['sys_cpu'])/100)" "$tmp/fio.json" "$1"
}
run_hawser() {  # op -> "GB/s cores"
  env "${seg_env[@]}" HAWSER_FILE_IO_DEPTH="$QD" "$HAWSER" bench --target "$target" --op "$1" \
    --block-size "$BS" --batch-size "$BATCH" --threads "$THREADS" --depth "$DEPTH" --huge-pages \
    --seconds "$SECONDS_PER_RUN" --json 2>"$tmp/err" >"$tmp/bench.out" || { cat "$tmp/err" >&2; return 1; }
  tail -1 "$tmp/bench.out" | python3 -c "import json,sys;j=json.load(sys.stdin)
assert j['verified'], 'hawser bench: data not verified'
assert j['transports'] == ['file'], 'carried by %s' % j['transports']
print(j['gbps'], j['cpu_s'] / j['seconds'])"
}

declare -A res
# Who goes first alternates by round: on a disk whose host caches writes,
# the second writer of a pair pays for flushing the first one's bytes.
for r in $(seq "$REPEAT"); do
  for op in read write; do
    if (( r % 2 )); then
      res[fio_$op]="${res[fio_$op]:-} $(run_fio $op | tr ' ' ,)"
      res[hawser_$op]="${res[hawser_$op]:-} $(run_hawser $op | tr ' ' ,)"
    else
      res[hawser_$op]="${res[hawser_$op]:-} $(run_hawser $op | tr ' ' ,)"
      res[fio_$op]="${res[fio_$op]:-} $(run_fio $op | tr ' ' ,)"
    fi
  done
done

python3 - "$JSON" "$BS" "$QD" "$THREADS" "$BATCH" "$DEPTH" "$NFILES" "$REPEAT" "$SECONDS_PER_RUN" "$target" \
  "${res[fio_read]}" "${res[hawser_read]}" "${res[fio_write]}" "${res[hawser_write]}" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, statistics, sys
js, bs, qd, th, batch, depth, nf, rep, secs, target = sys.argv[1:11]
vals = [[tuple(float(v) for v in x.split(",")) for x in a.split()] for a in sys.argv[11:15]]
load = sys.argv[15]
rows = []
for op, f, h in (("read", vals[0], vals[1]), ("write", vals[2], vals[3])):
    ratios = [hh[0] / ff[0] for ff, hh in zip(f, h)]
    rows.append({"op": op, "fio_gbps": round(statistics.median(x[0] for x in f), 3),
                 "hawser_gbps": round(statistics.median(x[0] for x in h), 3),
                 "ratio": round(statistics.median(ratios), 3),
                 "fio_cores": round(statistics.median(x[1] for x in f), 2),
                 "hawser_cores": round(statistics.median(x[1] for x in h), 2),
                 "fio_runs": [round(x[0], 3) for x in f], "hawser_runs": [round(x[0], 3) for x in h],
                 "ratios": [round(x, 3) for x in ratios]})
if js == "1":
    print(json.dumps({"target": target, "files": int(nf), "block_size": bs, "queue_depth": int(qd),
                      "threads": int(th), "batch": int(batch), "depth": int(depth), "repeat": int(rep),
                      "seconds": float(secs), "memory": "2 MiB huge pages (hugetlbfs) on both sides",
                      "results": rows}))
else:
    print(f"target {target} ({nf} file(s)), bs {bs}, queue depth {qd} (hawser: {th} thread(s) x {depth} batches of "
          f"{batch}, file.io_depth {qd}), both on 2 MiB huge pages; {rep} x {secs}s interleaved rounds; load {load}")
    for r in rows:
        print(f"  {r['op']}: fio {r['fio_runs']}  hawser {r['hawser_runs']}  ratio per round {r['ratios']}")
    print(f"{'op':<6} {'fio GB/s':>9} {'hawser GB/s':>12} {'hawser/fio':>11} {'cores fio':>10} {'cores hawser':>13}")
    for r in rows:
        print(f"{r['op']:<6} {r['fio_gbps']:>9.3f} {r['hawser_gbps']:>12.3f} {r['ratio']:>11.3f} "
              f"{r['fio_cores']:>10.2f} {r['hawser_cores']:>13.2f}")
EOF
