// bench/kv.sh's GPU baseline: what one GPU does with the paged KV layout of
// `hawser bench --layout kv` (tools/bench_kv.h), in one process, without
// hawser. Two pools on the GPU (or the second on --peer-device), each
// 2 x layers x kv-pool blocks; a request's chunks (2 x layers x kv-blocks)
// chosen by a different random block table on each side. For each block
// size it measures, copying source chunks to destination chunks back to
// back on one stream for about --seconds:
//   contiguous   one cuMemcpyAsync of the same bytes (the ceiling);
//   per_chunk    one cuMemcpyAsync per chunk (what a transport without
//                batching does);
//   batch        the driver's batched copy, every chunk in one
//                cuMemcpyBatchAsync (CUDA 13; skipped where the driver lacks it);
//   gather       bench/kv_gather.cu's kernel, one CTA per chunk (the whole
//                GPU), then limited to each of --ctas CTAs; every chunk of
//                every gather row is checked against its source;
// and, as requests of their own (a 20 ms pause, then one call, waited for;
// the median of 9): contiguous_alone (one cuMemcpyAsync) and gather_alone
// (the whole-GPU gather): what a single request costs on this machine; and
// contiguous_waited: one cuMemcpyAsync after another, each waited for before
// the next (no pause; the median of 25), what a stream of requests can reach.
// One JSON line per measurement, e.g.
//   {"kind":"gather","block_size":32768,"chunks":8000,"bytes":262144000,"ctas":32,"ctas_limit":"32",
//    "gbps":250.1,"ratio_to_contiguous":0.12,"verified":true}
// and first {"kind":"device",...} (SMs, the kernel's build). The kernel is
// PTX compiled by nvcc when the project was built; built without nvcc the
// gather rows are {"kind":"gather","skipped":"why"}.
// The driver is loaded at run time (env HAWSER_GPU_CUDA_DRIVER, default
// libcuda.so.1): without a GPU this says why and exits 2, as do bad
// arguments. `--count` prints the number of GPUs (0 and why).
//
// Usage: kv_gpu_baseline [--count] [--layers 8] [--kv-blocks 500] [--kv-pool 1000]
//          [--block-sizes 4K,16K,32K,64K,256K] [--ctas 8,16,32,64] [--cta-threads 256]
//          [--seconds 1] [--device 0] [--peer-device N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda_driver.h"
#ifdef HAWSER_KV_GATHER_PTX
#include "kv_gather_ptx.h"  // kKvGatherPtx: bench/kv_gather.cu as PTX (bench/embed_ptx.cmake)
#endif

using namespace hawser::gpu;
using Clock = std::chrono::steady_clock;

namespace {

struct KvCopyRun {  // as in kv_gather.cu
  unsigned long long dst, src, len;
};

int usage(const std::string& why) {
  std::fprintf(stderr,
               "kv_gpu_baseline: %s\nusage: kv_gpu_baseline [--count] [--layers 8] [--kv-blocks 500] [--kv-pool N] "
               "[--block-sizes 4K,16K,32K,64K,256K] [--ctas 8,16,32,64] [--cta-threads 256] [--seconds 1] "
               "[--device 0] [--peer-device N]\n",
               why.c_str());
  return 2;
}

// A count >= 1 (`min`), or false.
bool parseCount(const char* s, uint64_t min, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < min) return false;
  out = v;
  return true;
}

// "32K" -> 32768 (K, M, G suffixes), or false.
bool parseSize(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  const char last = s.back();
  const int shift = last == 'K' || last == 'k' ? 10 : last == 'M' || last == 'm' ? 20 : last == 'G' || last == 'g' ? 30 : 0;
  const std::string digits = shift ? s.substr(0, s.size() - 1) : s;
  uint64_t v = 0;
  if (!parseCount(digits.c_str(), 1, v)) return false;
  out = v << shift;
  return true;
}

// "a,b,c" -> out, each item through `parse`; false at the first bad one.
template <class F>
bool parseList(const std::string& all, std::vector<uint64_t>& out, F&& parse) {
  out.clear();
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    uint64_t v = 0;
    if (!parse(all.substr(at, comma - at), v)) return false;
    out.push_back(v);
    at = comma + 1;
  }
  return true;
}

