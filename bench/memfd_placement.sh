#!/usr/bin/env bash
# Whose pages memcpy runs on: bench/memcpy_rate.cpp with the target
#   own     a memfd of its own (as shm_mechanisms.sh's baseline), on huge
#           pages as allocateHostMemory's (base/huge_pages.h);
#   small   the same on 4 KiB pages (MEMCPY_RATE_HUGE=0: how
#           allocateHostMemory's were before, host_memory.huge_pages=false);
#   python  a 16 MiB memfd a python process made and filled with ones;
#   alloc   a memfd made with allocateHostMemory's calls and zeroed as
#           hawser serve does, in a small program that starts no engine;
#   serve   a `hawser serve --host-memory shared`'s memory (allocateHostMemory,
#           zeroed, then an engine started and the memory registered);
#   filled  the same with --fill-seed (pattern bytes);
# each through /proc/PID/fd. Every round starts the four holders anew,
# one after another (each filled before the next starts), and runs the
# variants, both in orders rotated by one from the round before (no variant
# always last). Prints each variant's GB/s per round, the median of each
# round's ratio to the own-memfd run and, where page frame numbers can be
# read (root), where the target's pages lay: the median number of
# physically contiguous runs and the load of the fullest of the L2's page
# colours over the mean (memcpy_rate.cpp, MEMCPY_RATE_PAGES; each round's
# GB/s@colours after the |); then the ratios by when the holder started.
# Written to ask why the serve's pages are slower for memcpy itself
# (docs/shm.md, runs 42-46).
#
# Usage: bench/memfd_placement.sh   (from the repository root)
# Environment: HAWSER, CXX, BLOCK (64K), BATCH (16), THREADS (4), OPS
# ("read write"), ROUNDS (7), DURATION (1), PORT (17890), COLORS (32: page
# colours of the L2, 32 for 2 MiB 16-way, 16 for 1 MiB 16-way).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/bench/lib.sh"
find_hawser
BLOCK=$(size_bytes "${BLOCK:-64K}") BATCH=${BATCH:-16} THREADS=${THREADS:-4}
OPS=${OPS:-"read write"} ROUNDS=${ROUNDS:-7} DURATION=${DURATION:-1} PORT=${PORT:-17890}
SOURCE=$((BLOCK * BATCH * THREADS))
bench_work memfd
stop() { bench_cleanup_pids; pids=(); }
"${CXX:-c++}" -O2 -std=c++17 -pthread -I"$here/src" -o "$work/memcpy_rate" "$here/bench/memcpy_rate.cpp" "$here/src/base/huge_pages.cpp"
# allocateHostMemory's calls (base/host_memory.cpp: memfd_create named
# hawser-host-SIZE, ftruncate, mapped and backed by huge pages as
# base/huge_pages.h does), then the serve's madvise and memset, in a process
# that starts no engine (the bundle links the library into its programs:
# there is no libhawser.so to link against).
cat >"$work/alloc.cpp" <<'C'
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "base/huge_pages.h"
int main(int argc, char** argv) {
  size_t n = std::strtoull(argv[1], nullptr, 10);
  char name[64];
  std::snprintf(name, sizeof name, "hawser-host-%zu", n);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) return 1;
  void* p = hawser::huge_pages::mapShared(fd, 0, n, PROT_READ | PROT_WRITE);
  if (p == MAP_FAILED) return 1;
  hawser::huge_pages::collapse(static_cast<char*>(p), n);
  (void)madvise(p, n, MADV_HUGEPAGE);
  std::memset(p, 0, n);
  std::printf("ready\n");
  std::fflush(stdout);
  pause();
  return 0;
}
C
"${CXX:-c++}" -O2 -std=c++17 -I"$here/src" -o "$work/alloc" "$work/alloc.cpp" "$here/src/base/huge_pages.cpp"

