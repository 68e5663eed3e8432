#!/usr/bin/env bash
# The GPU tests (tests/gpu, the gpu.* cases) on a machine with GPUs, from a
# bundle made by scripts/gpu_bundle.sh. Prints each program's results and a
# summary; exits non-zero when a case failed. Logs go to $LOG_DIR (default
# $OUT, or ./gpu-logs).
#
# cuFile in compatibility mode (no nvidia-fs) registers a file only when the
# udev database describes its block device; containers and VMs often lack
# /run/udev. hawser never writes system files: this script, on a test
# machine, creates the record for the test directory's device when
# HAWSER_TEST_GPU_UDEV=1 (the default here) and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-.device}
logs=${LOG_DIR:-${OUT:-gpu-logs}}
mkdir -p "$logs"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HAWSER_TEST_BIN="$PWD/$bundle/bin/hawser"
export HAWSER_TEST_SOFTVERBS_LIB="$PWD/$bundle/lib/libhawser_softverbs.so"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast
export HAWSER_TEST_GPU_DIR=${HAWSER_TEST_GPU_DIR:-/var/tmp}
unset HAWSER_TEST_CUDA_DRIVER  # the real driver
# Cases that honour it (nvlink_vmm_test) fail, not skip, where no GPU is found.
export HAWSER_TEST_REQUIRE_GPU=${HAWSER_TEST_REQUIRE_GPU:-1}

nvidia-smi -L 2>&1 | tee "$logs/gpu_info.txt"
nvidia-smi topo -m 2>&1 | tee -a "$logs/gpu_info.txt" || true

if [ "${HAWSER_TEST_GPU_UDEV:-1}" = 1 ]; then
  majmin=$(stat -c '%Hd:%Ld' "$HAWSER_TEST_GPU_DIR")
  rec="/run/udev/data/b$majmin"
  if [ ! -e "$rec" ]; then
    mkdir -p /run/udev/data
    printf 'I:1\nE:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\nE:DEVTYPE=disk\n' \
      "$(stat -f -c %T "$HAWSER_TEST_GPU_DIR")" > "$rec"
    echo "gpu_test: wrote udev record $rec for $HAWSER_TEST_GPU_DIR (test machine only)"
  fi
fi

failed=0
summary=()
for t in "$bundle"/bin/*_test; do
  name=$(basename "$t")
  echo "== $name =="
  "$t" --gtest_color=no 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  # One line per case ends "(N ms)"; gtest's closing lists repeat names without.
  pass=$(grep -c '^\[       OK \] .* ms)$' "$logs/$name.log")
  skip=$(grep -c '^\[  SKIPPED \] .* ms)$' "$logs/$name.log")
  fail=$(grep -c '^\[  FAILED  \] .* ms)$' "$logs/$name.log")
  summary+=("$(printf '%-24s %3d passed %3d skipped %3d failed (exit %d)' "$name" "$pass" "$skip" "$fail" "$rc")")
  [ "$rc" -eq 0 ] || failed=1
done
echo "== gpu tests =="
printf '  %s\n' "${summary[@]}" | tee "$logs/gpu_summary.txt"
exit $failed
