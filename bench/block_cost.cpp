// bench/block_cost.sh's helper: what the caller's thread pays to hand the
// engine N blocks, through the public API, two engines in this process
// (the target's memory and the initiator's are mapped untouched and
// registered: registration faults nothing in).
//
// Modes (one JSON line each):
//   strided   submitStrided of N blocks (stride 2 x block on both sides)
//   list      submitBlocks of N scattered blocks (a list)
//   prepare   prepareBlocks of the same list (the one-time check)
//   post      postPlan of that prepared list
//   requests  the old way: N TransferRequests in one submitTransfer
// CPU time of the call on the calling thread (CLOCK_THREAD_CPUTIME_ID).
// With --file PATH the target is a file segment (file://PATH, made sparse,
// 2 x N x block bytes): the file transport's part of the call instead of a
// memory segment's.
// With --move the batch is waited for (the blocks really move; end-to-end
// cost, e.g. under callgrind); else it is canceled at once and only the
// call is measured.
//
// Usage: block_cost [--mode M] [--blocks N] [--block-size B] [--move 0|1] [--file PATH]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hawser/engine.h"

namespace {

double cpuNow() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

bool check(const hawser::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "block_cost: %s: %s\n", what, s.toString().c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "strided";
  size_t n = 1 << 20, bs = 4096;
  bool move = false;
  std::string file;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") mode = v;
    else if (k == "--blocks") n = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--block-size") bs = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--move") move = v == "1";
    else if (k == "--file") file = v;
    else return std::fprintf(stderr, "usage: %s [--mode strided|list|prepare|post|requests] [--blocks N] "
                                     "[--block-size B] [--move 0|1] [--file PATH]\n", argv[0]), 2;
  }
  using namespace hawser;
  const size_t span = 2 * n * bs;
  auto map = [&] {
    void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  };
  char* tmem = map();
  char* lmem = map();
  if (!tmem || !lmem) return std::fprintf(stderr, "block_cost: cannot map 2 x %zu bytes\n", span), 1;
  TransferEngine target, init;
  if (!check(target.init("p2p", "target", "127.0.0.1", 0), "target init") ||
      !check(init.init("p2p", "init", "127.0.0.1", 0), "init") ||
      !check(target.registerLocalMemory(tmem, span, "cpu:0", true), "register target") ||
      !check(init.registerLocalMemory(lmem, span, "cpu:0", false), "register local"))
    return 1;
  SegmentID seg;
  uint64_t tbase = reinterpret_cast<uint64_t>(tmem);
  if (!file.empty()) {
    // Sparse: nothing is written unless --move 1.
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(span)) != 0)
      return std::fprintf(stderr, "block_cost: cannot make %s of %zu bytes\n", file.c_str(), span), 1;
    ::close(fd);
    if (!check(init.openSegment("file://" + file, seg), "open file segment")) return 1;
    tbase = 0;
  } else if (!check(init.openSegment(target.segmentName(), seg), "open")) {
    return 1;
  }
  // Scattered: block i at a shuffled slot of the remote span.
  std::vector<uint64_t> slot(n);
  for (size_t i = 0; i < n; ++i) slot[i] = 2 * i;
  std::shuffle(slot.begin(), slot.end(), std::mt19937_64(7));
  std::vector<Block> list;
  std::vector<TransferRequest> reqs;
  if (mode == "list" || mode == "prepare" || mode == "post") {
    list.resize(n);
    for (size_t i = 0; i < n; ++i) list[i] = Block{lmem + 2 * i * bs, tbase + slot[i] * bs, bs};
  } else if (mode == "requests") {
    reqs.resize(n);
    for (size_t i = 0; i < n; ++i) reqs[i] = TransferRequest{OpCode::kRead, lmem + 2 * i * bs, seg, tbase + slot[i] * bs, bs};
  } else if (mode != "strided") {
    return std::fprintf(stderr, "block_cost: unknown mode %s\n", mode.c_str()), 2;
  }
  PlanID plan = kInvalidPlan;
  if (mode == "post" && !check(init.prepareBlocks(OpCode::kRead, seg, list, plan), "prepare")) return 1;
  BatchID b;
  if (!check(init.allocateBatchID(mode == "requests" ? n : 1, b), "allocate")) return 1;

  const double c0 = cpuNow();
  Status s;
  if (mode == "strided") s = init.submitStrided(b, OpCode::kRead, seg, {lmem, tbase, bs, 2 * bs, 2 * bs, n});
  else if (mode == "list") s = init.submitBlocks(b, OpCode::kRead, seg, list);
  else if (mode == "prepare") s = init.prepareBlocks(OpCode::kRead, seg, list, plan);
  else if (mode == "post") s = init.postPlan(b, plan);
  else s = init.submitTransfer(b, reqs);
  const double cpu_ms = cpuNow() - c0;
  if (!check(s, mode.c_str())) return 1;
  if (!move) (void)init.cancelTransfer(b);
  auto t0 = std::chrono::steady_clock::now();
  if (!check(init.waitTransfer(b, std::chrono::seconds(600)), "wait")) return 1;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TransferStatus st;
  (void)init.getBatchTransferStatus(b, st);
  uint64_t per_run = 0, window_max = 0;
  for (auto& [k, v] : init.stats().engine) {
    if (k == "block_bytes_per_inflight_run") per_run = v;
    if (k == "block_window_bytes_max_per_task") window_max = v;
  }
  std::printf("{\"mode\":\"%s\",\"blocks\":%zu,\"block_size\":%zu,\"call_cpu_ms\":%.3f,\"cpu_ns_per_block\":%.2f,"
              "\"moved\":%s,\"state\":\"%s\",\"wait_s\":%.3f,\"engine_bytes_per_inflight_run\":%llu,"
              "\"engine_window_bytes_max_per_task\":%llu}\n",
              mode.c_str(), n, bs, cpu_ms, cpu_ms * 1e6 / static_cast<double>(n), move ? "true" : "false",
              std::string(stateName(st.s)).c_str(), wall, static_cast<unsigned long long>(per_run),
              static_cast<unsigned long long>(window_max));
  (void)init.freeBatchID(b);
  if (plan != kInvalidPlan) (void)init.releasePlan(plan);
  return 0;
}
