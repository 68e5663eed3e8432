#!/usr/bin/env bash
# The Python module on a GPU machine whose interpreter this machine lacks
# (the H200 machine: Ubuntu 24.04, Python 3.12, its PyTorch; no network, no
# Debian packages), and the whole pytest suite run there with the GPU tests
# required (HAWSER_TEST_REQUIRE_GPU=1: a case that finds no GPU fails).
#
#   here:  bash scripts/build.sh release hawser_py hawser_cli hawser_softverbs hawser_fake_cuda
#          bash scripts/gpu_python.sh pack [BUILD_DIR] [KIT]     (default build .device-py)
#   there: bash scripts/gpu_python.sh run [KIT]                 (carry KIT; logs in $OUT or ./gpu-python-logs)
#
# pack: the kit the module is built from there, without anything from
#   outside: libhawser.a (the engine, built here), the headers the binding
#   includes (fmt, nlohmann/json; hawser's own come with the tree), the
#   shared libraries the engine loads that are not part of the base system,
#   the generated embedded-sources file, the hawser tool, the software verbs
#   provider (test_serve, the rdma cases) and the stand-in CUDA driver
#   (test_mooncake's stream case), and pytest's pure-Python
#   packages (used there only when its Python has no pytest).
# run: compiles python/*.cpp for that machine's python3 (headers from
#   sysconfig, pybind11 from `python3 -m pybind11 --includes` or CMake's
#   pybind11 config; PYBIND11_INCLUDE=dir overrides), links the kit, and
#   runs python/tests with pytest. PYTHON=... picks the interpreter, CXX the
#   compiler; HAWSER_TEST_REQUIRE_GPU=0 lets the GPU cases skip (a dry run on
#   a machine without one).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true

pack() {
  local build=${1:-build} kit=${2:-.device-py}
  local so
  so=$(ls "$build"/python/hawser*.so 2>/dev/null | head -1)
  [ -n "$so" ] || { echo "gpu_python: no module in $build/python: bash scripts/build.sh release hawser_py" >&2; exit 1; }
  [ -f "$build/libhawser.a" ] || { echo "gpu_python: no $build/libhawser.a" >&2; exit 1; }
  # bin/hawser, lib/: the rdma provider and every library they load beyond the base system;
  # the module loads the same ones (those of libhawser.a).
  ONLY=hawser bash scripts/gpu_bundle.sh "$build" "$kit" >/dev/null
  mkdir -p "$kit/include" "$kit/generated" "$kit/pylib"
  cp "$build/libhawser.a" "$kit/lib/"
  # The stand-in CUDA driver (test_mooncake's *_on_cuda case), where the module's tests look for it.
  if [ -f "$build/tests/libhawser_fake_cuda.so" ]; then
    mkdir -p "$kit/tests"
    cp "$build/tests/libhawser_fake_cuda.so" "$kit/tests/"
  fi
  cp -r /usr/include/fmt /usr/include/nlohmann "$kit/include/"
  cp "$build/python/generated/py_embedded_sources.inc" "$kit/generated/"
  # The libraries the module links by name (its NEEDED entries beyond the base system).
  readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
    grep -Ev '^(libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|ld-linux)' > "$kit/link-libs.txt"
  local l
  while read -r l; do
    [ -f "$kit/lib/$l" ] || { echo "gpu_python: $l is not in the bundle (ldd $so)" >&2; exit 1; }
  done < "$kit/link-libs.txt"
  local p
  for p in _pytest pytest py py.py pluggy iniconfig packaging attr attrs more_itertools; do
    [ -e "/usr/lib/python3/dist-packages/$p" ] && cp -r "/usr/lib/python3/dist-packages/$p" "$kit/pylib/"
  done
  find "$kit/pylib" -name __pycache__ -prune -exec rm -rf {} +
  du -sh "$kit" | awk '{print "gpu_python: kit "$1" in '"$kit"'"}'
}

