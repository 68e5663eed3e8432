#!/usr/bin/env bash
# Packs what the GPU tests and benchmarks need to run on a machine that has
# GPUs but none of our build dependencies (scripts/gpu_test.sh runs there):
# the hawser tool, the tests/gpu programs, the bench helpers, and every
# shared library they load that is not part of the base system.
# Usage: scripts/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]   (default build .device)
# ONLY="name ..." keeps just those programs (hawser and signal_sender are always kept). Programs
# and libraries are stripped: the tree that travels to a GPU machine is small.
set -euo pipefail
shopt -s nullglob  # a build without lib/*.so (no softverbs) is fine
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-.device}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=()
for b in "$build"/bin/*; do
  [ -f "$b" ] && [ -x "$b" ] && bins+=("$b")  # hawser and the bench helpers
done
for src in tests/gpu/*_test.cpp; do
  name=$(basename "$src" .cpp)
  [ -x "$build/tests/$name" ] && bins+=("$build/tests/$name")
done
if [ -n "${ONLY:-}" ]; then
  keep=()
  for b in "${bins[@]}"; do
    n=$(basename "$b")
    # signal_sender: the shared suite's signal cases start it from beside hawser.
    [[ $n == hawser || $n == signal_sender || " $ONLY " == *" $n "* ]] && keep+=("$b")
  done
  bins=("${keep[@]}")
fi
cp "${bins[@]}" "$out/bin/"
[ -f "$build/lib/libhawser_softverbs.so" ] && cp "$build/lib/libhawser_softverbs.so" "$out/lib/"
# Libraries of the base system (glibc, the C++ runtime) stay the machine's own.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libresolv)'
for b in "$out"/bin/* "$out"/lib/*.so; do
  ldd "$b" 2>/dev/null | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true
du -sh "$out" | awk '{print "bundle: "$1" in '"$out"'"}'
ls "$out/bin"
