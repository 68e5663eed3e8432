#!/usr/bin/env bash
# Builds hawser. Usage: scripts/build.sh [release|asan] (default release).
# Output: build/ (release) or build-asan/ (Debug + ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  # The Python module is tested against the Release build only.
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DHAWSER_SANITIZE=ON -DHAWSER_WITH_PYTHON=OFF) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
jobs=${HAWSER_BUILD_JOBS:-$(nproc)}
# Build the Python module for Debian's interpreter (the one python3-pytest
# belongs to), whatever python3 comes first on PATH.
[ -x /usr/bin/python3 ] && flags+=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
