#!/usr/bin/env bash
# One session's work on the lent GPU machine (the `device` tool's H200: no
# Debian packages, no network), in few calls: built here, carried there.
#
#   here:  bash scripts/device_run.sh pack          builds Release, packs .device (scripts/gpu_bundle.sh)
#                                                  and .device-py (scripts/gpu_python.sh pack) into
#                                                  .carry/bundle.tar.xz (gitignored; carry ".carry");
#                                                  BASE=PATH also carries that hawser binary (an
#                                                  earlier build, same libraries) for the shm stage's
#                                                  A/B of the two builds
#   there: bash scripts/device_run.sh check         the GPU check of this tree: every tests/gpu program
#                                                  (scripts/gpu_test.sh), the nvlink KV-layout case and
#                                                  device_memory_test repeated (REPEAT_KV, REPEAT_DM),
#                                                  the Python suite with the GPU cases required, and
#                                                  bench/kv.sh on shm, nvlink, tcp_gpu and file_gpu
#                                                  (KV_SIZES, KV_ROUNDS); about 300 s
#          bash scripts/device_run.sh shm           shm's mechanisms against memcpy on that host's
#                                                  cores (issue 29's aims): bench/shm_mechanisms.sh
#                                                  over 16 cells (SAME_PAGES=1), the warm four-thread 64K cells again
#                                                  with WARM4_REPEAT (9) rounds, the carried BASE build
#                                                  against this one (bench/knob_ab.sh, four-thread
#                                                  batches; with RECYCLE_AB=1 also batch.recycle off
#                                                  against on; with INLINE_AB=1 shm.inline_bytes 1M
#                                                  against 0 for 64K x 16 four-thread writes),
#                                                  bench/shm_batch_cost.sh; about 480 s (timeout_s 600)
#          bash scripts/device_run.sh shm-edge      the warm four-thread cells against memcpy on the
#                                                  serve's own pages too (shm_mechanisms.sh SAME_PAGES=1,
#                                                  shared mappings only): EDGE_REPEAT (9) rounds of 64K x 16
#                                                  and 1M x 1, then working sets of half and twice a
#                                                  core's L2, one thread at its L2, and 3-second runs;
#                                                  about 420 s
#          bash scripts/device_run.sh placement     whose pages memcpy runs on (bench/memfd_placement.sh:
#                                                  its own memfd, python's, allocateHostMemory's without
#                                                  an engine, two serves'), with where each target's
#                                                  pages lie; 64K x 16 and 1M x 1 four-thread, 64K x 8
#                                                  four-thread (in the L2); and what the guest's memory
#                                                  goes through (KSM, balloon, free page reporting,
#                                                  /proc/vmstat around the runs); about 330 s
#          bash scripts/device_run.sh pages         allocateHostMemory's huge pages (base/huge_pages.h) on
#                                                  that host: memfd_placement.sh (own memfd on huge pages
#                                                  and on small ones, python's, the allocator's, two
#                                                  serves'), the warm four-thread cells against memcpy
#                                                  (SAME_PAGES=1), shm_batch_cost.sh, and each carried
#                                                  .carry/*-hawser build against this one (knob_ab.sh:
#                                                  256 B x 16 and 64K x 16, four threads, BUILD_ROUNDS
#                                                  (5)); about 300 s with PLACE_ROUNDS=3 WARM4_REPEAT=3
#          bash scripts/device_run.sh direct        the cell at the L2's edge with transferSync moved at once:
#                                                  bench/l2_edge.sh ENGINE=1 (memcpy and the engine, and
#                                                  the carried BASE build, in the same L2_ROUNDS (9)
#                                                  rounds, working sets of half and once the L2), the
#                                                  two builds on 64K x 16 and 1M x 1 (four and eight
#                                                  threads; knob_ab.sh, BUILD_ROUNDS (5)), the
#                                                  warm four-thread cells of 64K and 1M, reads and writes
#                                                  (shm_mechanisms.sh SAME_PAGES=1, WARM4_REPEAT (5)), one
#                                                  thread at its L2, then bench/shm_batch_cost.sh; about 400 s
#          bash scripts/device_run.sh aims          issue 29's aims at the L2's edge, on a quiet host only:
#                                                  memcpy's 64K x 16 four-thread rate first (3 runs, up
#                                                  to GATE_TRIES (4) tries 5 s apart; a median below
#                                                  GATE_GBPS (145) in all: exit 3, the host is busy),
#                                                  then 64K x 16 and 1M x 1, four threads, reads and
#                                                  writes, shared mappings and (AIMS_CMA=1, the default)
#                                                  cross-memory attach (shm_mechanisms.sh SAME_PAGES=1,
#                                                  AIMS_REPEAT (9)), one thread at its L2 (5 rounds),
#                                                  l2_edge.sh ENGINE=1 with the carried BASE build (7
#                                                  rounds) and shm_batch_cost.sh (5 rounds); about 350 s
#          bash scripts/device_run.sh l2            what memcpy itself loses where its data fills the L2 when
#                                                  N other cache lines are touched a block (bench/l2_edge.sh:
#                                                  half, once and twice the L2, N 0-32 written, L2_ROUNDS (5)
#                                                  rounds; its KINDS, SETS, TOUCH and ENGINE pass through: KINDS="w r x"
#                                                  also reads and executes them, ENGINE=1 runs hawser bench
#                                                  in the same rounds); about 130 s
# Each stage there unpacks the bundle when .device is missing and leaves its
# logs as one archive under $OUT (logs-STAGE.tgz: the tool brings back at
# most 8 files), rewritten after every step, with a summary at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-}
out=${OUT:-device-logs}

