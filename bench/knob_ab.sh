#!/usr/bin/env bash
# One `hawser bench` run under several settings, interleaved: for each of
# ROUNDS rounds, every setting in turn gets a fresh `hawser serve` and one
# bench run; then the medians. For A/B of a knob on a noisy machine, where
# two runs minutes apart differ by more than the change being measured.
#
# Usage: bench/knob_ab.sh SETTING...           (from the repository root)
#   SETTING  space-separated HAWSER_* assignments, quoted as one argument;
#            "-" for the defaults. Example:
#            bench/knob_ab.sh - "HAWSER_TCP_HOME_CONNECTIONS=false"
#            HAWSER_BIN=PATH in a setting runs that hawser binary (serve and
#            bench) instead: an A/B of two builds, e.g.
#            bench/knob_ab.sh HAWSER_BIN=/tmp/hawser-before HAWSER_BIN=build/bin/hawser
# Environment (all optional):
#   HAWSER     path of the hawser binary  (default: build/bin/hawser, then build-*/bin/hawser)
#   OP         read or write              (default read)
#   BLOCK      block size                 (default 64K)
#   BATCH      requests per batch         (default 32)
#   DEPTH      batches in flight per thread (default 2)
#   THREADS    bench threads              (default 2)
#   DURATION   seconds per run            (default 3)
#   ROUNDS     interleaved rounds         (default 5)
#   TRANSPORT  HAWSER_TRANSPORT of both sides (default tcp)
#   PORT       hawser serve port          (default 17960)
# Prints each round, then per setting: median GB/s (10^9 bytes/s) and CPU
# seconds per GB of bench + serve over the timed run.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
[ $# -ge 1 ] || { sed -n '7,11p' "$0" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
OP=${OP:-read}
BLOCK=${BLOCK:-64K}
BATCH=${BATCH:-32}
DEPTH=${DEPTH:-2}
THREADS=${THREADS:-2}
DURATION=${DURATION:-3}
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-17960}
for spec in "$@"; do
  for kv in $spec; do
    [[ "$kv" == "-" || "$kv" == HAWSER_*=* ]] || { echo "not a HAWSER_* assignment: '$kv'" >&2; exit 2; }
    if [[ "$kv" == HAWSER_BIN=* && ! -x "${kv#HAWSER_BIN=}" ]]; then
      echo "HAWSER_BIN: '${kv#HAWSER_BIN=}' is not an executable" >&2; exit 2
    fi
  done
done

bench_work knob-ab
# One run under SETTING: prints "GB/s cpu_per_GB" (nothing if it failed; it
# runs in a subshell, so its exports and exits stay there).
run_one() {
  local kv
  export HAWSER_TRANSPORT=${TRANSPORT:-tcp}
  for kv in $1; do
    case "$kv" in
      -) ;;
      HAWSER_BIN=*) HAWSER=${kv#HAWSER_BIN=} ;;
      *) export "${kv?}" ;;
    esac
  done
  start_serve "$PORT" 1G "$work/serve.log"
  "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$OP" --block-size "$BLOCK" --batch-size "$BATCH" \
    --depth "$DEPTH" --threads "$THREADS" --seconds "$DURATION" --cpu-pid "$serve_pid" --json >"$work/bench.out" \
    2>"$work/bench.err" ||
    { kill "$serve_pid"; echo "hawser bench failed under '$1':" >&2; cat "$work/bench.err" >&2; exit 1; }
  kill "$serve_pid"
  wait "$serve_pid" 2>/dev/null || true
  local carrier=$HAWSER_TRANSPORT
  [ "$carrier" = auto ] && carrier=-  # whichever the engine picks
  python3 "$here/bench/bench_result.py" "$work/bench.out" "$carrier" gbps cpu_per_gb
}

echo "hawser: $HAWSER"
host_line
echo "bench --op $OP --block-size $BLOCK --batch-size $BATCH --depth $DEPTH --threads $THREADS --seconds $DURATION" \
     "| transport ${TRANSPORT:-tcp} | $ROUNDS rounds"
rows=()
for r in $(seq "$ROUNDS"); do
  for i in $(seq $#); do
    spec=${!i}
    read -r g cpu < <(run_one "$spec") || true
    [ -n "${cpu:-}" ] || { echo "round $r under '$spec' failed (above)" >&2; exit 1; }
    printf 'round %s  %-50s %7s GB/s  %s cpu s/GB\n' "$r" "$spec" "$g" "$cpu"
    rows+=("$i x $g $cpu")
  done
done
echo
echo "medians:"
PYTHONPATH="$here/bench" python3 - "$@" -- "${rows[@]}" <<'PY'
import sys
from row_medians import groups
args = sys.argv[1:]
cut = args.index("--")
specs, rows = args[:cut], args[cut + 1:]
for (i, _), m in groups(rows):
    print(f"  {specs[int(i) - 1]:<50} {m(2):7.3f} GB/s  {m(3):.3f} cpu s/GB")
PY
