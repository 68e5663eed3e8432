#!/usr/bin/env bash
# Whose pages memcpy runs on: bench/memcpy_rate.cpp with the target a memfd
# of its own (as shm_mechanisms.sh's baseline), a memfd another process
# made and filled (python, 16 MiB: with ones, with random bytes, and with
# ones after madvise(MADV_HUGEPAGE), as hawser serve does), and the
# memory of a `hawser serve --host-memory shared` (allocateHostMemory's
# memfd; as shm_mechanisms.sh starts it, its memory zeroed, and again with
# --fill-seed: pattern bytes), each through
# /proc/PID/fd. Rounds interleave the four; every round starts the other
# processes anew. Prints each variant's GB/s per round and the median of
# each round's ratio to the own-memfd run. Written to ask whether the
# serve's pages are slower for memcpy itself (docs/shm.md, runs 42-43).
#
# Usage: bench/memfd_placement.sh   (from the repository root)
# Environment: HAWSER, CXX, BLOCK (64K), BATCH (16), THREADS (4), OPS
# ("read write"), ROUNDS (7), DURATION (1), PORT (17890).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
find_hawser
BLOCK=$(size_bytes "${BLOCK:-64K}") BATCH=${BATCH:-16} THREADS=${THREADS:-4}
OPS=${OPS:-"read write"} ROUNDS=${ROUNDS:-7} DURATION=${DURATION:-1} PORT=${PORT:-17890}
SOURCE=$((BLOCK * BATCH * THREADS))
work=$(mktemp -d /tmp/hawser-memfd-XXXXXX)
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop; rm -rf "$work"' EXIT
"${CXX:-c++}" -O2 -std=c++17 -pthread -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp"

helper() {  # BYTES [huge|random]: a process holding a memfd it filled (with ones; random bytes)
  python3 -c '
import mmap, os, sys, time
n = int(sys.argv[1]); fd = os.memfd_create("placement-" + sys.argv[1]); os.ftruncate(fd, n)
m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
if sys.argv[2] == "huge": m.madvise(mmap.MADV_HUGEPAGE)
m.write(os.urandom(n) if sys.argv[2] == "random" else b"\1" * n)
print("ready", flush=True); time.sleep(3600)' "$1" "${2:-}" >/dev/null &
  pids+=($!)
}
echo "host: $(nproc) cores, $(uname -r); block $BLOCK x $BATCH, $THREADS threads, working set $SOURCE a side"
for op in $OPS; do
  mode=local-thp; [[ $op == write ]] && mode=local-thp-write
  own=() pyr=() py16=() pyh=() srv=() srf=()
  for _ in $(seq "$ROUNDS"); do
    stop
    helper $((16 << 20)) random; pr=${pids[-1]}
    helper $((16 << 20)); p16=${pids[-1]}
    helper $((16 << 20)) huge; ph=${pids[-1]}
    "$HAWSER" serve --listen "127.0.0.1:$PORT" --memory 16M --host-memory shared >"$work/serve.log" 2>&1 &
    pids+=($!); ps=${pids[-1]}
    "$HAWSER" serve --listen "127.0.0.1:$((PORT + 1))" --memory 16M --host-memory shared --fill-seed 7 \
      >"$work/serve-filled.log" 2>&1 &
    pids+=($!); pf=${pids[-1]}
    for _ in $(seq 200); do grep -q '^ready' "$work/serve.log" && grep -q '^ready' "$work/serve-filled.log" && break
      sleep 0.05; done
    run() { "$work/memcpy_rate" "$BLOCK" "$BATCH" "$THREADS" "$DURATION" "$SOURCE" "$mode" "$@"; }
    own+=("$(run)")
    pyr+=("$(run "$(memfd_of "$pr" placement-)")")
    py16+=("$(run "$(memfd_of "$p16" placement-)")")
    pyh+=("$(run "$(memfd_of "$ph" placement-)")")
    srv+=("$(run "$(memfd_of "$ps" hawser-host-)")")
    srf+=("$(run "$(memfd_of "$pf" hawser-host-)")")
  done
  python3 - "$op" "${own[*]}" "${pyr[*]}" "${py16[*]}" "${pyh[*]}" "${srv[*]}" "${srf[*]}" <<'PY'
import statistics, sys
op = sys.argv[1]
own, pyr, py16, pyh, srv, srf = ([float(x) for x in a.split()] for a in sys.argv[2:8])
for name, v in (("own memfd", own), ("python 16M random", pyr), ("python 16 MiB", py16), ("python 16M huge", pyh),
                ("hawser serve", srv), ("serve filled", srf)):
    r = statistics.median(x / o for x, o in zip(v, own))
    print("%-5s %-14s median %7.2f GB/s  / own:r %.2f  | %s" % (op, name, statistics.median(v), r,
          " ".join("%.1f" % x for x in v)))
PY
done
