#!/usr/bin/env bash
# The engine's cache footprint: how many distinct cache lines one batch
# touches besides the bytes it moves (code, stacks, heap, statics, the peer's
# table), counted, not timed, so the count is the same on any machine and
# under any load. Where the blocks fill a core's L2, every such line pushes a
# line of the blocks out: bench/l2_edge.sh measures what N lines a block cost
# memcpy itself there (shm's aim at the L2's edge, docs/shm.md).
#
# How: hawser bench (one thread, depth 1: transferSync, or DEPTH batches in flight; shm shared mappings,
# --op OP, --no-verify: no pattern written through the engine first, whose
# one-block batches would pass the marker too) runs under valgrind's lackey, whose trace of every access
# bench/cache_footprint/lines.cpp cuts into batches at the entry of
# EngineImpl::transferSync (EngineImpl::submit with DEPTH > 1; once a batch, whichever way it moves) and reduces to each batch's
# distinct lines; bench/cache_footprint/classify.py sorts them by kind and by the
# mapping they lie in (/proc/PID/maps of the traced process), fits what a
# batch costs whatever its size and what a request adds, over BATCHES, and
# names the function that first wrote (or read) each data line of the
# largest batch size.
# valgrind 3.19 lacks pidfd_open: bench/cache_footprint/pidfd_shim.c answers it
# from outside valgrind. The file transport runs its posix engine (valgrind
# holds its lock over io_uring waits).
#
# Usage: bench/cache_footprint.sh          (from the repository root; 3-4 minutes a batch size on 2 cores)
# Environment (all optional):
#   HAWSER    the hawser binary (default: build/bin/hawser, then build-*/bin/hawser); built
#             with symbols (its EngineImpl::transferSync is the marker)
#   BATCHES   requests a batch, one run each (default "1 16 32")
#   BLOCK     bytes a request (default 64K)
#   OP        read or write (default read)
#   DEPTH     1: transferSync (the default); 2 or more: that many batches in flight a thread
#             (allocateBatchID, submitTransfer, waitTransfer, freeBatchID), cut at EngineImpl::submit
#   KEEP      batches judged a run, after SKIP warm-up ones (defaults 40, 20)
#   PORT      the hawser serve's port (default 17850)
#   CC, CXX   compilers (default cc, c++)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/bench/lib.sh"
find_hawser
need_python3
command -v valgrind >/dev/null || { echo "cache_footprint: valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
CC=${CC:-cc}
CXX=${CXX:-c++}
BATCHES=${BATCHES:-"1 16 32"}
BLOCK=${BLOCK:-64K}
OP=${OP:-read}
KEEP=${KEEP:-40}
SKIP=${SKIP:-20}
PORT=${PORT:-17850}
block=$(size_bytes "$BLOCK")
bench_work cache-footprint
"$CXX" -O2 -std=c++17 -o "$work/lines" "$here/bench/cache_footprint/lines.cpp"
"$CC" -O2 -shared -fPIC -o "$work/pidfd_shim.so" "$here/bench/cache_footprint/pidfd_shim.c" -ldl
"$CC" -O2 -o "$work/pidfd_helper" "$here/bench/cache_footprint/pidfd_helper.c"
# valgrind loads a position-independent program at 0x108000 (checked below).
DEPTH=${DEPTH:-1}
if (( DEPTH > 1 )); then mark=submit pat='10EngineImpl6submitE'; else mark=transferSync pat='10EngineImpl12transferSync'; fi
off=$(nm "$HAWSER" | awk -v p="$pat" '!f && $2 ~ /^[tT]$/ && $3 ~ p {print $1; f = 1}')
[[ -n "$off" ]] || { echo "cache_footprint: $HAWSER has no EngineImpl::$mark symbol (stripped?)" >&2; exit 2; }
base=$((0x108000))
marker=$((base + 0x$off))

start_serve "$PORT" 64M "$work/serve.log" --host-memory shared
pids+=("$serve_pid")

args=()
for b in $BATCHES; do
  total=$(( b * block * (SKIP + KEEP + 5) ))
  # The trace goes through fd 3 to lines; the maps are read while it runs,
  # every copy taken once the peer's memory is mapped kept (a thread's stack
  # is gone from the last ones).
  HAWSER_FILE_ENGINE=posix HAWSER_SHM_THREADS=1 PIDFD_HELPER="$work/pidfd_helper" LD_PRELOAD="$work/pidfd_shim.so" \
    valgrind -q --tool=lackey --trace-mem=yes --log-fd=3 "$HAWSER" bench --target "127.0.0.1:$PORT" --op "$OP" \
    --block-size "$block" --batch-size "$b" --threads 1 --depth "$DEPTH" --total "$total" --json --no-verify \
    3> >("$work/lines" "$marker" "$SKIP" "$KEEP" >"$work/b$b.txt"; echo $? >"$work/b$b.rc") >"$work/b$b.out" 2>"$work/b$b.err" &
  vg=$!
  : >"$work/maps"
  while kill -0 "$vg" 2>/dev/null; do
    if cat "/proc/$vg/maps" >"$work/maps.tmp" 2>/dev/null && grep -q memfd "$work/maps.tmp"; then
      cat "$work/maps.tmp" >>"$work/maps"
    fi
    sleep 2
  done
  wait "$vg" || { echo "cache_footprint: hawser bench under valgrind failed (B=$b)" >&2; tail -20 "$work/b$b.err" >&2; exit 1; }
  for _ in $(seq 100); do [[ -s "$work/b$b.rc" ]] && break; sleep 0.2; done
  rc=$(cat "$work/b$b.rc" 2>/dev/null || echo "?")
  [[ "$rc" == 0 ]] || { echo "cache_footprint: B=$b: the trace had fewer than $((SKIP + KEEP)) batches (lines exit $rc)" >&2; exit 1; }
  [[ -s "$work/maps" ]] || { echo "cache_footprint: no maps of the traced process with the peer's memory mapped" >&2; exit 1; }
  got=$(awk -v b="$(basename "$HAWSER")" '!f && $6 ~ b"$" {print $1; f = 1}' "$work/maps" | cut -d- -f1)
  [[ $((0x$got)) == "$base" ]] || { echo "cache_footprint: valgrind loaded hawser at 0x$got, not $(printf '%#x' $base)" >&2; exit 1; }
  args+=("$b:$work/b$b.txt")
done
echo "hawser: $HAWSER ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')); $OP, $BLOCK blocks, one thread, $( (( DEPTH > 1 )) && echo "depth $DEPTH, submitTransfer" || echo transferSync)"
python3 "$here/bench/cache_footprint/classify.py" "$work/maps" "$HAWSER" "${args[@]}"
