// bench/file_blocks.sh's helper: a paged KV cache offloaded to a file.
// --blocks N blocks of --block-size bytes lie scattered in local memory
// (host, or GPU memory through the CUDA driver: --location cuda:N) and back
// to back in one file (each followed by --gap bytes of the file nobody
// asks for). Each round posts them as one block request (a plan, prepared
// once) and moves the same number of bytes as 1 MiB requests (contiguous
// on both sides, the file's first bytes, from memory --mem-offset bytes
// into the region: the same path), interleaved; prints one JSON line
// with the medians, their ratio, and the file transport's counters per
// block request (how many runs went in how many I/Os).
//
//   file_blocks --file PATH [--blocks 8000] [--block-size 32768] [--gap 0]
//               [--op read|write] [--rounds 7] [--location cpu|cuda:N]
//               [--mem-offset 0] [--set KEY=VALUE]... [--no-verify]
//
// --mem-offset B puts every block B bytes past its slot's start (B not a
// multiple of the O_DIRECT memory alignment: the unaligned, bounced path).
//
// The file is grown to what the layout needs (pattern bytes) and kept.
// Verification (after the rounds): reads: every block holds the file's
// bytes; writes: the file holds every block's bytes (read back with pread).
// Exit: 0 ok, 1 a transfer or the verification failed, 2 bad usage or no
// GPU for --location cuda:N.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"
#include "hawser/engine.h"
#include "tools/pattern.h"

using namespace hawser;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kSeedFile = 0x6b76, kSeedBlocks = 0x6b77;

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "file_blocks: %s: %s\n", what.c_str(), s.toString().c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds from submit to the end of the batch.
template <class F>
Status timed(TransferEngine& e, F&& submit, double& seconds, size_t capacity = 1) {
  BatchID b;
  Status s = e.allocateBatchID(capacity, b);
  if (!s.ok()) return s;
  const auto t0 = Clock::now();
  s = submit(b);
  if (s.ok()) s = e.waitTransfer(b, std::chrono::seconds(600));
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  TransferStatus st;
  if (s.ok()) s = e.getBatchTransferStatus(b, st);
  if (s.ok() && st.s != TransferState::kCompleted)
    s = st.error.ok() ? Status(Code::kInternal, "batch ended " + std::string(stateName(st.s))) : st.error;
  Status f = e.freeBatchID(b);
  return s.ok() ? f : s;
}

// The file transport's counters now.
std::map<std::string, uint64_t> fileCounters(TransferEngine& e) {
  auto st = e.stats().transports;
  auto it = std::find_if(st.begin(), st.end(), [](const auto& t) { return t.transport == "file"; });
  return it == st.end() ? std::map<std::string, uint64_t>{} : std::map<std::string, uint64_t>(it->counters.begin(),
                                                                                                it->counters.end());
}

// Local memory: host (mmap) or one GPU's (cuMemAlloc), with host copies in and out.
struct Local {
  int device = -1;
  char* p = nullptr;
  size_t n = 0;
  const gpu::CudaDriver* d = nullptr;

