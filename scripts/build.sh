#!/usr/bin/env bash
# Builds hawser. Usage: scripts/build.sh [release|asan|tsan] [TARGET...]
#   release  build/       Release (the compiler cmake finds, gcc on Debian):
#                         library, CLI, Python module, bench helpers, tests.
#   asan     build-asan/  clang, AddressSanitizer + UndefinedBehaviorSanitizer,
#                         -O0 with line tables; every test program, and the
#                         libFuzzer targets (build-asan/fuzz/) linked against
#                         the same objects. No Python module, no bench helpers.
#   tsan     build-tsan/  clang, ThreadSanitizer, -O1 with line tables; only
#                         the programs labelled tsan (target tsan_tests) unless
#                         TARGETs are given.
# TARGETs: build only these (default: everything the kind builds).
# Env: HAWSER_BUILD_JOBS (default: the CPUs); HAWSER_TEST_PROGRAMS=OFF leaves
# the test programs out of a release build (scripts/test.sh does: the
# sanitizer build runs them); HAWSER_UNITY=ON compiles each layer's files
# as one unit per 16 files, and HAWSER_PCH=ON gives the test programs one
# precompiled header (scripts/test.sh sets both: a cold build is much
# cheaper; a developer's incremental, ccache-backed build is better without).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
targets=("$@")
flags=()
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release -DHAWSER_TEST_PROGRAMS="${HAWSER_TEST_PROGRAMS:-ON}") ;;
  # The Python module is tested against the Release build only.
  asan)    dir=build-asan
           flags=(-DCMAKE_BUILD_TYPE=Debug -DHAWSER_SANITIZE=address -DHAWSER_WITH_PYTHON=OFF
                  "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O0 -gline-tables-only") ;;
  tsan)    dir=build-tsan
           flags=(-DCMAKE_BUILD_TYPE=Debug -DHAWSER_SANITIZE=thread -DHAWSER_WITH_PYTHON=OFF
                  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only")
           [ ${#targets[@]} -gt 0 ] || targets=(tsan_tests) ;;
  *) echo "usage: $0 [release|asan|tsan] [TARGET...]" >&2; exit 2 ;;
esac
if [ "$kind" != release ]; then
  # The sanitizer builds use clang (libFuzzer is clang's). A build folder
  # configured with another compiler is configured afresh.
  export CC=clang CXX=clang++
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt"; then
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
fi
flags+=(-DCMAKE_UNITY_BUILD="${HAWSER_UNITY:-OFF}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=16
        -DHAWSER_TEST_PCH="${HAWSER_PCH:-OFF}")
jobs=${HAWSER_BUILD_JOBS:-$(nproc)}
# Build the Python module for Debian's interpreter (the one python3-pytest
# belongs to), whatever python3 comes first on PATH.
[ -x /usr/bin/python3 ] && flags+=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$dir" -j "$jobs"
fi