unpack() {
  [ -d .device ] && return 0
  [ -f .carry/bundle.tar.xz ] || { echo "device_run: no .device and no .carry/bundle.tar.xz (run pack here first)" >&2; exit 2; }
  tar -xJf .carry/bundle.tar.xz
  echo "device_run: bundle of $(cat .carry/BUNDLE 2>/dev/null || echo '?'), tree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
}

# The bundle's programs and libraries for every step (and the tests' child
# processes: HAWSER_TEST_BIN); its logs in a new directory $logs.
ready() {  # STAGE
  unpack
  logs=$(mktemp -d "/tmp/device-$1-XXXXXX")/$1
  mkdir -p "$logs"
  export NCCL_NVLS_ENABLE=0  # never NVLink multicast
  export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export HAWSER=$PWD/.device/bin/hawser HAWSER_TEST_BIN=$PWD/.device/bin/hawser
  {
    lscpu; nproc; uptime
    # What a guest's fixed costs depend on: its clock source (without a vDSO
    # fast path every clock read is a system call) and huge pages.
    for f in /sys/devices/system/clocksource/clocksource0/current_clocksource \
      /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/shmem_enabled; do
      echo "$f: $(cat "$f" 2>/dev/null || echo '?')"
    done
    c++ -O2 -std=c++17 -pthread -o "$logs/clock_cost" bench/clock_cost.cpp && "$logs/clock_cost" && rm -f "$logs/clock_cost"
  } > "$logs/host.txt" 2>&1
}

# Runs "$@" with its output in $logs/NAME.log and on stdout; records its exit status.
declare -a results=()
failed=0
step() {  # NAME CMD...
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name =="
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || failed=1
  results+=("$(printf '%-24s exit %3d  %4d s' "$name" "$rc" $((SECONDS - t0)))")
  pack_logs  # after every step: a call cut off at its limit still brings back what ran
}

pack_logs() {
  printf '  %s\n' "${results[@]}" > "$logs/summary.txt"
  mkdir -p "$out"
  tar -czf "$out/logs-$stage.tgz" -C "$(dirname "$logs")" "$(basename "$logs")"
}

finish() {
  echo "== device_run $stage =="
  cat "$logs/summary.txt"
  echo "logs: $out/logs-$stage.tgz"
  exit $failed
}

