# Shared by the bench scripts (source it): where the built programs are.
bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# find_bin NAME: the first executable NAME in build/bin, then build-*/bin; "" if none.
find_bin() {
  local c
  for c in "$bench_root"/build/bin/"$1" "$bench_root"/build-*/bin/"$1"; do
    [[ -x "$c" ]] && { echo "$c"; return; }
  done
  echo ""
}

# find_hawser: HAWSER as given, else the built one; exits 2 when there is none.
find_hawser() {
  [[ -n "${HAWSER:-}" ]] || HAWSER=$(find_bin hawser)
  [[ -x "${HAWSER:-}" ]] || { echo "hawser binary not found; set HAWSER=/path/to/hawser" >&2; exit 2; }
}
