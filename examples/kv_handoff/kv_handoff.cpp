// A KV cache handoff from a prefill process to a decode process, as
// disaggregated inference serving does it: prefill computes a request's KV
// cache, writes every block of every layer into the decode process's cache
// with ONE block request that carries a signal named for the request, and
// decode waits on that signal: it learns that the KV landed, or that it never
// will (prefill's transfer failed, or prefill died or became unreachable),
// within a bound, instead of waiting out a timeout.
//
//   kv_handoff          KV caches in host memory (runs anywhere)
//   kv_handoff --gpu    KV caches in GPU memory (GPU 0 for both processes)
//
// Each process keeps its KV cache paged, as vLLM does: for every layer a K
// and a V tensor of kPoolBlocks blocks, a block holding 16 tokens x 8 heads
// x 128 dims of bf16 (32 KiB). A request's tokens live in the blocks its
// block table names, and each process has its own table: the same token
// block sits in different places on the two sides. The two processes swap
// what they must know (decode's segment, cache address and block table;
// prefill's segment) through pipes here; in a server, that is your
// scheduler's RPC.
#include <hawser/device_memory.h>
#include <hawser/engine.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr size_t kLayers = 8;
constexpr size_t kBlockBytes = 16 * 8 * 128 * 2;  // tokens x heads x head dims x sizeof(bf16)
constexpr size_t kPoolBlocks = 64;                // blocks per K or V tensor, on each side
constexpr size_t kRequestBlocks = 20;             // the request: 20 blocks of 16 tokens
constexpr size_t kCacheBytes = kLayers * 2 * kPoolBlocks * kBlockBytes;
const char* const kRequest = "request 42";

// Where block `block` of layer `layer`'s K (kv 0) or V (kv 1) tensor lies in a cache.
size_t blockOffset(size_t layer, size_t kv, size_t block) {
  return ((layer * 2 + kv) * kPoolBlocks + block) * kBlockBytes;
}

// The request's KV values, as prefill "computes" them: each 4-byte word of
// token block `i` of layer `layer`'s K or V says where it belongs, so a
// block (or a piece of one) that lands in the wrong place shows.
void computeKv(size_t layer, size_t kv, size_t i, std::vector<uint32_t>& out) {
  for (size_t w = 0; w < out.size(); ++w) out[w] = static_cast<uint32_t>(layer << 24 | kv << 23 | i << 13 | w);
}

// A process's block table: the blocks of its cache the request got (the
// cache manager's choice; random here).
std::vector<size_t> blockTable(unsigned seed) {
  std::vector<size_t> all(kPoolBlocks);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  return {all.begin(), all.begin() + kRequestBlocks};
}

bool ok(const hawser::Status& s, const char* what) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
  return s.ok();
}

// A KV cache in host or GPU memory, and copies in and out of it.
struct KvCache {
  char* data = nullptr;
  bool gpu = false;
  std::vector<char> host;

  hawser::Status allocate(bool on_gpu) {
    gpu = on_gpu;
    if (!gpu) {
      host.assign(kCacheBytes, 0);
      data = host.data();
      return hawser::Status::OK();
    }
    hawser::Status s = hawser::loadCudaDriver();
    if (s.ok()) s = hawser::allocateDeviceMemory(0, kCacheBytes, reinterpret_cast<void**>(&data));
    return s;
  }
  ~KvCache() {
    if (gpu && data) (void)hawser::freeDeviceMemory(data);
  }
  hawser::Status put(size_t off, const void* src, size_t n) {
    if (gpu) return hawser::copyMemory(data + off, src, n);
    std::memcpy(data + off, src, n);
    return hawser::Status::OK();
  }
  hawser::Status get(size_t off, void* dst, size_t n) {
    if (gpu) return hawser::copyMemory(dst, data + off, n);
    std::memcpy(dst, data + off, n);
    return hawser::Status::OK();
  }
};

// An engine, and the process's KV cache registered with it.
bool start(hawser::TransferEngine& engine, KvCache& cache, bool gpu, const std::string& who) {
  return ok(engine.init("p2p", who, "127.0.0.1", 0), (who + ": init").c_str()) &&
         ok(cache.allocate(gpu), (who + ": KV cache").c_str()) &&
         ok(engine.registerLocalMemory(cache.data, kCacheBytes), (who + ": register the KV cache").c_str());
}