run() {
  local kit=${1:-.device-py}
  local logs=${OUT:-gpu-python-logs}
  [ -d "$kit/lib" ] || { echo "gpu_python: no kit at $kit (scripts/gpu_python.sh pack here, then carry it)" >&2; exit 1; }
  kit=$(cd "$kit" && pwd)
  mkdir -p "$logs" "$kit/python" "$kit/obj"
  local py=${PYTHON:-python3}
  {
    echo "== machine =="
    uname -a
    "$py" -c 'import sys; print("python", sys.version)'
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())' || true
    "$py" -c 'import numpy; print("numpy", numpy.__version__)' || echo "numpy: not installed (hawser.nixl tests skip)"
    nvidia-smi -L || true
  } 2>&1 | tee "$logs/machine.txt"

  # Compiler flags for this interpreter.
  local pyinc ext pyb
  pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  [ -f "$pyinc/Python.h" ] || { echo "gpu_python: no Python.h in $pyinc (the interpreter's headers are needed)" >&2; exit 1; }
  if [ -n "${PYBIND11_INCLUDE:-}" ]; then
    pyb="-I$pyinc -I$PYBIND11_INCLUDE"
  elif pyb=$("$py" -m pybind11 --includes 2>/dev/null); then
    :
  else
    local cmakedir
    cmakedir=$("$py" -m pybind11 --cmakedir 2>/dev/null || true)
    [ -n "$cmakedir" ] || { echo "gpu_python: pybind11 not found for $py" >&2; exit 1; }
    pyb="-I$pyinc -I$(cd "$cmakedir/../../../include" && pwd)"
  fi
  local version
  version=$(sed -n 's/^project(hawser VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt | head -1)
  local cxx=${CXX:-c++}
  local flags=(-std=c++20 -O2 -fPIC -fvisibility=hidden -DNDEBUG "-DHAWSER_PY_VERSION=\"${version:-0}\""
               $pyb -Iinclude -I"$kit/include" -I"$kit/generated")
  echo "== build ($cxx, $("$cxx" --version | head -1)) =="
  local t0=$SECONDS
  local pids=() src failed=0
  for src in python/*.cpp; do
    "$cxx" "${flags[@]}" -c "$src" -o "$kit/obj/$(basename "$src" .cpp).o" >>"$logs/build.log" 2>&1 &
    pids+=($!)
  done
  for src in "${pids[@]}"; do wait "$src" || failed=1; done
  cat "$logs/build.log"
  [ "$failed" = 0 ] || { echo "gpu_python: compiling failed ($logs/build.log)" >&2; exit 1; }
  local libs=()
  while read -r l; do libs+=("$kit/lib/$l"); done < "$kit/link-libs.txt"
  "$cxx" -shared -o "$kit/python/hawser$ext" "$kit"/obj/*.o "$kit/lib/libhawser.a" "${libs[@]}" -ldl -lpthread \
    -Wl,--exclude-libs,ALL -Wl,-rpath,'$ORIGIN/../lib' 2>&1 | tee -a "$logs/build.log"
  [ -f "$kit/python/hawser$ext" ] || { echo "gpu_python: the module did not link" >&2; exit 1; }
  echo "gpu_python: built $kit/python/hawser$ext in $((SECONDS - t0)) s"

  # The tool and the provider where the tests look (next to the module).
  export HAWSER_BIN="$kit/bin/hawser" HAWSER_SOFTVERBS_LIB="$kit/lib/libhawser_softverbs.so"
  export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$kit/python"
  if ! "$py" -c 'import pytest' 2>/dev/null; then
    export PYTHONPATH="$PYTHONPATH:$kit/pylib"
    echo "gpu_python: this Python has no pytest: using the kit's"
  fi
  export HAWSER_TEST_REQUIRE_GPU=${HAWSER_TEST_REQUIRE_GPU:-1} NCCL_NVLS_ENABLE=0
  "$py" -c 'import hawser, hawser.nixl, hawser.tensors; print("hawser", hawser.__version__, hawser.__file__)' \
    2>&1 | tee -a "$logs/build.log"
  echo "== pytest =="
  set +e
  "$py" -m pytest -q -rs -p no:cacheprovider --junitxml="$logs/pytest.xml" python/tests 2>&1 | tee "$logs/pytest.log"
  local rc=${PIPESTATUS[0]}
  set -e
  echo "gpu_python: pytest exit $rc (log $logs/pytest.log)"
  return "$rc"
}

case "$cmd" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  *) echo "usage: $0 pack [BUILD_DIR] [KIT] | run [KIT]" >&2; exit 2 ;;
esac
