#!/usr/bin/env bash
# A paged KV cache offloaded to a file: a block request of --blocks blocks
# of --bs bytes, scattered in local memory (host, or GPU memory with
# --location cuda:N) and back to back in one file (each followed by --gap
# bytes nobody asks for), against the same bytes as 1 MiB requests,
# through bench/file_blocks (build/bin/file_blocks).
#
# For each op (read: file -> memory, write: memory -> file), --repeat runs of
# the helper, each with --rounds interleaved rounds (block request, 1 MiB
# requests); with --before BIN (a file_blocks built from another tree, or
# the same one with --before-set KEY=VALUE) that binary's runs are
# interleaved with these. Prints, per op and binary, the median GB/s of the
# block request and of the 1 MiB requests, their ratio, and how many I/Os the
# block request took (the file transport's counters: runs coalesced into
# I/Os, I/Os issued).
#
#   bench/file_blocks.sh [--file PATH] [--blocks 8000] [--bs 32K] [--gap 0]
#                        [--mem-offset 0] [--ops "read write"] [--rounds 5] [--repeat 3]
#                        [--location cpu|cuda:N] [--set KEY=VALUE]...
#                        [--before BIN] [--before-set KEY=VALUE]...
#                        [--helper BIN]
# --mem-offset B: every block B bytes into its memory slot (unaligned: the
# bounce path). Exit: 0 ok; 1 a run failed (or did not verify); 2 bad
# usage; 77 the helper is missing.
set -euo pipefail

FILE=/var/tmp/hawser-bench/kv.bin
BLOCKS=8000
BS=32K
GAP=0
MEM_OFFSET=0
OPS="read write"
ROUNDS=5
REPEAT=3
LOCATION=cpu
HELPER=""
BEFORE=""
SETS=()
BEFORE_SETS=()

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --file) FILE=$2; shift 2 ;;
    --blocks) BLOCKS=$2; shift 2 ;;
    --bs) BS=$2; shift 2 ;;
    --gap) GAP=$2; shift 2 ;;
    --mem-offset) MEM_OFFSET=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --location) LOCATION=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    --before-set) BEFORE_SETS+=(--set "$2"); shift 2 ;;
    --helper) HELPER=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"  # find_bin, size_bytes
[ -n "$HELPER" ] || HELPER=$(find_bin file_blocks)
[ -n "$HELPER" ] && [ -x "$HELPER" ] || {
  echo "file_blocks not found (cmake --build build --target file_blocks, or --helper BIN)" >&2; exit 77; }
[ ${#BEFORE_SETS[@]} -eq 0 ] || [ -n "$BEFORE" ] || BEFORE=$HELPER
command -v python3 >/dev/null || { echo "python3 is needed to parse JSON" >&2; exit 77; }
mkdir -p "$(dirname "$FILE")"
bs=$(size_bytes "$BS")
gap=$(size_bytes "$GAP")

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
# run NAME BIN [ARGS...]: one helper run, one row "NAME OP gbps mib ratio runs ios".
run() {
  local name=$1 bin=$2 op=$3 out
  shift 3
  out=$("$bin" --file "$FILE" --blocks "$BLOCKS" --block-size "$bs" --gap "$gap" --op "$op" --rounds "$ROUNDS" \
    --mem-offset "$MEM_OFFSET" --location "$LOCATION" "$@") || { echo "$name $op: the helper failed" >&2; exit 1; }
  python3 - "$name" "$op" "$out" >>"$rows" <<'EOF'
import json, sys
name, op, out = sys.argv[1], sys.argv[2], sys.argv[3].strip().splitlines()[-1]
d = json.loads(out)
if not d["verified"]:
    sys.exit(f"{name} {op}: the bytes did not verify")
c = d["per_block_request"]
print(name, op, d["block_gbps"], d["mib_requests_gbps"], d["ratio"], c.get("coalesced_runs", 0),
      c.get("uring_ops", 0) + c.get("posix_ops", 0) + c.get("cufile_ops", 0))
EOF
}

for op in $OPS; do
  for r in $(seq "$REPEAT"); do
    # Alternate which goes first.
    if [ -n "$BEFORE" ] && [ $((r % 2)) -eq 1 ]; then run before "$BEFORE" "$op" ${BEFORE_SETS[@]+"${BEFORE_SETS[@]}"}; fi
    run after "$HELPER" "$op" ${SETS[@]+"${SETS[@]}"}
    if [ -n "$BEFORE" ] && [ $((r % 2)) -eq 0 ]; then run before "$BEFORE" "$op" ${BEFORE_SETS[@]+"${BEFORE_SETS[@]}"}; fi
  done
done

python3 - "$rows" "$here/bench" "$BLOCKS" "$bs" "$gap" "$LOCATION" "$MEM_OFFSET" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import row_medians
rows = open(sys.argv[1]).read().split("\n")
rows = [r for r in rows if r.strip()]
print(f"{sys.argv[3]} blocks of {sys.argv[4]} B, gap {sys.argv[5]} B, local {sys.argv[6]} (+{sys.argv[7]} B): "
      f"medians of {len(rows)} runs")
print(f"{'binary':8} {'op':6} {'block GB/s':>10} {'1MiB GB/s':>10} {'ratio':>6} {'runs coalesced':>15} {'I/Os':>6}")
for (name, op), m in row_medians.groups(rows):
    print(f"{name:8} {op:6} {m(2):10.3f} {m(3):10.3f} {m(4):6.2f} {m(5):15.0f} {m(6):6.0f}")
EOF