bool check(const CudaDriver* d, cu::Result rc, const char* what) {
  if (rc == cu::kSuccess) return true;
  std::fprintf(stderr, "kv_gpu_baseline: %s\n", d->check(rc, what).message().c_str());
  return false;
}

// GB/s of `op` (moving `bytes`) repeated back to back for about `seconds`.
double measure(const CudaDriver* d, cu::Stream s, double seconds, uint64_t bytes, const std::function<bool()>& op) {
  const cu::Api& a = d->api();
  if (!op() || !check(d, a.StreamSynchronize(s), "cuStreamSynchronize")) return -1;  // warm-up
  uint64_t moved = 0;
  const auto t0 = Clock::now();
  double el = 0;
  do {
    for (int i = 0; i < 4; ++i) {
      if (!op()) return -1;
      moved += bytes;
    }
    if (!check(d, a.StreamSynchronize(s), "cuStreamSynchronize")) return -1;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < seconds);
  return static_cast<double>(moved) / el / 1e9;
}

// GB/s of `op` issued as a request of its own: after a pause of `pause_ms`
// (as between a program's requests), issued and waited for (the stream
// polled), the median of `n`. What one request costs on this machine, the
// driver call's latency after idle included (on the H200 VM a first call
// after ~20 ms costs 50-60 us, against ~5 us back to back). With no pause:
// requests one after another, each waited for before the next is issued.
double measureAlone(const CudaDriver* d, cu::Stream s, uint64_t bytes, const std::function<bool()>& op,
                    int pause_ms = 20, int n = 9) {
  const cu::Api& a = d->api();
  cu::Event ev = nullptr;
  if (!check(d, a.StreamSynchronize(s), "cuStreamSynchronize") ||
      !check(d, a.EventCreate(&ev, cu::kEventDisableTiming), "cuEventCreate"))
    return -1;
  std::vector<double> el;
  for (int i = 0; i < n; ++i) {
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    const auto t0 = Clock::now();
    if (!op() || !check(d, a.EventRecord(ev, s), "cuEventRecord")) return -1;
    cu::Result rc;
    while ((rc = a.EventQuery(ev)) == cu::kErrorNotReady) {
    }
    if (!check(d, rc, "cuEventQuery")) return -1;
    el.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  a.EventDestroy(ev);
  std::sort(el.begin(), el.end());
  return static_cast<double>(bytes) / el[el.size() / 2] / 1e9;
}

// Word `i` of the source pool.
uint64_t word(uint64_t i) { return i * 0x9e3779b97f4a7c15ULL + 1; }

std::vector<uint64_t> blockTable(uint64_t pool, uint64_t blocks, uint64_t seed) {
  std::vector<uint64_t> t(pool);
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), std::mt19937_64(seed));
  t.resize(blocks);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t layers = 8, kv_blocks = 500, kv_pool = 0, cta_threads = 256, device = 0, peer = UINT64_MAX;
  std::vector<uint64_t> sizes = {4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10};
  std::vector<uint64_t> ctas = {8, 16, 32, 64};
  double seconds = 1;
  bool count_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--count") {
      count_only = true;
      continue;
    }
    static const char* const kValued[] = {"--layers",     "--kv-blocks", "--kv-pool", "--cta-threads", "--device",
                                          "--peer-device", "--seconds",   "--block-sizes", "--ctas"};
    if (std::none_of(std::begin(kValued), std::end(kValued), [&](const char* k) { return a == k; }))
      return usage("unknown option " + a);
    if (i + 1 >= argc) return usage(a + " needs a value");
    const char* v = argv[++i];
    bool good = true;
    if (a == "--layers") good = parseCount(v, 1, layers);
    else if (a == "--kv-blocks") good = parseCount(v, 1, kv_blocks);
    else if (a == "--kv-pool") good = parseCount(v, 1, kv_pool);
    else if (a == "--cta-threads") good = parseCount(v, 32, cta_threads) && cta_threads <= 1024;
    else if (a == "--device") good = parseCount(v, 0, device);
    else if (a == "--peer-device") good = parseCount(v, 0, peer);
    else if (a == "--seconds") good = (seconds = std::atof(v)) > 0;
    else if (a == "--block-sizes") good = parseList(v, sizes, [](const std::string& s, uint64_t& n) { return parseSize(s, n) && n % 8 == 0; });
    else good = parseList(v, ctas, [](const std::string& s, uint64_t& n) { return parseCount(s.c_str(), 1, n); });
    if (!good) return usage(a + " '" + v + "' is not valid");
  }
  if (kv_pool == 0) kv_pool = 2 * kv_blocks;
  if (kv_pool < kv_blocks) return usage("--kv-pool is less than --kv-blocks: a pool holds the blocks moved");
  if (peer == device) return usage("--peer-device is --device: leave it out for copies within one GPU");

  const char* env = std::getenv("HAWSER_GPU_CUDA_DRIVER");
  const std::string path = env && *env ? env : "libcuda.so.1";
  const CudaDriver* d = CudaDriver::load(path);
  if (count_only) {
    if (d) std::printf("%d\n", d->deviceCount());
    else std::printf("0 %s\n", CudaDriver::reason().c_str());
    return 0;
  }
  if (!d) return std::fprintf(stderr, "kv_gpu_baseline: no GPU on this host: %s\n", CudaDriver::reason().c_str()), 2;
  const int dev = static_cast<int>(device), dst_dev = peer == UINT64_MAX ? dev : static_cast<int>(peer);
  if (std::max(dev, dst_dev) >= d->deviceCount())
    return std::fprintf(stderr, "kv_gpu_baseline: GPU %d asked for, this host has %d\n", std::max(dev, dst_dev),
                        d->deviceCount()),
           2;
  const cu::Api& a = d->api();
  if (!d->bindDevice(dev).ok()) return std::fprintf(stderr, "kv_gpu_baseline: cannot use GPU %d\n", dev), 1;
  int sms = -1;
  if (a.DeviceGetAttribute) (void)a.DeviceGetAttribute(&sms, cu::kDeviceAttributeMultiprocessorCount, dev);
  if (dst_dev != dev) {
    if (!a.CtxEnablePeerAccess) return std::fprintf(stderr, "kv_gpu_baseline: the driver has no cuCtxEnablePeerAccess\n"), 1;
    const cu::Result rc = a.CtxEnablePeerAccess(d->context(dst_dev), 0);
    if (rc != cu::kErrorPeerAccessAlreadyEnabled && !check(d, rc, "cuCtxEnablePeerAccess")) return 1;
  }

  // The gather kernel, or why there is none.
  std::string no_kernel;
  cu::Function kernel = nullptr;
