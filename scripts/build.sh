#!/usr/bin/env bash
# Builds hawser. Usage: scripts/build.sh [release|asan] (default release).
# Output: build/ (release) or build-asan/ (Debug + ASan + UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DHAWSER_SANITIZE=ON) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
jobs=${HAWSER_BUILD_JOBS:-$(nproc)}
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