case $stage in
  pack)
    set -e
    bash scripts/build.sh release
    bash scripts/gpu_bundle.sh build .device
    bash scripts/gpu_python.sh pack build .device-py
    mkdir -p .carry
    tar -cf - .device .device-py | xz -T2 -4 > .carry/bundle.tar.xz
    git rev-parse --short HEAD > .carry/BUNDLE
    rm -f .carry/base-hawser
    if [ -n "${BASE:-}" ]; then
      strip -o .carry/base-hawser "$BASE"
      echo "device_run: BASE $BASE carried as .carry/base-hawser" >&2
    fi
    git status --porcelain --untracked-files=no | grep -q . && echo "device_run: the tree has uncommitted changes" >&2
    du -sh .carry/bundle.tar.xz
    ;;
  check)
    ready check
    step gpu_tests env LOG_DIR="$logs/gpu" bash scripts/gpu_test.sh .device
    step nvlink_kv_repeat .device/bin/nvlink_test --gtest_color=no --gtest_brief=1 \
      --gtest_filter='*bench_kv_layout*' --gtest_repeat="${REPEAT_KV:-8}"
    step device_memory_repeat .device/bin/device_memory_test --gtest_color=no --gtest_brief=1 \
      --gtest_repeat="${REPEAT_DM:-20}"
    step python env OUT="$logs/python" bash scripts/gpu_python.sh run .device-py
    step kv_bench env SIZES="${KV_SIZES:-16K 64K}" ROUNDS="${KV_ROUNDS:-3}" \
      TRANSPORTS="shm nvlink tcp_gpu file_gpu" bash bench/kv.sh
    finish
    ;;
  shm)
    ready shm
    ab() {  # ROUNDS BLOCK BATCH THREADS OP SETTING...
      local rounds=$1 block=$2 batch=$3 threads=$4 op=$5
      shift 5
      env DURATION=1 ROUNDS="$rounds" TRANSPORT=shm DEPTH=1 BLOCK="$block" BATCH="$batch" THREADS="$threads" \
        OP="$op" bash bench/knob_ab.sh "$@"
    }
    # The aims first (a call is cut off at 600 s), then what explains them.
    # SAME_PAGES: memcpy on the serve's own pages as well (see shm-edge).
    step mechanisms env SAME_PAGES=1 BLOCKS="64K 1M" SETS="warm:4M cold:64M" THREADS="1 4" DURATION=1 REPEAT=3 \
      bash bench/shm_mechanisms.sh
    step mechanisms_warm4 env SAME_PAGES=1 BLOCKS="64K" SETS="warm:4M" THREADS=4 DURATION=1 \
      REPEAT="${WARM4_REPEAT:-9}" PORT=17870 bash bench/shm_mechanisms.sh
    if [ "${INLINE_AB:-0}" = 1 ]; then  # the submitter copying its 1 MiB itself, or with the copy threads
      step inline_64Kx16_t4_write ab 7 64K 16 4 write "HAWSER_SHM_THREADS=4" \
        "HAWSER_SHM_THREADS=4 HAWSER_SHM_INLINE_BYTES=0"
    fi
    if [ -f .carry/base-hawser ]; then
      chmod +x .carry/base-hawser
      builds=("HAWSER_BIN=$PWD/.carry/base-hawser" "HAWSER_BIN=$HAWSER")
      step base_64Kx16_t4_write ab 9 64K 16 4 write "${builds[@]}"
      step base_64Kx16_t4_read ab 9 64K 16 4 read "${builds[@]}"
      step base_256x16_t4 ab 7 256 16 4 read "${builds[@]}"
    fi
    if [ "${RECYCLE_AB:-0}" = 1 ]; then
      step recycle_64Kx16_t4_write ab 7 64K 16 4 write HAWSER_BATCH_RECYCLE=false HAWSER_BATCH_RECYCLE=true
      step recycle_256x16_t4 ab 7 256 16 4 read HAWSER_BATCH_RECYCLE=false HAWSER_BATCH_RECYCLE=true
    fi
    step batch_cost env ROUNDS=3 bash bench/shm_batch_cost.sh
    finish
    ;;
  shm-edge)
    ready shm-edge
    # Is the shortfall of the warm four-thread cells (1 MiB a side a thread:
    # the core's 2 MiB L2) the engine's, or where the target's pages fall?
    # SAME_PAGES=1 also runs memcpy on the serve's own pages; then the
    # working set either side of the L2, one thread at it, and longer runs.
    edge() { env CMA=0 SAME_PAGES=1 THREADS=4 DURATION=1 "$@" bash bench/shm_mechanisms.sh; }
    step edge_warm4 edge BLOCKS="64K 1M" SETS=warm:4M REPEAT="${EDGE_REPEAT:-9}"
    step edge_sizes edge BLOCKS=64K SETS="half:2M twice:8M" REPEAT=5 PORT=17850
    step edge_one_thread edge BLOCKS=64K SETS=l2:1M THREADS=1 REPEAT=5 PORT=17860
    step edge_3s edge BLOCKS=64K SETS=warm:4M DURATION=3 REPEAT=3 PORT=17870
    finish
    ;;
  pages)
    ready pages
    # The builds first: a call cut off at its limit keeps what ran.
    builds=()
    for b in .carry/*-hawser; do
      [ -f "$b" ] && chmod +x "$b" && builds+=("HAWSER_BIN=$PWD/$b")
    done
    if [ ${#builds[@]} -gt 0 ]; then
      builds+=("HAWSER_BIN=$HAWSER")
      for cell in "256 16 read" "64K 16 write"; do
        set -- $cell
        step "builds_${1}x${2}_t4_$3" env DURATION=1 ROUNDS="${BUILD_ROUNDS:-5}" TRANSPORT=shm DEPTH=1 BLOCK="$1" BATCH="$2" THREADS=4 \
          OP="$3" bash bench/knob_ab.sh "${builds[@]}"
      done
    fi
    step mechanisms_warm4 env SAME_PAGES=1 CMA=0 BLOCKS="64K 1M" SETS="warm:4M" THREADS=4 DURATION=1 \
      REPEAT="${WARM4_REPEAT:-5}" bash bench/shm_mechanisms.sh
    step place_64Kx16_t4 env ROUNDS="${PLACE_ROUNDS:-5}" OPS=write bash bench/memfd_placement.sh
    step batch_cost env ROUNDS=3 bash bench/shm_batch_cost.sh
    pack_logs
    finish
    ;;
  direct)
    ready direct
    base=()
    [ -f .carry/base-hawser ] && chmod +x .carry/base-hawser && base=(BASE_HAWSER="$PWD/.carry/base-hawser")
    step l2_engine env "${base[@]}" ENGINE=1 TOUCH=0 SETS="once half" ROUNDS="${L2_ROUNDS:-9}" bash bench/l2_edge.sh
    if [ ${#base[@]} -gt 0 ]; then  # the two builds on the cells moved at once, reads, in the same rounds
      for cell in "64K 16 4" "1M 1 4" "1M 1 8"; do
        set -- $cell
        step "builds_${1}x${2}_t$3" env DURATION=1 ROUNDS="${BUILD_ROUNDS:-5}" TRANSPORT=shm DEPTH=1 BLOCK="$1" \
          BATCH="$2" THREADS="$3" OP=read bash bench/knob_ab.sh "HAWSER_BIN=$PWD/.carry/base-hawser" "HAWSER_BIN=$HAWSER"
      done
    fi
    step mechanisms_warm4 env SAME_PAGES=1 CMA=0 BLOCKS="64K 1M" SETS="warm:4M" THREADS=4 DURATION=1 \
      REPEAT="${WARM4_REPEAT:-5}" PORT=17870 bash bench/shm_mechanisms.sh
    step one_thread_l2 env SAME_PAGES=1 CMA=0 BLOCKS=64K SETS="l2:1M" THREADS=1 DURATION=1 \
      REPEAT="${WARM4_REPEAT:-5}" PORT=17880 bash bench/shm_mechanisms.sh
    step batch_cost env ROUNDS="${COST_ROUNDS:-3}" bash bench/shm_batch_cost.sh
    finish
    ;;
  aims)
    ready aims
    c++ -O2 -std=c++17 -pthread -Isrc -o "$logs/memcpy_rate" bench/memcpy_rate.cpp src/base/huge_pages.cpp
    gate() {  # memcpy's 64K x 16 four-thread rate at the L2's edge, 3 runs; busy below GATE_GBPS
      # tried up to GATE_TRIES (4) times, 5 s apart, until one passes (a neighbour's burst may end)
      local r try
      for try in $(seq "${GATE_TRIES:-4}"); do
        [ "$try" = 1 ] || sleep 5
        r=()
        for _ in 1 2 3; do r+=("$("$logs/memcpy_rate" 65536 16 4 1 $((65536 * 16 * 4)) local-thp)"); done
        echo "try $try: memcpy 64K x 16, four threads: ${r[*]} GB/s"
        python3 -c "import statistics,sys; m=statistics.median(map(float,sys.argv[2:])); print('median', m); sys.exit(0 if m >= float(sys.argv[1]) else 3)" \
          "${GATE_GBPS:-145}" "${r[@]}" && return 0
      done
      return 3
    }
    step gate gate
    if [ "$failed" != 0 ]; then
      echo "device_run aims: the host is busy (memcpy below ${GATE_GBPS:-145} GB/s); nothing else run"
      finish
    fi
    step aims_warm4 env SAME_PAGES=1 CMA="${AIMS_CMA:-1}" BLOCKS="64K 1M" SETS="warm:4M" THREADS=4 DURATION=1 \
      REPEAT="${AIMS_REPEAT:-9}" PORT=17870 bash bench/shm_mechanisms.sh
    step aims_one_thread_l2 env SAME_PAGES=1 CMA=0 BLOCKS=64K SETS="l2:1M" THREADS=1 DURATION=1 \
      REPEAT=5 PORT=17880 bash bench/shm_mechanisms.sh
    base=()
    [ -f .carry/base-hawser ] && chmod +x .carry/base-hawser && base=(BASE_HAWSER="$PWD/.carry/base-hawser")
    step aims_l2_engine env "${base[@]}" ENGINE=1 TOUCH=0 SETS="once" ROUNDS=7 bash bench/l2_edge.sh
    step aims_batch_cost env ROUNDS=5 bash bench/shm_batch_cost.sh
    finish
    ;;
  l2)
    ready l2
    step l2_edge env ROUNDS="${L2_ROUNDS:-5}" bash bench/l2_edge.sh
    finish
    ;;
  placement)
    ready placement
    {
      for f in /sys/kernel/mm/ksm/run /sys/kernel/mm/ksm/pages_sharing /sys/kernel/mm/ksm/use_zero_pages \
        /proc/sys/vm/nr_hugepages /proc/sys/kernel/numa_balancing /sys/kernel/mm/transparent_hugepage/defrag; do
        echo "$f: $(cat "$f" 2>/dev/null || echo '?')"
      done
      echo "virtio drivers: $(ls /sys/bus/virtio/drivers 2>/dev/null | tr '\n' ' ')"
      grep -h . /sys/bus/virtio/devices/*/features 2>/dev/null | head -5
      dmesg 2>/dev/null | grep -iE 'balloon|page.report|hugetlb|kvm-clock|hypervisor' | head -20
      cat /proc/buddyinfo
    } > "$logs/memory.txt" 2>&1
    grep -E '^(thp_|pgfault|pgalloc|pgfree|compact_|numa_)' /proc/vmstat > "$logs/vmstat-before.txt"
    step place_64Kx16_t4 env ROUNDS="${PLACE_ROUNDS:-9}" bash bench/memfd_placement.sh
    step place_1Mx1_t4 env BLOCK=1M BATCH=1 ROUNDS=5 PORT=17900 bash bench/memfd_placement.sh
    step place_64Kx8_t4 env BATCH=8 ROUNDS=5 PORT=17910 bash bench/memfd_placement.sh
    grep -E '^(thp_|pgfault|pgalloc|pgfree|compact_|numa_)' /proc/vmstat > "$logs/vmstat-after.txt"
    pack_logs
    finish
    ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2  # the header above
    exit 2
    ;;
esac