python_memfd() {  # BYTES LOG: a process holding a memfd it filled with ones
  python3 -c '
import mmap, os, sys, time
n = int(sys.argv[1]); fd = os.memfd_create("placement-" + sys.argv[1]); os.ftruncate(fd, n)
m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m.write(b"\1" * n)
print("ready", flush=True); time.sleep(3600)' "$1" >"$2" 2>&1 &
  pids+=($!)
  wait_ready "$2" "${pids[-1]}"
}
names=(own small python alloc serve filled)
echo "host: $(nproc) cores, $(uname -r); block $BLOCK x $BATCH, $THREADS threads, working set $SOURCE a side"
for op in $OPS; do
  mode=local-thp; [[ $op == write ]] && mode=local-thp-write
  rm -f "$work"/*.res
  for round in $(seq "$ROUNDS"); do
    stop
    # The four holders start one after another, each ready (its memory
    # filled) before the next, in an order rotated every round: whether
    # a variant's pages are slower because of what it is or because of
    # when it took them from the kernel.
    declare -A file=() pos=()
    holders=(python alloc serve filled)
    for j in 0 1 2 3; do
      h=${holders[$(((j + round) % 4))]}
      pos[$h]=$j
      case $h in
        python) python_memfd $((16 << 20)) "$work/python.log"; file[python]=$(memfd_of "${pids[-1]}" placement-) ;;
        alloc) "$work/alloc" $((16 << 20)) >"$work/alloc.log" 2>&1 &
          pids+=($!); wait_ready "$work/alloc.log" "${pids[-1]}"; file[alloc]=$(memfd_of "${pids[-1]}" hawser-host-) ;;
        serve) start_serve "$PORT" 16M "$work/serve.log" --host-memory shared
          pids+=("$serve_pid"); file[serve]=$(memfd_of "$serve_pid" hawser-host-) ;;
        filled) start_serve "$((PORT + 1))" 16M "$work/filled.log" --host-memory shared --fill-seed 7
          pids+=("$serve_pid"); file[filled]=$(memfd_of "$serve_pid" hawser-host-) ;;
      esac
    done
    file[own]= pos[own]=own file[small]= pos[small]=own
    for i in "${!names[@]}"; do
      v=${names[$(((i + round) % ${#names[@]}))]}
      huge=1; [[ $v == small ]] && huge=0
      MEMCPY_RATE_HUGE=$huge MEMCPY_RATE_PAGES=${COLORS:-32} "$work/memcpy_rate" "$BLOCK" "$BATCH" "$THREADS" "$DURATION" "$SOURCE" "$mode" \
        ${file[$v]:+"${file[$v]}"} | sed "s/\$/ start=${pos[$v]}/" >>"$work/$v.res"
    done
  done
  python3 - "$op" "$work" "${names[@]}" <<'PY'
import statistics, sys
op, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = {}
for n in names:  # a line: GB/s [runs=R colors=X]
    rows[n] = [dict([("gbs", float(l.split()[0]))] + [(k, v if k == "start" else float(v))
                                                       for k, v in (f.split("=") for f in l.split()[1:])])
               for l in open("%s/%s.res" % (work, n))]
own = [r["gbs"] for r in rows["own"]]
for n in names:
    v = rows[n]
    g = [r["gbs"] for r in v]
    ratio = statistics.median(x / o for x, o in zip(g, own))
    where = ""
    if all("runs" in r for r in v):
        where = " runs %4.0f colors %.2f" % (statistics.median(r["runs"] for r in v), statistics.median(r["colors"] for r in v))
    each = " ".join("%.1f" % r["gbs"] + ("@%.2f" % r["colors"] if "colors" in r else "") for r in v)
    print("%-5s %-7s median %7.2f GB/s  / own:r %.2f%s | %s" % (op, n, statistics.median(g), ratio, where, each))
# By when the holder took its pages (0: first started in its round), over every holder.
for p in "0123":
    r = [v["gbs"] / o for n in names[2:] for v, o in zip(rows[n], own) if v["start"] == p]
    if r:
        print("%-5s started %s: median / own:r %.2f over %d runs" % (op, p, statistics.median(r), len(r)))
PY
done