  Status make(const std::string& location, size_t bytes) {
    n = bytes;
    if (location.rfind("cuda:", 0) == 0) {
      device = std::atoi(location.c_str() + 5);
      d = gpu::CudaDriver::load(std::getenv("HAWSER_GPU_CUDA_DRIVER") ? std::getenv("HAWSER_GPU_CUDA_DRIVER")
                                                                       : "libcuda.so.1");
      if (!d) return {Code::kNotSupported, "no CUDA driver: " + gpu::CudaDriver::reason()};
      Status s = d->bindDevice(device);
      if (!s.ok()) return s;
      gpu::cu::DevicePtr dp = 0;
      if (d->api().MemAlloc(&dp, bytes) != gpu::cu::kSuccess) return {Code::kInternal, "cuMemAlloc failed"};
      p = reinterpret_cast<char*>(dp);
      return Status::OK();
    }
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return {Code::kInternal, "mmap failed"};
    p = static_cast<char*>(m);
    std::memset(p, 0, bytes);
    return Status::OK();
  }
  ~Local() {
    if (!p) return;
    if (d) {
      (void)d->bindDevice(device);
      d->api().MemFree(reinterpret_cast<gpu::cu::DevicePtr>(p));
    } else {
      ::munmap(p, n);
    }
  }
  void upload(const std::vector<char>& host) const {
    if (!d) return (void)std::memcpy(p, host.data(), host.size());
    (void)d->bindDevice(device);
    d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(p), reinterpret_cast<gpu::cu::DevicePtr>(host.data()),
                    host.size());
  }
  std::vector<char> download() const {
    std::vector<char> host(n);
    if (!d) {
      std::memcpy(host.data(), p, n);
    } else {
      (void)d->bindDevice(device);
      d->api().Memcpy(reinterpret_cast<gpu::cu::DevicePtr>(host.data()), reinterpret_cast<gpu::cu::DevicePtr>(p), n);
    }
    return host;
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string file, op = "read", location = "cpu";
  uint64_t blocks = 8000, bs = 32768, gap = 0, mem_offset = 0;
  size_t rounds = 7;
  bool verify = true;
  EngineOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "file_blocks: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--file") file = next();
    else if (a == "--blocks") blocks = std::stoull(next());
    else if (a == "--block-size") bs = std::stoull(next());
    else if (a == "--gap") gap = std::stoull(next());
    else if (a == "--mem-offset") mem_offset = std::stoull(next());
    else if (a == "--op") op = next();
    else if (a == "--rounds") rounds = std::stoull(next());
    else if (a == "--location") location = next();
    else if (a == "--no-verify") verify = false;
    else if (a == "--set") {
      std::string kv = next();
      auto eq = kv.find('=');
      if (eq == std::string::npos) return std::fprintf(stderr, "file_blocks: --set wants KEY=VALUE\n"), 2;
      opts.config[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else {
      return std::fprintf(stderr, "file_blocks: unknown option %s (see the head of bench/file_blocks.cpp)\n",
                          a.c_str()),
             2;
    }
  }
  if (file.empty() || file[0] != '/' || blocks == 0 || bs == 0 || rounds == 0 || (op != "read" && op != "write"))
    return std::fprintf(stderr, "file_blocks: --file ABSOLUTE_PATH, --blocks/--block-size/--rounds > 0, --op read|write\n"),
           2;
  const OpCode opc = op == "read" ? OpCode::kRead : OpCode::kWrite;
  const uint64_t stride = bs + gap, bytes = blocks * bs, span = blocks * stride;
  const uint64_t slot_len = bs + mem_offset;  // a block and its offset in its slot

  // The file: at least `span` bytes, pattern(kSeedFile) of their offsets.
  {
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return std::perror(file.c_str()), 1;
    const off_t have = ::lseek(fd, 0, SEEK_END);
    std::vector<char> chunk(1 << 20);
    for (uint64_t off = 0; off < span; off += chunk.size()) {
      const uint64_t len = std::min<uint64_t>(chunk.size(), span - off);
      if (static_cast<uint64_t>(have) >= off + len && op == "write") continue;  // writes overwrite it anyway
      tools::fillPattern(chunk.data(), len, kSeedFile, off);
      if (::pwrite(fd, chunk.data(), len, static_cast<off_t>(off)) != static_cast<ssize_t>(len))
        return std::perror("pwrite"), 1;
    }
    ::fsync(fd);
    ::close(fd);
  }

  TransferEngine engine;
  Status s = engine.init("p2p", "file-blocks", "127.0.0.1", 0, opts);
  if (!s.ok()) return fail("init", s);
  // Blocks scattered over twice their bytes: block i in slot perm[i].
  Local local;
  if (!(s = local.make(location, 2 * blocks * slot_len)).ok()) {
    std::fprintf(stderr, "file_blocks: local memory %s: %s\n", location.c_str(), s.toString().c_str());
    return 2;
  }
  if (!(s = engine.registerLocalMemory(local.p, local.n, location == "cpu" ? "*" : location, false)).ok())
    return fail("register", s);
  std::vector<uint64_t> slot(blocks);
  std::iota(slot.begin(), slot.end(), 0);
  std::vector<uint64_t> all(2 * blocks);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(42));
  for (uint64_t i = 0; i < blocks; ++i) slot[i] = all[i];
  if (opc == OpCode::kWrite) {
    std::vector<char> host(local.n, 0);
    for (uint64_t i = 0; i < blocks; ++i)
      tools::fillPattern(host.data() + slot[i] * slot_len + mem_offset, bs, kSeedBlocks, i * stride);
    local.upload(host);
  }
  SegmentID seg;
  if (!(s = engine.openSegment("file://" + file, seg)).ok()) return fail("open segment", s);
  std::vector<Block> list(blocks);
  for (uint64_t i = 0; i < blocks; ++i) list[i] = Block{local.p + slot[i] * slot_len + mem_offset, i * stride, bs};
  PlanID plan;
  if (!(s = engine.prepareBlocks(opc, seg, list, plan)).ok()) return fail("prepare the blocks", s);
  std::vector<TransferRequest> big;
  for (uint64_t off = 0; off < bytes; off += 1 << 20)
    big.push_back({opc, local.p + mem_offset + off, seg, off, std::min<uint64_t>(1 << 20, bytes - off)});

  std::vector<double> blk_s, big_s;
  std::map<std::string, uint64_t> per_post;
  double el = 0;
  if (!(s = timed(engine, [&](BatchID b) { return engine.postPlan(b, plan); }, el)).ok()) return fail("warm-up", s);
  for (size_t r = 0; r < rounds; ++r) {
    auto before = fileCounters(engine);
    if (!(s = timed(engine, [&](BatchID b) { return engine.postPlan(b, plan); }, el)).ok())
      return fail("block request", s);
    blk_s.push_back(el);
    for (auto& [k, v] : fileCounters(engine)) per_post[k] += v - before[k];
    if (!(s = timed(engine, [&](BatchID b) { return engine.submitTransfer(b, big); }, el, big.size())).ok())
      return fail("1 MiB requests", s);
    big_s.push_back(el);
  }
  // The block request last, for the verification.
  if (!(s = timed(engine, [&](BatchID b) { return engine.postPlan(b, plan); }, el)).ok()) return fail("post", s);
  std::string verified = verify ? "yes" : "skipped";
  if (verify && opc == OpCode::kRead) {
    const auto host = local.download();
    for (uint64_t i = 0; i < blocks && verified == "yes"; ++i)
      if (tools::checkPattern(host.data() + slot[i] * slot_len + mem_offset, bs, kSeedFile, i * stride) >= 0)
        verified = "NO: block " + std::to_string(i);
  } else if (verify) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    std::vector<char> buf(bs);
    for (uint64_t i = 0; i < blocks && verified == "yes"; ++i)
      if (::pread(fd, buf.data(), bs, static_cast<off_t>(i * stride)) != static_cast<ssize_t>(bs) ||
          tools::checkPattern(buf.data(), bs, kSeedBlocks, i * stride) >= 0)
        verified = "NO: block " + std::to_string(i);
    ::close(fd);
  }
  const double blk = static_cast<double>(bytes) / median(blk_s) / 1e9;
  const double mib = static_cast<double>(bytes) / median(big_s) / 1e9;
  std::string counters;
  for (const char* k : {"coalesced_runs", "coalesced_ios", "vectored_ios", "direct_slices", "bounce_slices",
                        "buffered_slices", "uring_ops", "posix_ops", "gpu_staged_uring_slices", "gpu_staged_posix_slices",
                        "gpu_compat_slices", "gpu_gds_slices", "gpu_copies", "gpu_copy_runs", "cufile_ops"}) {
    auto it = per_post.find(k);
    if (it == per_post.end()) continue;  // a counter this build does not have
    counters += std::string(counters.empty() ? "" : ",") + "\"" + k + "\":" + std::to_string(it->second / rounds);
  }
  std::printf("{\"op\":\"%s\",\"location\":\"%s\",\"blocks\":%llu,\"block_size\":%llu,\"gap\":%llu,"
              "\"mem_offset\":%llu,\"rounds\":%zu,"
              "\"block_gbps\":%.4f,\"mib_requests_gbps\":%.4f,\"ratio\":%.4f,\"verified\":%s,\"per_block_request\":{%s}}\n",
              op.c_str(), location.c_str(), static_cast<unsigned long long>(blocks),
              static_cast<unsigned long long>(bs), static_cast<unsigned long long>(gap),
              static_cast<unsigned long long>(mem_offset), rounds, blk, mib, blk / mib,
              verified == "yes" ? "true" : "false", counters.c_str());
  if (verified.rfind("NO", 0) == 0) std::fprintf(stderr, "file_blocks: verification failed: %s\n", verified.c_str());
  (void)engine.releasePlan(plan);
  (void)engine.unregisterLocalMemory(local.p);
  return verified.rfind("NO", 0) == 0 ? 1 : 0;
}
