# Shared by the bench scripts (source it): where the built programs are.
bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# memfd_of PID PREFIX: the /proc/PID/fd entry of that process's memfd whose
# name starts with PREFIX (e.g. hawser-host-, allocateHostMemory's), waiting
# up to 5 s for it; fails the script when there is none.
memfd_of() {
  local f
  for _ in $(seq 100); do
    for f in /proc/"$1"/fd/*; do
      [[ $(readlink "$f" 2>/dev/null) == "/memfd:$2"* ]] && { echo "$f"; return 0; }
    done
    sleep 0.05
  done
  echo "no memfd $2* in /proc/$1/fd" >&2
  exit 1
}

# find_bin NAME: the first executable NAME in build/bin, then build-*/bin; "" if none.
find_bin() {
  local c
  for c in "$bench_root"/build/bin/"$1" "$bench_root"/build-*/bin/"$1"; do
    [[ -x "$c" ]] && { echo "$c"; return; }
  done
  echo ""
}

# size_bytes SIZE: bytes in a size with an optional K/M/G suffix (KiB, MiB, MB,
# ... too): 4K -> 4096, 1M -> 1048576, 512 -> 512.
size_bytes() {
  python3 -c '
import sys
s = sys.argv[1].upper().rstrip("B").rstrip("I")
m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
print(int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s))' "$1"
}

# find_hawser: HAWSER as given, else the built one; exits 2 when there is none.
find_hawser() {
  [[ -n "${HAWSER:-}" ]] || HAWSER=$(find_bin hawser)
  [[ -x "${HAWSER:-}" ]] || { echo "hawser binary not found; set HAWSER=/path/to/hawser" >&2; exit 2; }
}

# wait_ready LOG PID: waits up to 10 s for a line "ready" in LOG; exits 1,
# showing LOG, when none comes or process PID ends first.
wait_ready() {
  local _
  for _ in $(seq 100); do
    grep -q '^ready' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "$1: process $2 did not become ready" >&2
  cat "$1" >&2
  exit 1
}

# start_serve PORT MEMORY LOG [ARG...]: starts `hawser serve` on
# 127.0.0.1:PORT (with the further ARGs) in the background, sets serve_pid,
# waits until it is ready (exits 1 if it is not).
start_serve() {
  local port=$1 memory=$2 log=$3
  shift 3
  "$HAWSER" serve --listen "127.0.0.1:$port" --memory "$memory" "$@" >"$log" 2>&1 &
  serve_pid=$!
  wait_ready "$log" "$serve_pid"
}

# bench_work NAME: makes the scratch folder $work (/tmp/hawser-NAME-XXXXXX)
# and an empty list $pids of background processes; on exit every process in
# pids is killed and waited for and the folder removed.
bench_work() {
  work=$(mktemp -d "/tmp/hawser-$1-XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() {
  bench_cleanup_pids
  rm -rf "$work"
}
# bench_cleanup_pids: kills and waits for every process in pids.
bench_cleanup_pids() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# host_line: one line saying what ran the figures (cores, kernel, load).
host_line() {
  echo "host: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# need_python3: exits 2 unless python3 is there (the scripts read hawser bench's JSON with it).
need_python3() {
  command -v python3 >/dev/null || { echo "python3 is needed to read the JSON results" >&2; exit 2; }
}
