// `hawser bench --blocks N` (bench_blocks.h).
#include "tools/bench_blocks.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "hawser/config.h"
#include "hawser/engine.h"
#include "tools/bench_common.h"
#include "tools/pattern.h"

namespace hawser::tools {

namespace {

using Clock = std::chrono::steady_clock;

// (Named apart from cmd_bench.cpp's fail(): CI compiles the tools as one unity file.)
int blocksFail(const std::string& what, const Status& s) {
  fmt::print(stderr, "hawser bench: {}: {}\n", what, s.toString());
  return 1;
}

}  // namespace

int runBlockBench(const BlockBenchOpts& o) {
  const auto bs = parseSize(o.block_size);
  if (!bs || *bs == 0) return fmt::print(stderr, "hawser bench: --block-size '{}' is not a size\n", o.block_size), 2;
  if (o.layout != "contiguous" && o.layout != "scattered" && o.layout != "strided")
    return fmt::print(stderr, "hawser bench: --layout must be contiguous, scattered or strided\n"), 2;
  if (o.op != "read" && o.op != "write") return fmt::print(stderr, "hawser bench: --op must be read or write\n"), 2;
  if (o.rounds == 0) return fmt::print(stderr, "hawser bench: --rounds must be >= 1\n"), 2;
  const OpCode op = o.op == "read" ? OpCode::kRead : OpCode::kWrite;
  const uint64_t block = *bs, n = o.blocks, bytes = block * n;
  // The target holds the blocks: contiguous packed, strided every other
  // block, scattered in a shuffled order over twice the space.
  const uint64_t span = o.layout == "contiguous" ? bytes : 2 * bytes;

  TransferEngine engine;
  SegmentID seg;
  std::vector<SegmentBuffer> bufs;
  if (!openBenchTarget(engine, o, seg, bufs)) return 1;
  Status s;
  if (bufs[0].length < span)
    return fmt::print(stderr, "hawser bench: the target's first buffer has {} bytes; --layout {} of {} x {} needs {}\n",
                      bufs[0].length, o.layout, n, block, span),
           2;
  const uint64_t tbase = bufs[0].addr;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return blocksFail("local memory", Status(Code::kInternal, "mmap failed"));
  char* local = static_cast<char*>(mem);
  std::memset(local, 0, bytes);
  if (!(s = engine.registerLocalMemory(local, bytes, "*", false)).ok()) return blocksFail("register local memory", s);

  // Where block i lies at the target (relative to tbase).
  std::vector<uint64_t> where(n);
  for (uint64_t i = 0; i < n; ++i) where[i] = o.layout == "contiguous" ? i * block : 2 * i * block;
  if (o.layout == "scattered") std::shuffle(where.begin(), where.end(), std::mt19937_64(42));
  // The target's bytes: pattern(seed) of their offsets; for writes the local
  // blocks hold pattern(seed ^ 1) of theirs.
  const uint64_t seed = 0x6b6c6f636b73ULL;
  if (!o.no_verify || op == OpCode::kRead) {
    std::vector<char> stage(std::min<uint64_t>(span, 64ull << 20));
    if (!(s = engine.registerLocalMemory(stage.data(), stage.size(), "*", false)).ok()) return blocksFail("register", s);
    for (uint64_t off = 0; off < span; off += stage.size()) {
      const uint64_t len = std::min<uint64_t>(stage.size(), span - off);
      fillPattern(stage.data(), len, seed, off);
      s = engine.transferSync({{OpCode::kWrite, stage.data(), seg, tbase + off, len}}, std::chrono::seconds(120));
      if (!s.ok()) return blocksFail("prepare the target's bytes", s);
    }
    (void)engine.unregisterLocalMemory(stage.data());
  }
  if (op == OpCode::kWrite) fillPattern(local, bytes, seed ^ 1, 0);

  // The block request, prepared once.
  PlanID plan = kInvalidPlan;
  double prepare_s = 0, first_submit_cpu = 0;
  std::vector<Block> list;
  auto t0 = Clock::now();
  if (o.layout == "strided") {
    StridedBlocks sb{local, tbase, block, block, 2 * block, n};
    s = engine.prepareStrided(op, seg, sb, plan);
    if (s.ok()) {
      double el = 0;
      s = timedBatch(engine, 1, [&](BatchID b) { return engine.submitStrided(b, op, seg, sb); }, el, &first_submit_cpu);
    }
  } else {
    list.resize(n);
    for (uint64_t i = 0; i < n; ++i) list[i] = Block{local + i * block, tbase + where[i], block};
    s = engine.prepareBlocks(op, seg, list, plan);
    if (s.ok()) {
      double el = 0;
      s = timedBatch(engine, 1, [&](BatchID b) { return engine.submitBlocks(b, op, seg, list); }, el, &first_submit_cpu);
    }
  }
  prepare_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!s.ok()) return blocksFail("block request", s);
  PlanInfo info;
  (void)engine.planInfo(plan, info);

  // The limits, measured in the same rounds.
  std::vector<TransferRequest> big, single, per_block;
  for (uint64_t off = 0; off < bytes; off += 1 << 20) {
    const uint64_t len = std::min<uint64_t>(1 << 20, bytes - off);
    big.push_back({op, local + off, seg, tbase + off, len});
  }
  single.push_back({op, local, seg, tbase + where[0], block});
  const uint64_t per_n = std::min<uint64_t>(n, 131072);  // the old way, bounded: a task per block costs memory
  for (uint64_t i = 0; i < per_n; ++i) per_block.push_back({op, local + i * block, seg, tbase + where[i], block});