int prefill(bool gpu, int from_decode, int to_decode) {
  hawser::TransferEngine engine;
  KvCache cache;
  if (!start(engine, cache, gpu, "prefill")) return 1;
  // Who we are, for decode's wait.
  const std::string me = engine.segmentName() + "\n";
  if (::write(to_decode, me.data(), me.size()) != static_cast<ssize_t>(me.size()))
    return std::fprintf(stderr, "prefill: cannot reach decode\n"), 1;
  // Compute the request's KV into our own blocks.
  const std::vector<size_t> mine = blockTable(1);
  std::vector<uint32_t> kv(kBlockBytes / 4);
  for (size_t layer = 0; layer < kLayers; ++layer)
    for (size_t k = 0; k < 2; ++k)
      for (size_t i = 0; i < kRequestBlocks; ++i) {
        computeKv(layer, k, i, kv);
        if (!ok(cache.put(blockOffset(layer, k, mine[i]), kv.data(), kBlockBytes), "prefill: compute")) return 1;
      }

  // Where decode wants it: its segment, its cache's address, its block table.
  FILE* in = fdopen(from_decode, "r");
  char segment[256] = {};
  unsigned long long remote_cache = 0;
  std::vector<size_t> theirs(kRequestBlocks);
  bool got = in && std::fscanf(in, "%255s %llu", segment, &remote_cache) == 2;
  for (size_t i = 0; got && i < kRequestBlocks; ++i) got = std::fscanf(in, "%zu", &theirs[i]) == 1;
  if (!got) return std::fprintf(stderr, "prefill: no block table from decode\n"), 1;

  // Every block of every layer, K and V: ours -> theirs, one block request,
  // which counts toward signal kRequest at decode.
  std::vector<hawser::Block> blocks;
  for (size_t layer = 0; layer < kLayers; ++layer)
    for (size_t k = 0; k < 2; ++k)
      for (size_t i = 0; i < kRequestBlocks; ++i)
        blocks.push_back({cache.data + blockOffset(layer, k, mine[i]), remote_cache + blockOffset(layer, k, theirs[i]),
                          kBlockBytes});
  hawser::SegmentID decode;
  hawser::BatchID batch;
  hawser::TransferStatus st;
  if (!ok(engine.openSegment(segment, decode), "prefill: open decode's segment") ||
      !ok(engine.allocateBatchID(1, batch), "prefill: batch") ||
      !ok(engine.submitBlocks(batch, hawser::OpCode::kWrite, decode, blocks, hawser::Signal{kRequest}),
          "prefill: submit the blocks") ||
      !ok(engine.waitTransfer(batch, std::chrono::seconds(30)), "prefill: wait") ||
      !ok(engine.getBatchTransferStatus(batch, st), "prefill: status"))
    return 1;
  (void)engine.freeBatchID(batch);
  // waitTransfer returned once decode's engine took the outcome: decode knows.
  if (st.s != hawser::TransferState::kCompleted) return ok(st.error, "prefill: the block request"), 1;
  std::printf("prefill: %s: %zu blocks (%zu layers x K/V x %zu) written as one block request with a signal\n",
              kRequest, blocks.size(), kLayers, kRequestBlocks);
  return 0;
}

int decode(bool gpu, int to_prefill, int from_prefill) {
  hawser::TransferEngine engine;
  KvCache cache;
  if (!start(engine, cache, gpu, "decode")) return 1;
  // The blocks our cache gives the request, and where they are: to prefill.
  const std::vector<size_t> mine = blockTable(2);
  std::string msg = engine.segmentName() + " " + std::to_string(reinterpret_cast<uintptr_t>(cache.data));
  for (size_t b : mine) msg += ' ' + std::to_string(b);
  msg += '\n';
  if (::write(to_prefill, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()))
    return std::fprintf(stderr, "decode: cannot reach prefill\n"), 1;

  // Decode waits on the request's signal from prefill: one request (the
  // block request) must land. COMPLETED means its bytes are in our cache;
  // FAILED says why they never will be (a server frees the request's blocks
  // and schedules it again); TIMEOUT comes only at the deadline.
  FILE* in = fdopen(from_prefill, "r");
  char from[256] = {};
  if (!in || std::fscanf(in, "%255s", from) != 1) return std::fprintf(stderr, "decode: no word from prefill\n"), 1;
  hawser::SignalResult got;
  if (!ok(engine.waitSignal(from, kRequest, 1, std::chrono::seconds(30), got), "decode: wait")) return 1;
  if (got.s != hawser::SignalState::kCompleted)
    return std::fprintf(stderr, "decode: %s from %s: %s (%s): %s\n", kRequest, from,
                        std::string(hawser::signalStateName(got.s)).c_str(),
                        std::string(hawser::signalReasonName(got.reason)).c_str(), got.error.toString().c_str()),
           1;
  std::vector<uint32_t> want(kBlockBytes / 4), have(kBlockBytes / 4);
  for (size_t layer = 0; layer < kLayers; ++layer)
    for (size_t k = 0; k < 2; ++k)
      for (size_t i = 0; i < kRequestBlocks; ++i) {
        computeKv(layer, k, i, want);
        if (!ok(cache.get(blockOffset(layer, k, mine[i]), have.data(), kBlockBytes), "decode: read the cache")) return 1;
        if (want != have)
          return std::fprintf(stderr, "decode: layer %zu %s block %zu is wrong\n", layer, k ? "V" : "K", i), 1;
      }
  std::printf("decode: %s: KV of %zu layers x K/V x %zu blocks of %zu KiB in %s memory, signaled by %s, verified\n",
              kRequest, kLayers, kRequestBlocks, kBlockBytes >> 10, gpu ? "GPU" : "host", from);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu = argc == 2 && std::strcmp(argv[1], "--gpu") == 0;
  if (argc > 2 || (argc == 2 && !gpu)) return std::fprintf(stderr, "usage: kv_handoff [--gpu]\n"), 2;
  int pipe_fds[2], back[2];  // decode -> prefill, prefill -> decode
  if (::pipe(pipe_fds) != 0 || ::pipe(back) != 0) return std::perror("pipe"), 1;
  // Two processes; each makes its engine (and GPU context) after the fork.
  const pid_t child = ::fork();
  if (child < 0) return std::perror("fork"), 1;
  if (child == 0) {
    ::close(pipe_fds[1]);
    ::close(back[0]);
    std::exit(prefill(gpu, pipe_fds[0], back[1]));
  }
  ::close(pipe_fds[0]);
  ::close(back[1]);
  const int rc = decode(gpu, pipe_fds[1], back[0]);
  ::close(pipe_fds[1]);  // a decode that failed before sending its table lets prefill see the end
  int status = 0;
  ::waitpid(child, &status, 0);
  const int prefill_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return rc != 0 ? rc : prefill_rc;
}
