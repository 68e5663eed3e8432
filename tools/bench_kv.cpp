// `hawser bench --layout kv` (bench_kv.h).
#include "tools/bench_kv.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"
#include "tools/bench_common.h"
#include "tools/location.h"
#include "tools/pattern.h"

namespace hawser::tools {

namespace {

// (Named apart from the other benches' helpers: CI compiles the tools as one unity file.)
int kvUsage(const std::string& msg) {
  fmt::print(stderr, "hawser bench: {}\n", msg);
  return 2;
}
int kvFail(const std::string& what, const Status& s) {
  fmt::print(stderr, "hawser bench: {}: {}\n", what, s.toString());
  return 1;
}

// The counters a transport that copies GPU memory exposes (src/gpu/batch_copy.h):
// windows copied, the driver calls each mechanism made for them (a kernel
// launch or a batched copy per window, a cuMemcpyAsync per run), and the
// most CTAs one launch used.
constexpr const char* kWindowsCounter = "gpu_copy_windows";
constexpr const char* kKernelCounter = "gpu_copy_kernel_launches";
constexpr const char* kEngineCounter = "gpu_copy_engine_batches";
constexpr const char* kPerRunCounter = "gpu_copy_per_run";
constexpr const char* kCtasCounter = "gpu_copy_ctas_max";

// What the timed transfers of one kind moved, from stats() taken around
// each: the transports whose counters changed, and the gpu_copy_* counters'
// growth summed over transports.
struct Moved {
  std::set<std::string> transports;
  std::map<std::string, uint64_t> gpu_copy;
  bool has_gpu_copy = false;  // some transport has gpu_copy_* counters
  bool has_ctas = false;
  uint64_t ctas_max = 0;
  // Every counter's growth, "transport.key" (those that grew): where the
  // time of the timed transfers went (e.g. nvlink's group_*_ns).
  std::map<std::string, uint64_t> growth;
};

void addMoved(const EngineStats& before, const EngineStats& after, Moved& m) {
  for (const auto& t : after.transports) {
    const Counters* old = nullptr;
    for (const auto& b : before.transports)
      if (b.transport == t.transport) old = &b.counters;
    for (const auto& [k, v] : t.counters) {
      uint64_t was = 0;
      if (old)
        for (const auto& [bk, bv] : *old)
          if (bk == k) was = bv;
      if (v != was) m.transports.insert(t.transport);
      if (v > was) m.growth[t.transport + "." + k] += v - was;
      if (k == kCtasCounter) {
        m.has_ctas = true;
        m.ctas_max = std::max(m.ctas_max, v);
      } else if (k.rfind("gpu_copy_", 0) == 0) {
        m.has_gpu_copy = true;
        m.gpu_copy[k] += v > was ? v - was : 0;
      }
    }
  }
}

// The mechanism that carried most windows: "n/a" where no transport counts
// GPU copies, "none" where none was made. A kernel or a batched copy is one
// call per window; the windows left were copied run by run.
std::string mechanismOf(const Moved& m) {
  if (!m.has_gpu_copy) return "n/a";
  auto count = [&](const char* k) {
    auto it = m.gpu_copy.find(k);
    return it == m.gpu_copy.end() ? uint64_t(0) : it->second;
  };
  const uint64_t kernel = count(kKernelCounter), engine = count(kEngineCounter);
  const uint64_t windows = count(kWindowsCounter);
  // Without a windows counter, calls stand in for windows.
  const uint64_t per_run = m.gpu_copy.count(kWindowsCounter) ? (windows > kernel + engine ? windows - kernel - engine : 0)
                                                              : count(kPerRunCounter);
  std::pair<const char*, uint64_t> best = {"none", 0};
  for (const auto& c : {std::pair{"kernel", kernel}, std::pair{"copy_engine", engine}, std::pair{"per_run", per_run}})
    if (c.second > best.second) best = c;
  return best.first;
}

enum class Way { kKv, kContiguous, kMib };

}  // namespace

int runKvBench(const KvBenchOpts& o) {
  const auto bs = parseSize(o.block_size);
  if (!bs || *bs == 0) return kvUsage(fmt::format("--block-size '{}' is not a size", o.block_size));
  if (o.op != "read" && o.op != "write") return kvUsage(fmt::format("--op must be read or write, got '{}'", o.op));
  if (o.layers == 0) return kvUsage("--layers must be >= 1");
  if (o.kv_blocks == 0) return kvUsage("--kv-blocks must be >= 1");
  const uint64_t pool = o.kv_pool ? o.kv_pool : 2 * uint64_t(o.kv_blocks);
  if (pool < o.kv_blocks)
    return kvUsage(fmt::format("--kv-pool {} is less than --kv-blocks {}: each side's pool holds the blocks moved",
                               pool, o.kv_blocks));
  if (o.rounds == 0) return kvUsage("--rounds must be >= 1");
  if (o.repeat == 0 || o.repeat > 1000) return kvUsage("--kv-repeat must be 1..1000");
  const std::optional<int> place = parseMemoryPlace(o.local_location);
  if (!place) return kvUsage(fmt::format("--local-location '{}' is not cpu or cuda:N", o.local_location));
  const int gpu = *place;
  const OpCode op = o.op == "read" ? OpCode::kRead : OpCode::kWrite;
  const uint64_t S = *bs, B = o.kv_blocks, tensors = 2 * uint64_t(o.layers);  // a K and a V per layer
  uint64_t pool_bytes = 0, bytes = 0;
  if (__builtin_mul_overflow(tensors, pool, &pool_bytes) || __builtin_mul_overflow(pool_bytes, S, &pool_bytes) ||
      pool_bytes > (1ull << 46))
    return kvUsage(fmt::format("--layout kv of {} layers x K/V x --kv-pool {} blocks of {} B is too large", o.layers,
                               pool, S));
  const uint64_t chunks = tensors * B;
  bytes = chunks * S;

  TransferEngine engine;
  SegmentID seg;
  std::vector<SegmentBuffer> bufs;
  if (!openBenchTarget(engine, o, seg, bufs)) return 1;
  Status s;
  // A memory target holds pools like ours; a file target the chunks one
  // after another (layer, K/V, block), as a KV offload tier keeps them.
  const bool file = isFileSegment(o.target, bufs);
  const uint64_t tbase = file ? 0 : bufs[0].addr;
  const uint64_t tlen = file ? bufs.back().addr + bufs.back().length : bufs[0].length;
  const uint64_t span = file ? bytes : pool_bytes;
  if (tlen < span)
    return kvUsage(file ? fmt::format("the file segment has {} bytes; --layout kv of {} chunks of {} B needs {}", tlen,
                                      chunks, S, span)
                        : fmt::format("the target's first buffer has {} bytes; --layout kv of {} layers x K/V x "
                                      "--kv-pool {} blocks of {} B needs {} (hawser serve --memory {})",
                                      tlen, o.layers, pool, S, span, span));

  // Local pools; with cuda:N in GPU memory, `host` then being their mirror
  // for patterns and checks.
  void* mem = ::mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return kvFail("local memory", Status(Code::kInternal, "mmap failed"));
  (void)::madvise(mem, pool_bytes, MADV_HUGEPAGE);
  char* host = static_cast<char*>(mem);
  std::memset(host, 0, pool_bytes);
  char* local = host;
  if (gpu >= 0) {
    void* d = nullptr;
    if (!(s = loadCudaDriver()).ok()) return kvFail("--local-location " + o.local_location, s);
    if (!(s = allocateDeviceMemory(gpu, pool_bytes, &d)).ok()) return kvFail("allocate GPU memory", s);
    local = static_cast<char*>(d);
  }
  auto push = [&](uint64_t n) { return gpu < 0 ? Status::OK() : copyMemory(local, host, n); };
  auto pull = [&](uint64_t n) { return gpu < 0 ? Status::OK() : copyMemory(host, local, n); };
  if (!(s = engine.registerLocalMemory(local, pool_bytes, "*", false)).ok()) return kvFail("register local memory", s);

  // The block tables: each side's own random choice of its pool's blocks.
  auto table = [&](uint64_t seed) {
    std::vector<uint64_t> t(pool);
    std::iota(t.begin(), t.end(), 0);
    std::shuffle(t.begin(), t.end(), std::mt19937_64(seed));
    t.resize(B);
    return t;
  };
  const std::vector<uint64_t> ltab = table(1), rtab = table(2);
  // Chunk c = (layer x 2 + K/V) x B + i: block i of the request in that tensor.
  std::vector<uint64_t> loff(chunks), roff(chunks);
  std::vector<Block> blocks(chunks);
  for (uint64_t t = 0; t < tensors; ++t)
    for (uint64_t i = 0; i < B; ++i) {
      const uint64_t c = t * B + i;
      loff[c] = (t * pool + ltab[i]) * S;
      roff[c] = file ? c * S : (t * pool + rtab[i]) * S;
      blocks[c] = Block{local + loff[c], tbase + roff[c], S};
    }
  auto chunkName = [&](uint64_t c) {
    const uint64_t t = c / B, i = c % B;
    return fmt::format("chunk {} (layer {} {}, block {}: local block {}, target {})", c, t / 2, t % 2 ? "V" : "K", i,
                       ltab[i], file ? fmt::format("offset {}", roff[c]) : fmt::format("block {}", rtab[i]));
  };

  // Local [0, len) <-> target [0, len), contiguous on both sides: one block request.
  auto contiguous = [&](OpCode dir, uint64_t len, double& sec) {
    const StridedBlocks sb{local, tbase, len, len, len, 1};
    return timedBatch(engine, 1, [&](BatchID b) { return engine.submitStrided(b, dir, seg, sb); }, sec);
  };
  std::vector<TransferRequest> mib;
  for (uint64_t off = 0; off < bytes; off += 1 << 20)
    mib.push_back({op, local + off, seg, tbase + off, std::min<uint64_t>(1 << 20, bytes - off)});
  PlanID plan = kInvalidPlan;
  if (!(s = engine.prepareBlocks(op, seg, blocks, plan)).ok()) return kvFail("the KV block request", s);
  PlanInfo info;
  (void)engine.planInfo(plan, info);

  // Reads: the target holds pattern(seed_read) of its offsets throughout.
  const uint64_t seed_read = 0x6b762d6361636865ULL;
  double el = 0;
  if (op == OpCode::kRead) {
    fillPattern(host, span, seed_read, 0);
    if (!(s = push(span)).ok() || !(s = contiguous(OpCode::kWrite, span, el)).ok())
      return kvFail("write the target's pattern", s);
  }

  // One transfer of one way, verified. Reads find the local pools zeroed and
  // check what arrived; writes send a pattern of their own (a new seed each
  // transfer) and read the target back into zeroed local memory to check it.
  uint64_t transfers = 0;
  std::string bad;  // the first byte that was not what it should be
  auto one = [&](Way w, double& sec, double* submit_cpu, Moved* moved) -> Status {
    const bool kv = w == Way::kKv;
    const uint64_t seed = op == OpCode::kRead ? seed_read : seed_read ^ (0x9e3779b97f4a7c15ULL * (transfers + 1));
    ++transfers;
    if (op == OpCode::kRead) {
      std::memset(host, 0, pool_bytes);
    } else if (kv) {
      for (uint64_t c = 0; c < chunks; ++c) fillPattern(host + loff[c], S, seed, roff[c]);
    } else {
      fillPattern(host, bytes, seed, 0);
    }
    Status st = push(pool_bytes);
    if (!st.ok()) return st;
    const EngineStats before = engine.stats();
    // `repeat` transfers one after another (the same bytes each time, so
    // the check below holds for the last); `sec` is their mean.
    double total = 0, cpu_total = 0;
    for (size_t k = 0; k < o.repeat && st.ok(); ++k) {
      double t = 0, cpu = 0;
      if (kv)
        st = timedBatch(engine, 1, [&](BatchID b) {
          return o.plan ? engine.postPlan(b, plan) : engine.submitBlocks(b, op, seg, blocks);
        }, t, &cpu);
      else if (w == Way::kContiguous)
        st = contiguous(op, bytes, t);
      else
        st = timedBatch(engine, mib.size(), [&](BatchID b) { return engine.submitTransfer(b, mib); }, t);
      total += t;
      cpu_total += cpu;
    }
    if (!st.ok()) return st;
    sec = total / static_cast<double>(o.repeat);
    if (submit_cpu) *submit_cpu = cpu_total / static_cast<double>(o.repeat);
    if (moved) addMoved(before, engine.stats(), *moved);
    // Where the moved bytes are now, in `host`: chunk c at `at[c]`.
    const uint64_t back = kv ? span : bytes;
    if (op == OpCode::kWrite) {
      std::memset(host, 0, back);
      double rb = 0;
      if (!(st = push(back)).ok() || !(st = contiguous(OpCode::kRead, back, rb)).ok()) return st;
    }
    if (!(st = pull(op == OpCode::kRead ? pool_bytes : back)).ok()) return st;
    const char* what = kv ? "KV block request" : w == Way::kContiguous ? "contiguous block request" : "1 MiB requests";
    if (kv) {
      const std::vector<uint64_t>& at = op == OpCode::kRead ? loff : roff;
      for (uint64_t c = 0; c < chunks && bad.empty(); ++c)
        if (int64_t i = checkPattern(host + at[c], S, seed, roff[c]); i >= 0)
          bad = fmt::format("transfer {} ({}): {} differs at byte {}", transfers, what, chunkName(c), i);
    } else if (int64_t i = checkPattern(host, bytes, seed, 0); i >= 0) {
      bad = fmt::format("transfer {} ({}): byte {} differs", transfers, what, i);
    }
    return Status::OK();
  };

  // One untimed transfer of each way first (verified too): what happens once
  // (the copy kernel loaded, mappings opened, a plan's run lists kept) stays
  // out of the medians and of the counters' growth.
  for (Way w : {Way::kKv, Way::kContiguous, Way::kMib}) {
    double sec = 0;
    if (!(s = one(w, sec, nullptr, nullptr)).ok()) return kvFail("the warm-up transfer", s);
    if (!bad.empty()) break;
  }
  // Interleaved rounds, the order reversed every other round.
  std::vector<double> kv_s, contiguous_s, mib_s, submit_cpu;
  Moved kv_moved, contiguous_moved;
  for (size_t r = 0; r < o.rounds && bad.empty(); ++r) {
    const Way order[2][3] = {{Way::kKv, Way::kContiguous, Way::kMib}, {Way::kMib, Way::kContiguous, Way::kKv}};
    for (Way w : order[r % 2]) {
      double sec = 0, cpu = 0;
      s = one(w, sec, w == Way::kKv ? &cpu : nullptr,
              w == Way::kKv ? &kv_moved : w == Way::kContiguous ? &contiguous_moved : nullptr);
      if (!s.ok())
        return kvFail(w == Way::kKv ? "the KV block request" : w == Way::kContiguous ? "the contiguous block request"
                                                                                    : "the 1 MiB requests",
                      s);
      if (!bad.empty()) break;
      (w == Way::kKv ? kv_s : w == Way::kContiguous ? contiguous_s : mib_s).push_back(sec);
      if (w == Way::kKv) submit_cpu.push_back(cpu);
    }
  }
  const bool verified = bad.empty();
  auto gbps = [&](const std::vector<double>& v) { return v.empty() ? 0.0 : static_cast<double>(bytes) / medianOf(v) / 1e9; };
  auto rounds = [&](const std::vector<double>& v) {
    std::vector<double> g;
    for (double x : v) g.push_back(static_cast<double>(bytes) / x / 1e9);
    return g;
  };
  const double kv_g = gbps(kv_s), contiguous_g = gbps(contiguous_s), mib_g = gbps(mib_s);
  const std::vector<std::string> carried(kv_moved.transports.begin(), kv_moved.transports.end());
  const std::vector<std::string> contiguous_carried(contiguous_moved.transports.begin(),
                                                    contiguous_moved.transports.end());
  const std::string mechanism = mechanismOf(kv_moved);
  const std::string where = gpu >= 0 ? o.local_location : "cpu";
  if (o.json) {
    if (!verified) fmt::print(stderr, "hawser bench: {}\n", bad);
    nlohmann::json j;
    j["layout"] = "kv";
    j["op"] = o.op;
    j["layers"] = o.layers;
    j["kv_blocks"] = B;
    j["kv_pool"] = pool;
    j["block_size"] = S;
    j["chunks"] = chunks;
    j["bytes"] = bytes;
    j["kv_runs"] = info.runs;
    j["rounds"] = o.rounds;
    j["repeat"] = o.repeat;  // transfers of each way one after another per round (the times are their mean)
    j["warmup_transfers"] = 1;  // of each way, before the rounds: not in the medians nor the counters
    j["target"] = o.target;
    j["target_kind"] = file ? "file" : "memory";
    j["local_location"] = where;
    j["submit"] = o.plan ? "postPlan" : "submitBlocks";
    j["kv_gbps"] = kv_g;
    j["contiguous_gbps"] = contiguous_g;
    j["ratio"] = contiguous_g > 0 ? kv_g / contiguous_g : 0.0;
    j["mib_requests_gbps"] = mib_g;
    j["ratio_to_mib_requests"] = mib_g > 0 ? kv_g / mib_g : 0.0;
    j["kv_rounds_gbps"] = rounds(kv_s);
    j["contiguous_rounds_gbps"] = rounds(contiguous_s);
    j["kv_submit_cpu_ms"] = medianOf(submit_cpu) * 1e3;
    j["transports"] = carried;
    j["contiguous_transports"] = contiguous_carried;
    j["copy_mechanism"] = mechanism;
    j["copy_ctas_max"] = kv_moved.has_ctas ? nlohmann::json(kv_moved.ctas_max) : nlohmann::json("n/a");
    j["gpu_copy"] = kv_moved.gpu_copy;  // growth of each gpu_copy_* counter over the KV transfers
    j["contiguous_copy_mechanism"] = mechanismOf(contiguous_moved);
    j["kv_counters"] = kv_moved.growth;  // summed over the timed KV transfers (rounds of them)
    j["contiguous_counters"] = contiguous_moved.growth;
    j["verified"] = verified;
    j["verified_transfers"] = verified ? transfers : transfers - 1;
    if (!verified) j["verify_error"] = bad;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("kv layout: {} layers x K/V x {} blocks of {} B ({} chunks, {} B; pools of {} blocks a side), op {}, "
               "local {}, target {} ({}), medians of {} rounds after a warm-up transfer{}\n",
               o.layers, B, S, chunks, bytes, pool, o.op, where, o.target, file ? "file" : "memory", o.rounds,
               o.repeat > 1 ? fmt::format(", {} transfers of each way one after another a round", o.repeat) : "");
    fmt::print("KV, one block request ({}, {} runs): {:.3f} GB/s, submit {:.3f} ms CPU\n",
               o.plan ? "a plan posted" : "submitBlocks", info.runs, kv_g, medianOf(submit_cpu) * 1e3);
    fmt::print("  vs the same bytes contiguous, one block request: {:.3f} GB/s -> ratio {:.3f}\n", contiguous_g,
               contiguous_g > 0 ? kv_g / contiguous_g : 0.0);
    fmt::print("  vs the same bytes as {} requests of 1 MiB: {:.3f} GB/s -> ratio {:.3f}\n", mib.size(), mib_g,
               mib_g > 0 ? kv_g / mib_g : 0.0);
    fmt::print("transport {}  copy mechanism {}  CTAs {}\n", carried.empty() ? "?" : fmt::format("{}", fmt::join(carried, "+")),
               mechanism, kv_moved.has_ctas ? std::to_string(kv_moved.ctas_max) : "n/a");
    fmt::print("verified: {}\n", verified ? fmt::format("yes (every byte of {} transfers)", transfers) : "NO: " + bad);
  }
  (void)engine.releasePlan(plan);
  (void)engine.unregisterLocalMemory(local);
  if (gpu >= 0) (void)freeDeviceMemory(local);
  ::munmap(mem, pool_bytes);
  return verified ? 0 : 3;
}

}  // namespace hawser::tools