  std::vector<double> blk_s, post_cpu, big_s, single_s, per_s;
  for (size_t r = 0; r < o.rounds; ++r) {
    double el = 0, cpu = 0;
    if (!(s = timedBatch(engine, 1, [&](BatchID b) { return engine.postPlan(b, plan); }, el, &cpu)).ok())
      return blocksFail("post the plan", s);
    blk_s.push_back(el);
    post_cpu.push_back(cpu);
    if (!(s = timedBatch(engine, big.size(), [&](BatchID b) { return engine.submitTransfer(b, big); }, el)).ok())
      return blocksFail("1 MiB requests", s);
    big_s.push_back(el);
    // One block alone: enough round trips for about a tenth of a second.
    auto c0 = Clock::now();
    size_t trips = 0;
    do {
      if (!(s = timedBatch(engine, 1, [&](BatchID b) { return engine.submitTransfer(b, single); }, el)).ok())
        return blocksFail("single block", s);
      ++trips;
    } while (Clock::now() - c0 < std::chrono::milliseconds(100));
    single_s.push_back(std::chrono::duration<double>(Clock::now() - c0).count() / static_cast<double>(trips));
    if (!(s = timedBatch(engine, per_block.size(), [&](BatchID b) { return engine.submitTransfer(b, per_block); }, el))
             .ok())
      return blocksFail("one request per block", s);
    per_s.push_back(el);
  }
  // After the last round (the plan's post came first in it, so re-post it).
  double el = 0;
  if (!(s = timedBatch(engine, 1, [&](BatchID b) { return engine.postPlan(b, plan); }, el)).ok()) return blocksFail("post", s);
  std::string verify = "skipped (--no-verify)";
  if (!o.no_verify) {
    verify = "yes";
    if (op == OpCode::kWrite) {
      std::memset(local, 0, bytes);
      if (!(s = timedBatch(engine, 1, [&](BatchID b) {
              return o.layout == "strided"
                         ? engine.submitStrided(b, OpCode::kRead, seg, {local, tbase, block, block, 2 * block, n})
                         : engine.submitBlocks(b, OpCode::kRead, seg, list);
            }, el)).ok())
        return blocksFail("read back", s);
    }
    for (uint64_t i = 0; i < n; ++i) {
      const bool ok = op == OpCode::kRead ? checkPattern(local + i * block, block, seed, where[i]) < 0
                                          : checkPattern(local + i * block, block, seed ^ 1, i * block) < 0;
      if (!ok) {
        verify = fmt::format("NO: block {} differs", i);
        break;
      }
    }
  }
  const double blk = medianOf(blk_s), bigm = medianOf(big_s), single_m = medianOf(single_s), per = medianOf(per_s);
  const double blk_Bps = static_cast<double>(bytes) / blk, big_Bps = static_cast<double>(bytes) / bigm;
  const double blk_bps = static_cast<double>(n) / blk, single_bps = 1.0 / single_m;
  const double per_bps = static_cast<double>(per_n) / per;
  uint64_t per_run = 0, window_max = 0;
  for (auto& [k, v] : engine.stats().engine) {
    if (k == "block_bytes_per_inflight_run") per_run = v;
    if (k == "block_window_bytes_max_per_task") window_max = v;
  }
  if (o.json) {
    nlohmann::json j;
    j["op"] = o.op;
    j["layout"] = o.layout;
    j["blocks"] = n;
    j["block_size"] = block;
    j["runs"] = info.runs;
    j["rounds"] = o.rounds;
    j["block_gbps"] = blk_Bps / 1e9;
    j["block_blocks_per_s"] = blk_bps;
    j["mib_requests_gbps"] = big_Bps / 1e9;
    j["ratio_to_mib_requests"] = blk_Bps / big_Bps;
    j["single_block_blocks_per_s"] = single_bps;
    j["ratio_to_single_block"] = blk_bps / single_bps;
    j["request_per_block_blocks_per_s"] = per_bps;
    j["ratio_to_request_per_block"] = blk_bps / per_bps;
    j["prepare_and_first_transfer_s"] = prepare_s;
    j["first_submit_cpu_ms"] = first_submit_cpu * 1e3;
    j["post_cpu_ms"] = medianOf(post_cpu) * 1e3;
    j["engine_bytes_per_inflight_run"] = per_run;
    j["engine_window_bytes_max_per_task"] = window_max;
    j["verified"] = verify == "yes";
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("op {}  layout {}  {} blocks of {} B ({} runs after merging)  target {}  medians of {} rounds\n", o.op,
               o.layout, n, block, info.runs, o.target, o.rounds);
    fmt::print("block request (plan posted): {:.3f} GB/s, {:.0f} blocks/s; post {:.3f} ms CPU; first submit {:.3f} ms CPU\n",
               blk_Bps / 1e9, blk_bps, medianOf(post_cpu) * 1e3, first_submit_cpu * 1e3);
    fmt::print("  vs the same bytes as 1 MiB requests: {:.3f} GB/s -> ratio {:.3f}\n", big_Bps / 1e9, blk_Bps / big_Bps);
    fmt::print("  vs one block alone, round trip: {:.0f} blocks/s -> ratio {:.1f}\n", single_bps, blk_bps / single_bps);
    fmt::print("  vs one request per block ({} in one batch): {:.0f} blocks/s -> ratio {:.2f}\n", per_n, per_bps,
               blk_bps / per_bps);
    fmt::print("engine memory per in-flight run {} B, at most {} B per task\n", per_run, window_max);
    fmt::print("verified: {}\n", verify);
  }
  (void)engine.releasePlan(plan);
  (void)engine.unregisterLocalMemory(local);
  ::munmap(mem, bytes);
  return verify.rfind("NO", 0) == 0 ? 3 : 0;
}

}  // namespace hawser::tools
