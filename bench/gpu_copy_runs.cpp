// gpu_copy_runs: how fast one GPU copies a paged KV cache's scattered
// blocks with each of hawser's copy mechanisms (gpu/batch_copy.h), against
// one contiguous cuMemcpyAsync of the same bytes, in one run (bench/kv.sh's
// GPU rows use `hawser bench`; this isolates the copy itself, and the curve
// of GB/s against gpu.copy_max_ctas that chose its default).
//
// Layout: layers x 2 (K, V) x blocks chunks of --block bytes; source and
// destination each a pool of twice as many slots, every chunk at a random
// slot on each side (two block tables). Windows of --window runs, as the
// engine hands them to a transport, queued back to back on one stream.
// Also: the same chunks as one block request through the engine (nvlink,
// two engines of this process), default settings.
// Prints one JSON line per measurement; medians of --rounds interleaved.
//
// Usage: gpu_copy_runs [--block 32K] [--layers 8] [--blocks 500]
//                      [--window 1024] [--rounds 5] [--device 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu/batch_copy.h"
#include "gpu/copy_stream.h"
#include "gpu/cuda_driver.h"
#include "hawser/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using hawser::gpu::CopyMechanism;
using hawser::gpu::CopyRun;

uint64_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<uint64_t>(v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int fail(const std::string& what) {
  fmt::print(stderr, "gpu_copy_runs: {}\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t block = 32 << 10;
  size_t layers = 8, blocks = 500, window = 1024, rounds = 5;
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--block") block = parseSize(v);
    else if (k == "--layers") layers = std::stoul(v);
    else if (k == "--blocks") blocks = std::stoul(v);
    else if (k == "--window") window = std::stoul(v);
    else if (k == "--rounds") rounds = std::stoul(v);
    else if (k == "--device") device = std::stoi(v);
    else return fmt::print(stderr, "gpu_copy_runs: unknown option {}\n", k), 2;
  }
  const hawser::gpu::CudaDriver* d = hawser::gpu::CudaDriver::load("libcuda.so.1");
  if (!d) return fmt::print(stderr, "gpu_copy_runs: no GPU: {}\n", hawser::gpu::CudaDriver::reason()), 2;
  const hawser::gpu::cu::Api& a = d->api();
  if (!d->bindDevice(device).ok()) return fail("cannot bind the GPU");
  const size_t chunks = layers * 2 * blocks;
  const uint64_t bytes = chunks * block, pool = 2 * bytes;
  hawser::gpu::cu::DevicePtr src = 0, dst = 0;
  if (a.MemAlloc(&src, pool) != 0 || a.MemAlloc(&dst, pool) != 0) return fail("cuMemAlloc failed");
  a.MemsetD8(src, 7, pool);
  a.MemsetD8(dst, 0, pool);
  std::vector<size_t> sslot(2 * chunks), dslot(2 * chunks);
  std::iota(sslot.begin(), sslot.end(), 0);
  std::iota(dslot.begin(), dslot.end(), 0);
  std::shuffle(sslot.begin(), sslot.end(), std::mt19937(1));
  std::shuffle(dslot.begin(), dslot.end(), std::mt19937(2));
  std::vector<CopyRun> runs(chunks);
  for (size_t i = 0; i < chunks; ++i) runs[i] = CopyRun{dst + dslot[i] * block, src + sslot[i] * block, block};

  // One contiguous copy of the same bytes: the limit.
  std::unique_ptr<hawser::gpu::CopyStream> plain;
  if (!hawser::gpu::CopyStream::open(device, plain).ok()) return fail("cannot open a stream");
  auto contiguous = [&]() {
    uint64_t t = 0;
    auto t0 = Clock::now();
    (void)plain->copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes, t);
    (void)plain->wait(t);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Every run in windows of `window`, back to back on one stream.
  struct Variant {
    std::string name;
    CopyMechanism m;
    uint32_t ctas;
    uint32_t threads;
    uint64_t piece;
    size_t window;
    std::unique_ptr<hawser::gpu::CopyStream> s;
    std::vector<double> secs;
    hawser::gpu::CopyReport rep;
  };
  std::vector<Variant> vs;
  const hawser::gpu::CopySettings defaults;
  for (size_t w : {window, window * 8})
    for (uint32_t c : {8u, 16u, 32u, 64u, 128u, 0u})
      vs.push_back({fmt::format("kernel_ctas_{}", c ? std::to_string(c) : std::string("all")), CopyMechanism::kKernel,
                    c, defaults.threads_per_cta, defaults.piece_bytes, w, nullptr, {}, {}});
  for (uint32_t c : {32u, 0u})
    vs.push_back({fmt::format("kernel512_64k_ctas_{}", c ? std::to_string(c) : std::string("all")),
                  CopyMechanism::kKernel, c, 512, 64 << 10, window * 8, nullptr, {}, {}});
  if (a.MemcpyBatchAsync)
    vs.push_back({"copy_engine", CopyMechanism::kCopyEngine, 0, 0, 0, window, nullptr, {}, {}});
  vs.push_back({"per_run", CopyMechanism::kPerRun, 0, 0, 0, window, nullptr, {}, {}});
  for (auto& v : vs) {
    hawser::gpu::CopySettings s;
    s.mechanism = v.m;
    s.max_ctas = v.ctas;
    if (v.threads) s.threads_per_cta = v.threads;
    if (v.piece) s.piece_bytes = v.piece;
    if (!hawser::gpu::CopyStream::open(device, v.s, s).ok()) return fail("cannot open a stream");
  }
  auto windowed = [&](Variant& v) {
    uint64_t t = 0;
    auto t0 = Clock::now();
    for (size_t at = 0; at < runs.size(); at += v.window) {
      const size_t k = std::min(v.window, runs.size() - at);
      hawser::Status st = v.s->copyRuns(std::span<const CopyRun>(runs.data() + at, k), t, &v.rep);
      if (!st.ok()) {
        fmt::print(stderr, "gpu_copy_runs: {}: {}\n", v.name, st.toString());
        return -1.0;
      }
    }
    (void)v.s->wait(t);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Warm-up (module load, run lists), then interleaved rounds.
  contiguous();
  for (auto& v : vs) windowed(v);
  std::vector<double> base;
  for (size_t r = 0; r < rounds; ++r) {
    base.push_back(contiguous());
    for (auto& v : vs) v.secs.push_back(windowed(v));
  }
  const double base_gbs = bytes / median(base) / 1e9;
  fmt::print("{{\"what\":\"contiguous\",\"block\":{},\"chunks\":{},\"bytes\":{},\"gbps\":{:.1f}}}\n", block, chunks,
             bytes, base_gbs);
  for (auto& v : vs) {
    const double gbs = bytes / median(v.secs) / 1e9;
    fmt::print("{{\"what\":\"{}\",\"block\":{},\"window\":{},\"gbps\":{:.1f},\"ratio\":{:.3f},\"used\":\"{}\","
               "\"ctas\":{},\"launches_per_window\":{}}}\n",
               v.name, block, v.window, gbs, gbs / base_gbs, hawser::gpu::copyMechanismName(v.rep.used), v.rep.ctas,
               v.rep.launches);
  }

  // The engine: one block request of the same chunks over nvlink (two
  // engines of this process), with the engine's defaults and variations.
  struct EngineVariant {
    std::string name;
    std::map<std::string, std::string> config;
  };
  std::vector<EngineVariant> evs;
  for (const char* rw : {"1024", "2048", "8192"})
    for (const char* spin : {"false", "true"})
      for (const char* ctas : {"32", "0"})
        evs.push_back({fmt::format("engine_rw{}_spin_{}_ctas_{}", rw, spin, ctas),
                       {{"block.run_window", rw}, {"nvlink.spin_wait", spin}, {"gpu.copy_max_ctas", ctas}}});
  for (const EngineVariant& ev : evs) {
    hawser::TransferEngine target, init;
    hawser::EngineOptions o;
    o.config = ev.config;
    if (!target.init("p2p", "kv-target", "127.0.0.1", 0).ok() || !init.init("p2p", "kv-init", "127.0.0.1", 0, o).ok())
      return fail("engine init failed");
    if (!target.registerLocalMemory(reinterpret_cast<void*>(src), pool).ok() ||
        !init.registerLocalMemory(reinterpret_cast<void*>(dst), pool).ok())
      return fail("register failed");
    hawser::SegmentID seg;
    if (!init.openSegment(target.segmentName(), seg).ok()) return fail("openSegment failed");
    std::vector<hawser::Block> bl(chunks);
    for (size_t i = 0; i < chunks; ++i)
      bl[i] = hawser::Block{reinterpret_cast<void*>(runs[i].dst), runs[i].src, block};
    hawser::PlanID plan;
    hawser::Status st = init.prepareBlocks(hawser::OpCode::kRead, seg, bl, plan);
    if (!st.ok()) return fail("prepareBlocks: " + st.toString());
    std::vector<double> secs, cont;
    for (size_t r = 0; r <= rounds; ++r) {
      cont.push_back(contiguous());
      hawser::BatchID b;
      (void)init.allocateBatchID(1, b);
      auto t0 = Clock::now();
      size_t task = 0;
      st = init.postPlan(b, plan, &task);
      if (st.ok()) st = init.waitTransfer(b, std::chrono::seconds(120));
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      hawser::TransferStatus ts;
      (void)init.getTransferStatus(b, task, ts);
      (void)init.freeBatchID(b);
      if (!st.ok() || ts.s != hawser::TransferState::kCompleted)
        return fail("block request: " + (st.ok() ? ts.error.toString() : st.toString()));
      if (r > 0) secs.push_back(s);  // round 0 warms up
    }
    cont.erase(cont.begin());
    uint64_t windows = 0, launches = 0, ctas = 0;
    for (auto& t : init.stats().transports)
      if (t.transport == "nvlink")
        for (auto& [k, v] : t.counters) {
          if (k == "gpu_copy_windows") windows = v;
          if (k == "gpu_copy_kernel_launches") launches = v;
          if (k == "gpu_copy_ctas_max") ctas = v;
        }
    const double gbs = bytes / median(secs) / 1e9, cgbs = bytes / median(cont) / 1e9;
    fmt::print("{{\"what\":\"{}\",\"block\":{},\"gbps\":{:.1f},\"contiguous_gbps\":{:.1f},\"ratio\":{:.3f},"
               "\"windows_per_request\":{:.1f},\"kernel_launches\":{},\"ctas_max\":{}}}\n",
               ev.name, block, gbs, cgbs, gbs / cgbs, double(windows) / double(rounds + 1), launches, ctas);
    (void)init.releasePlan(plan);
    (void)init.unregisterLocalMemory(reinterpret_cast<void*>(dst));
    (void)target.unregisterLocalMemory(reinterpret_cast<void*>(src));
  }
  a.MemFree(src);
  a.MemFree(dst);
  return 0;
}