#ifdef HAWSER_KV_GATHER_PTX
  if (!a.ModuleLoadData || !a.ModuleGetFunction || !a.LaunchKernel) {
    no_kernel = "the CUDA driver " + path + " has no cuModuleLoadData/cuLaunchKernel";
  } else {
    cu::Module mod = nullptr;
    cu::Result rc = a.ModuleLoadData(&mod, kKvGatherPtx);
    if (rc != cu::kSuccess) no_kernel = d->check(rc, "cuModuleLoadData(kv_gather.ptx)").message();
    else if ((rc = a.ModuleGetFunction(&kernel, mod, "kv_copy_runs")) != cu::kSuccess)
      no_kernel = d->check(rc, "cuModuleGetFunction(kv_copy_runs)").message();
  }
#else
  no_kernel = "built without nvcc (no CUDA toolkit where kv_gpu_baseline was built): no gather kernel";
#endif
  if (!no_kernel.empty()) std::fprintf(stderr, "kv_gpu_baseline: gather rows skipped: %s\n", no_kernel.c_str());
  std::printf("{\"kind\":\"device\",\"gpu\":%d,\"peer_gpu\":%d,\"sms\":%d,\"cta_threads\":%llu,\"kernel\":%s}\n", dev,
              dst_dev, sms, static_cast<unsigned long long>(cta_threads), no_kernel.empty() ? "true" : "false");
  std::fflush(stdout);

  cu::Stream stream = nullptr;
  if (!check(d, a.StreamCreate(&stream, cu::kStreamNonBlocking), "cuStreamCreate")) return 1;
  const uint64_t tensors = 2 * layers, chunks = tensors * kv_blocks;
  if (chunks > UINT32_MAX) return usage("more than 2^32 chunks");
  const std::vector<uint64_t> stab = blockTable(kv_pool, kv_blocks, 1), dtab = blockTable(kv_pool, kv_blocks, 2);
  for (uint64_t S : sizes) {
    const uint64_t pool_bytes = tensors * kv_pool * S, bytes = chunks * S;
    cu::DevicePtr src = 0, dst = 0, runs_dev = 0;
    if (!check(d, a.MemAlloc(&src, pool_bytes), "cuMemAlloc (source pool)")) return 1;
    if (!d->bindDevice(dst_dev).ok() || !check(d, a.MemAlloc(&dst, pool_bytes), "cuMemAlloc (destination pool)"))
      return 1;
    (void)d->bindDevice(dev);
    // The source pool holds its own offsets (8-byte words): a chunk found in
    // the wrong place, or torn, shows.
    std::vector<uint64_t> fill(std::min<uint64_t>(pool_bytes, 64ull << 20) / 8);
    for (uint64_t off = 0; off < pool_bytes; off += fill.size() * 8) {
      const uint64_t n = std::min<uint64_t>(fill.size() * 8, pool_bytes - off);
      for (uint64_t w = 0; w < n / 8; ++w) fill[w] = word(off / 8 + w);
      if (!check(d, a.Memcpy(src + off, reinterpret_cast<cu::DevicePtr>(fill.data()), n), "cuMemcpy (fill)")) return 1;
    }
    std::vector<KvCopyRun> runs(chunks);
    for (uint64_t t = 0; t < tensors; ++t)
      for (uint64_t i = 0; i < kv_blocks; ++i)
        runs[t * kv_blocks + i] = {dst + (t * kv_pool + dtab[i]) * S, src + (t * kv_pool + stab[i]) * S, S};
    if (!check(d, a.MemAlloc(&runs_dev, chunks * sizeof(KvCopyRun)), "cuMemAlloc (run list)") ||
        !check(d, a.Memcpy(runs_dev, reinterpret_cast<cu::DevicePtr>(runs.data()), chunks * sizeof(KvCopyRun)),
               "cuMemcpy (run list)"))
      return 1;
    auto row = [&](const char* kind, double gbps, double ceiling, const std::string& more) {
      std::printf("{\"kind\":\"%s\",\"block_size\":%llu,\"chunks\":%llu,\"bytes\":%llu,\"layers\":%llu,"
                  "\"kv_blocks\":%llu,\"kv_pool\":%llu,\"gbps\":%.3f%s%s}\n",
                  kind, static_cast<unsigned long long>(S), static_cast<unsigned long long>(chunks),
                  static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(layers),
                  static_cast<unsigned long long>(kv_blocks), static_cast<unsigned long long>(kv_pool), gbps,
                  ceiling > 0 ? (",\"ratio_to_contiguous\":" + std::to_string(gbps / ceiling)).c_str() : "",
                  more.c_str());
      std::fflush(stdout);
    };
    const double contiguous = measure(d, stream, seconds, bytes, [&] {
      return check(d, a.MemcpyAsync(dst, src, bytes, stream), "cuMemcpyAsync");
    });
    if (contiguous < 0) return 1;
    row("contiguous", contiguous, 0, "");
    const double contiguous_alone = measureAlone(d, stream, bytes, [&] {
      return check(d, a.MemcpyAsync(dst, src, bytes, stream), "cuMemcpyAsync");
    });
    if (contiguous_alone < 0) return 1;
    row("contiguous_alone", contiguous_alone, contiguous, "");
    const double contiguous_waited = measureAlone(
        d, stream, bytes, [&] { return check(d, a.MemcpyAsync(dst, src, bytes, stream), "cuMemcpyAsync"); }, 0, 25);
    if (contiguous_waited < 0) return 1;
    row("contiguous_waited", contiguous_waited, contiguous, "");
    const double per_chunk = measure(d, stream, seconds, bytes, [&] {
      for (const KvCopyRun& r : runs)
        if (!check(d, a.MemcpyAsync(r.dst, r.src, r.len, stream), "cuMemcpyAsync (a chunk)")) return false;
      return true;
    });
    if (per_chunk < 0) return 1;
    row("per_chunk", per_chunk, contiguous, "");
    if (a.MemcpyBatchAsync) {
      // The driver's batched copy (CUDA 13): every chunk in one call.
      std::vector<cu::DevicePtr> bdst(chunks), bsrc(chunks);
      std::vector<size_t> blen(chunks, S);
      for (uint64_t c = 0; c < chunks; ++c) {
        bdst[c] = runs[c].dst;
        bsrc[c] = runs[c].src;
      }
      cu::MemcpyAttributes attr{};
      attr.srcAccessOrder = cu::kMemcpySrcAccessOrderStream;
      const double batch = measure(d, stream, seconds, bytes, [&] {
        size_t first = 0;
        return check(d, a.MemcpyBatchAsync(bdst.data(), bsrc.data(), blen.data(), chunks, &attr, &first, 1, stream),
                     "cuMemcpyBatchAsync");
      });
      if (batch < 0) return 1;
      row("batch", batch, contiguous, "");
    } else {
      std::printf("{\"kind\":\"batch\",\"block_size\":%llu,\"skipped\":\"the driver has no cuMemcpyBatchAsync\"}\n",
                  static_cast<unsigned long long>(S));
    }
    if (!no_kernel.empty()) {
      std::printf("{\"kind\":\"gather\",\"block_size\":%llu,\"skipped\":\"%s\"}\n", static_cast<unsigned long long>(S),
                  no_kernel.c_str());
    } else {
      std::vector<uint64_t> grids = {chunks};  // one CTA per chunk: the whole GPU
      for (uint64_t c : ctas) grids.push_back(std::min(c, chunks));
      for (size_t g = 0; g < grids.size(); ++g) {
        unsigned n = static_cast<unsigned>(chunks);
        void* params[] = {&runs_dev, &n};
        auto launch = [&] {
          return check(d, a.LaunchKernel(kernel, static_cast<unsigned>(grids[g]), 1, 1, static_cast<unsigned>(cta_threads),
                                         1, 1, 0, stream, params, nullptr),
                       "cuLaunchKernel");
        };
        // Checked first: the destination zeroed, one launch, every chunk compared with its source.
        bool verified = d->bindDevice(dst_dev).ok() && check(d, a.MemsetD8(dst, 0, pool_bytes), "cuMemsetD8") &&
                        d->bindDevice(dev).ok() && launch() && check(d, a.StreamSynchronize(stream), "cuStreamSynchronize");
        std::vector<uint64_t> got(S / 8);
        for (uint64_t c = 0; c < chunks && verified; ++c) {
          verified = check(d, a.Memcpy(reinterpret_cast<cu::DevicePtr>(got.data()), runs[c].dst, S), "cuMemcpy");
          const uint64_t first = (runs[c].src - src) / 8;
          for (uint64_t w = 0; w < got.size() && verified; ++w) verified = got[w] == word(first + w);
        }
        const double gbps = measure(d, stream, seconds, bytes, launch);
        if (gbps < 0) return 1;
        if (g == 0) {
          const double alone = measureAlone(d, stream, bytes, launch);
          if (alone < 0) return 1;
          row("gather_alone", alone, contiguous, ",\"ctas\":" + std::to_string(grids[g]));
        }
        const std::string limit = g == 0 ? "all" : std::to_string(ctas[g - 1]);
        row("gather", gbps, contiguous,
            ",\"ctas\":" + std::to_string(grids[g]) + ",\"ctas_limit\":\"" + limit + "\",\"verified\":" +
                (verified ? "true" : "false"));
        if (!verified) return std::fprintf(stderr, "kv_gpu_baseline: the gather kernel's copy differs\n"), 3;
      }
    }
    a.MemFree(runs_dev);
    a.MemFree(src);
    (void)d->bindDevice(dst_dev);
    a.MemFree(dst);
    (void)d->bindDevice(dev);
  }
  a.StreamDestroy(stream);
  return 0;
}
