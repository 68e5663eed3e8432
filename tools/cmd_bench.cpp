// `hawser bench`: an initiator driving READ or WRITE batches against a
// segment (a `hawser serve` target, or a file segment), with verification,
// live progress and a summary (text, or one JSON object on the last line).
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"
#include "tools/bench_blocks.h"
#include "tools/bench_common.h"
#include "tools/bench_kv.h"
#include "tools/commands.h"
#include "tools/location.h"
#include "tools/metrics_json.h"
#include "tools/pattern.h"

namespace hawser::tools {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOpts : BenchBasics {
  BenchOpts() { block_size = "1M"; }
  size_t batch_size = 32;
  size_t threads = 2;
  size_t depth = 1;         // batches in flight per thread
  std::string span;         // memory each thread's requests cycle through, per side ("": a block per request)
  bool huge_pages = false;  // local buffers on reserved huge pages (MAP_HUGETLB)
  int cpu_pid = 0;          // a local process (the target) whose CPU time is counted too
  double seconds = 0;
  std::string total;
  bool no_verify = false;
  std::string target_offset = "0";
  std::string local_location = "cpu";  // cpu, or cuda:N: where the initiator's buffers live
  // --blocks N: block requests instead (tools/bench_blocks.h).
  size_t blocks = 0;
  std::string layout = "contiguous";
  // --layout kv: a paged KV cache (tools/bench_kv.h).
  size_t layers = 8;
  size_t kv_blocks = 500;
  size_t kv_pool = 0;
  bool kv_plan = false;
  size_t kv_repeat = 1;
};

void fail(const std::string& what, const Status& s) { fmt::print(stderr, "hawser bench: {}: {}\n", what, s.toString()); }

// Moves [local, local+len) <-> target [off, off+len) in chunks of `block`
// with one batch per chunk group, for preparation and verification.
Status bulk(TransferEngine& e, SegmentID seg, OpCode op, char* local, uint64_t off, uint64_t len, uint64_t block,
            size_t batch) {
  uint64_t done = 0;
  while (done < len) {
    std::vector<TransferRequest> reqs;
    while (done < len && reqs.size() < batch) {
      uint64_t n = std::min(block, len - done);
      reqs.push_back(TransferRequest{op, local + done, seg, off + done, n});
      done += n;
    }
    Status s = e.transferSync(reqs, std::chrono::seconds(120));
    if (!s.ok()) return s;
  }
  return Status::OK();
}

// CPU time (user + system) of this process, all threads.
double selfCpuSeconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(r.ru_utime) + sec(r.ru_stime);
}

// CPU time of process `pid` (utime + stime of /proc/PID/stat), or -1.
double procCpuSeconds(int pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');
  if (close == std::string::npos) return -1;
  // After "(comm) ": state is field 3 of proc(5); utime and stime are fields 14 and 15.
  unsigned long long ut = 0, st = 0;
  if (std::sscanf(s.c_str() + close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  return static_cast<double>(ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

int runBench(const BenchOpts& o) {
  auto block = parseSize(o.block_size);
  if (!block || *block == 0) {
    fmt::print(stderr, "hawser bench: --block-size '{}' is not a size\n", o.block_size);
    return 2;
  }
  auto base_off = parseSize(o.target_offset);
  if (!base_off) {
    fmt::print(stderr, "hawser bench: --target-offset '{}' is not a size\n", o.target_offset);
    return 2;
  }
  if (o.op != "read" && o.op != "write") {
    fmt::print(stderr, "hawser bench: --op must be read or write, got '{}'\n", o.op);
    return 2;
  }
  if (o.batch_size == 0 || o.threads == 0 || o.depth == 0) {
    fmt::print(stderr, "hawser bench: --batch-size, --threads and --depth must be >= 1\n");
    return 2;
  }
  // Each thread owns batch_size x depth slots, one set per batch in flight,
  // unless --span makes its requests share fewer: request j of the thread
  // uses its slot j % per_thread, local and target side alike.
  size_t per_thread = o.batch_size * o.depth;
  if (!o.span.empty()) {
    auto span = parseSize(o.span);
    if (!span || *span == 0 || *span % *block != 0) {
      fmt::print(stderr, "hawser bench: --span '{}' is not a multiple of --block-size {}\n", o.span, *block);
      return 2;
    }
    if (*span / *block > per_thread) {
      fmt::print(stderr,
                 "hawser bench: --span {} is more than the {} blocks of {} a thread has in flight (--batch-size x "
                 "--depth); each request keeps one block\n",
                 *span, per_thread, *block);
      return 2;
    }
    per_thread = *span / *block;
  }
  if (o.cpu_pid > 0 && procCpuSeconds(o.cpu_pid) < 0) {
    fmt::print(stderr, "hawser bench: --cpu-pid {}: no such process here\n", o.cpu_pid);
    return 2;
  }
  uint64_t total_bytes = 0;
  if (!o.total.empty()) {
    auto t = parseSize(o.total);
    if (!t || *t == 0) {
      fmt::print(stderr, "hawser bench: --total '{}' is not a size\n", o.total);
      return 2;
    }
    total_bytes = *t;
  }
  double seconds = o.seconds > 0 ? o.seconds : (total_bytes ? 0 : 5.0);
  const OpCode op = o.op == "read" ? OpCode::kRead : OpCode::kWrite;
  const std::optional<int> place = parseMemoryPlace(o.local_location);
  if (!place) {
    fmt::print(stderr, "hawser bench: --local-location '{}' is not cpu or cuda:N\n", o.local_location);
    return 2;
  }
  const int gpu = *place;  // the local buffers' GPU, or -1: host memory

  TransferEngine engine;
  // With a named store (etcd) every engine needs its own name: default to a
  // per-process one so several benches can run at once.
  std::string name = o.name;
  if (name.empty()) name = o.metadata == "p2p" ? o.host : fmt::format("bench-{}-{}", o.host, ::getpid());
  Status s = engine.init(o.metadata, name, o.host, 0);
  if (!s.ok()) return fail("init", s), 1;
  SegmentID seg;
  s = engine.openSegment(o.target, seg);
  if (!s.ok()) return fail(fmt::format("open segment '{}'", o.target), s), 1;
  std::vector<SegmentBuffer> bufs;
  s = engine.segmentBuffers(seg, bufs);
  if (!s.ok()) return fail("segment buffers", s), 1;
  if (bufs.empty()) {
    fmt::print(stderr, "hawser bench: segment '{}' exposes no buffers\n", o.target);
    return 1;
  }
  // Target space: memory -> its first buffer; file -> the whole logical space.
  const bool is_file = isFileSegment(o.target, bufs);
  uint64_t tbase = is_file ? 0 : bufs[0].addr;
  uint64_t tlen = is_file ? bufs.back().addr + bufs.back().length : bufs[0].length;
  if (*base_off >= tlen) {
    fmt::print(stderr, "hawser bench: --target-offset {} is past the segment's {} bytes\n", *base_off, tlen);
    return 2;
  }
  tbase += *base_off;
  tlen -= *base_off;
  const uint64_t slots_per_target = tlen / *block;
  if (slots_per_target == 0) {
    fmt::print(stderr, "hawser bench: block size {} is larger than the target's {} bytes\n", *block, tlen);
    return 2;
  }
  const size_t nslots = o.threads * per_thread;
  const uint64_t huge = 2ull << 20;
  const uint64_t local_len = o.huge_pages ? (nslots * *block + huge - 1) / huge * huge : nslots * *block;
  void* lmem = ::mmap(nullptr, local_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (o.huge_pages ? MAP_HUGETLB : 0), -1, 0);
  if (lmem == MAP_FAILED && o.huge_pages) {
    fmt::print(stderr,
               "hawser bench: --huge-pages: cannot map {} bytes of 2 MiB huge pages ({}); reserve {} more in "
               "/proc/sys/vm/nr_hugepages\n",
               local_len, std::strerror(errno), local_len / huge);
    return 1;
  }
  if (lmem != MAP_FAILED && !o.huge_pages) {
    // Transparent huge pages (THP is often "madvise" only): a 1 MiB O_DIRECT
    // I/O into scattered 4 KiB pages needs ~256 block segments, and on
    // virtio-blk such requests exhaust the virtqueue and get requeued (reads
    // ran at ~60% of fio's speed). Physically contiguous memory takes a few
    // segments. Best effort; then fault everything in before timing.
    (void)::madvise(lmem, local_len, MADV_HUGEPAGE);
  }
  if (lmem != MAP_FAILED) std::memset(lmem, 0, local_len);
  if (lmem == MAP_FAILED) {
    fmt::print(stderr, "hawser bench: cannot allocate {} bytes of local memory\n", local_len);
    return 1;
  }
  // With --local-location cuda:N the buffers the engine moves are GPU
  // memory; `host` (the mmap above) is their mirror for patterns and checks.
  char* host = static_cast<char*>(lmem);
  char* local = host;
  if (gpu >= 0) {
    void* d = nullptr;
    if (!(s = loadCudaDriver()).ok()) return fail("--local-location " + o.local_location, s), 1;
    if (!(s = allocateDeviceMemory(gpu, local_len, &d)).ok()) return fail("allocate GPU memory", s), 1;
    local = static_cast<char*>(d);
  }
  // Host mirror -> local buffers and back (no-ops for host memory).
  auto push = [&](uint64_t off, uint64_t n) {
    return gpu < 0 ? Status::OK() : copyMemory(local + off, host + off, n);
  };
  auto pull = [&](uint64_t off, uint64_t n) {
    return gpu < 0 ? Status::OK() : copyMemory(host + off, local + off, n);
  };
  s = engine.registerLocalMemory(local, local_len, "*", false);
  if (!s.ok()) return fail("register local memory", s), 1;
  auto targetOf = [&](size_t slot) { return (slot % slots_per_target) * *block; };  // relative to tbase
  const size_t used_slots = std::min<uint64_t>(nslots, slots_per_target);

  const bool verify = !o.no_verify;
  std::random_device rd;
  const uint64_t seed_read = (static_cast<uint64_t>(rd()) << 32) | rd();
  const uint64_t seed_write = seed_read ^ 0x5a5a5a5a5a5a5a5aULL;
  // Prepare: the target's used blocks hold pattern(seed_read); for writes the
  // local slots hold pattern(seed_write) of their target offsets.
  if (verify) {
    for (size_t k = 0; k < used_slots; ++k) fillPattern(host + k * *block, *block, seed_read, targetOf(k));
    if (!(s = push(0, used_slots * *block)).ok()) return fail("copy the pattern to GPU memory", s), 1;
    for (size_t k = 0; k < used_slots; ++k) {
      s = bulk(engine, seg, OpCode::kWrite, local + k * *block, tbase + targetOf(k), *block, *block, 1);
      if (!s.ok()) return fail("prepare target pattern", s), 1;
    }
  }
  if (op == OpCode::kWrite)
    for (size_t k = 0; k < nslots; ++k) fillPattern(host + k * *block, *block, seed_write, targetOf(k));
  else
    std::memset(host, 0, local_len);
  if (!(s = push(0, local_len)).ok()) return fail("copy to GPU memory", s), 1;

  const EngineStats stats_before = engine.stats();
  std::atomic<uint64_t> bytes_done{0}, ops_done{0}, budget{0};
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  // Threads that completed a batch (read or write): with --total a fast transport may use up
  // the budget before a thread gets to run, and its slots then keep the
  // prepared pattern.
  std::vector<std::atomic<bool>> wrote(o.threads);
  std::mutex err_mu;
  Status first_error;
  std::mutex lat_mu;
  std::vector<double> lat_us;
  const uint64_t batch_bytes = o.batch_size * *block;
  auto failed = [&](const Status& st) {
    std::lock_guard lk(err_mu);
    if (first_error.ok()) first_error = st;
    errors++;
    stop = true;
  };
  // One thread: batches of its own slots, `depth` of them in flight; with
  // depth 1, transferSync (submit, wait, free) one after another.
  auto worker = [&](size_t t) {
    pthread_setname_np(pthread_self(), "bench");  // top -H, perf
    std::vector<std::vector<TransferRequest>> reqs(o.depth, std::vector<TransferRequest>(o.batch_size));
    for (size_t d = 0; d < o.depth; ++d)
      for (size_t i = 0; i < o.batch_size; ++i) {
        size_t k = t * per_thread + (d * o.batch_size + i) % per_thread;
        reqs[d][i] = TransferRequest{op, local + k * *block, seg, tbase + targetOf(k), *block};
      }
    std::vector<double> mine;
    auto done = [&](Clock::time_point b0) {
      mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - b0).count());
      wrote[t].store(true, std::memory_order_relaxed);
      bytes_done += batch_bytes;
      ops_done += o.batch_size;
    };
    auto more = [&] {
      return !stop.load(std::memory_order_relaxed) && !(total_bytes && budget.fetch_add(batch_bytes) >= total_bytes);
    };
    if (o.depth == 1) {
      while (more()) {
        auto b0 = Clock::now();
        Status st = engine.transferSync(reqs[0], std::chrono::seconds(60));
        if (!st.ok()) {
          failed(st);
          break;
        }
        done(b0);
      }
    } else {
      struct Flight {
        BatchID id = kInvalidBatch;
        Clock::time_point t0;
      };
      std::vector<Flight> ring(o.depth);
      auto launch = [&](size_t d) {
        if (!more()) return;
        Flight f{kInvalidBatch, Clock::now()};
        Status st = engine.allocateBatchID(o.batch_size, f.id);
        if (st.ok()) st = engine.submitTransfer(f.id, reqs[d]);
        if (!st.ok()) {
          if (f.id != kInvalidBatch) (void)engine.freeBatchID(f.id);
          return failed(st);
        }
        ring[d] = f;
      };
      for (size_t d = 0; d < o.depth; ++d) launch(d);
      // Oldest first: wait, check, free, submit the same slots again.
      for (size_t d = 0, idle = 0; idle < o.depth; d = (d + 1) % o.depth) {
        Flight f = ring[d];
        if (f.id == kInvalidBatch) {
          ++idle;
          continue;
        }
        idle = 0;
        ring[d].id = kInvalidBatch;
        Status st = engine.waitTransfer(f.id, std::chrono::seconds(60));
        if (!st.ok()) {
          (void)engine.cancelTransfer(f.id);
          (void)engine.waitTransfer(f.id, std::chrono::seconds(5));
        }
        TransferStatus bs;
        if (st.ok()) st = engine.getBatchTransferStatus(f.id, bs);
        if (st.ok() && bs.s != TransferState::kCompleted)
          st = bs.error.ok() ? Status(Code::kInternal, fmt::format("batch ended {}", stateName(bs.s))) : bs.error;
        (void)engine.freeBatchID(f.id);
        if (!st.ok()) {
          failed(st);
          continue;
        }
        done(f.t0);
        launch(d);
      }
    }
    std::lock_guard lk(lat_mu);
    lat_us.insert(lat_us.end(), mine.begin(), mine.end());
  };
  const double cpu0 = selfCpuSeconds(), peer_cpu0 = o.cpu_pid > 0 ? procCpuSeconds(o.cpu_pid) : 0;
  auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 0; t < o.threads; ++t) workers.emplace_back(worker, t);
  const bool tty = ::isatty(2);
  auto last = t0;
  uint64_t last_bytes = 0;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto now = Clock::now();
    double el = std::chrono::duration<double>(now - t0).count();
    if (seconds > 0 && el >= seconds) stop = true;
    if (total_bytes && bytes_done.load() >= total_bytes) stop = true;
    bool all_done = stop.load();
    if (tty && (now - last >= std::chrono::milliseconds(500) || all_done)) {
      uint64_t b = bytes_done.load();
      double inst = (b - last_bytes) / std::chrono::duration<double>(now - last).count() / 1e9;
      fmt::print(stderr, "\r[{:6.1f}s] {:8.2f} GB/s now, {:10.3f} GB moved, {} ops   ", el, inst, b / 1e9,
                 ops_done.load());
      last = now;
      last_bytes = b;
    }
    if (all_done || errors) break;
  }
  for (auto& w : workers) w.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_s = selfCpuSeconds() - cpu0;
  const double peer_cpu_s = o.cpu_pid > 0 ? procCpuSeconds(o.cpu_pid) - peer_cpu0 : 0;
  if (tty) fmt::print(stderr, "\n");
  if (errors) {
    fail("transfer", first_error);
    return 1;
  }

  // Verify.
  bool verified = false;
  std::string verify_error;
  if (verify) {
    verified = true;
    if (op == OpCode::kRead) {
      if (!(s = pull(0, local_len)).ok()) {
        verified = false;
        verify_error = "copy from GPU memory failed: " + s.toString();
      }
      for (size_t k = 0; k < nslots && verified; ++k) {
        if (!wrote[k / per_thread].load()) continue;  // its thread ran no batch: nothing read there
        int64_t bad = checkPattern(host + k * *block, *block, seed_read, targetOf(k));
        if (bad >= 0) {
          verified = false;
          verify_error = fmt::format("read data mismatch at slot {} byte {} (target offset {})", k, bad,
                                     targetOf(k) + static_cast<uint64_t>(bad));
        }
      }
    } else {
      std::memset(host, 0, local_len);
      if (!(s = push(0, local_len)).ok()) return fail("copy to GPU memory", s), 1;
      for (size_t k = 0; k < used_slots && verified; ++k) {
        s = bulk(engine, seg, OpCode::kRead, local + k * *block, tbase + targetOf(k), *block, *block, 1);
        if (s.ok()) s = pull(k * *block, *block);
        if (!s.ok()) {
          verified = false;
          verify_error = "read-back failed: " + s.toString();
          break;
        }
        // The block holds the written pattern if a thread owning a slot that
        // maps to it ran a batch, else the prepared one.
        bool written = false;
        for (size_t j = k; j < nslots && !written; j += slots_per_target) written = wrote[j / per_thread].load();
        int64_t bad = checkPattern(host + k * *block, *block, written ? seed_write : seed_read, targetOf(k));
        if (bad >= 0) {
          verified = false;
          verify_error = fmt::format("written data mismatch at target offset {}", targetOf(k) + static_cast<uint64_t>(bad));
        }
      }
    }
  }
  uint64_t bytes = bytes_done.load();
  uint64_t ops = ops_done.load();
  double gbps = bytes / elapsed / 1e9;
  double p50 = pct(lat_us, 0.50), p99 = pct(lat_us, 0.99);
  // The transports that carried the timed transfers: those whose counters moved.
  const EngineStats stats_after = engine.stats();
  std::vector<std::string> carried;
  nlohmann::json jstats = nlohmann::json::object();
  for (auto& t : stats_after.transports) {
    nlohmann::json c = nlohmann::json::object();
    bool moved = false;
    for (auto& [k, v] : t.counters) {
      c[k] = v;
      for (auto& b : stats_before.transports)
        if (b.transport == t.transport)
          for (auto& [bk, bv] : b.counters) moved |= bk == k && bv != v;
    }
    jstats[t.transport] = c;
    if (moved) carried.push_back(t.transport);
  }
  if (!o.json) {
    fmt::print("op {}  block {}  batch {}  depth {}  span {}  threads {}  local {}  target {}  transport {}\n", o.op,
               *block, o.batch_size, o.depth, per_thread * *block, o.threads, gpu >= 0 ? o.local_location : "cpu",
               o.target, fmt::join(carried, "+"));
    fmt::print("moved {:.3f} GB in {:.2f} s: {:.3f} GB/s, {:.0f} ops/s, batch latency p50 {:.0f} us p99 {:.0f} us\n",
               bytes / 1e9, elapsed, gbps, ops / elapsed, p50, p99);
    fmt::print("cpu: {:.2f} cores busy here{}\n", cpu_s / elapsed,
               o.cpu_pid > 0 ? fmt::format(", {:.2f} in process {}", peer_cpu_s / elapsed, o.cpu_pid) : "");
    fmt::print("verified: {}{}\n", verify ? (verified ? "yes" : "NO") : "skipped (--no-verify)",
               verify_error.empty() ? "" : " — " + verify_error);
  } else {
    if (!verify_error.empty()) fmt::print(stderr, "hawser bench: {}\n", verify_error);
    nlohmann::json j;
    j["op"] = o.op;
    j["bytes"] = bytes;
    j["seconds"] = elapsed;
    j["gbps"] = gbps;
    j["ops_per_s"] = ops / elapsed;
    j["p50_us"] = p50;
    j["p99_us"] = p99;
    j["cpu_s"] = cpu_s;  // this process, over the timed run
    if (o.cpu_pid > 0) j["peer_cpu_s"] = peer_cpu_s;
    j["depth"] = o.depth;
    j["span"] = per_thread * *block;  // per thread and side
    j["verified"] = verified;
    j["block_size"] = *block;
    j["batch_size"] = o.batch_size;
    j["threads"] = o.threads;
    j["target"] = o.target;
    j["local_location"] = gpu >= 0 ? o.local_location : "cpu";
    j["transports"] = carried;  // the ones that carried the data
    j["installed_transports"] = engine.transports();
    j["stats"] = jstats;
    j["metrics"] = metricsJson(stats_after.metrics);  // since the engine started (pattern preparation included)
    fmt::print("{}\n", j.dump());
  }
  (void)engine.unregisterLocalMemory(local);
  if (gpu >= 0) (void)freeDeviceMemory(local);
  ::munmap(lmem, local_len);
  return verify && !verified ? 3 : 0;
}

}  // namespace

void addBench(CLI::App& app, Commands& cmds) {
  auto o = std::make_shared<BenchOpts>();
  auto* sub = app.add_subcommand("bench", "Drive READ/WRITE batches against a segment and report throughput");
  sub->add_option("--target", o->target, "segment: HOST:PORT (p2p), a name (etcd), file:///path or a file segment")
      ->required();
  sub->add_option("--op", o->op, "read or write")->capture_default_str();
  auto* block_size = sub->add_option("--block-size", o->block_size,
                                     "bytes per request (K/M/G); with --layout kv, per block (default there 32K)")
                         ->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "requests per batch")->capture_default_str();
  sub->add_option("--threads", o->threads, "initiator threads")->capture_default_str();
  sub->add_option("--depth", o->depth,
                  "batches in flight per thread (1: transferSync, one after another; more: submit, then wait for "
                  "the oldest and submit it again, so the queue never drains)")
      ->capture_default_str();
  auto* span = sub->add_option(
      "--span", o->span,
      "memory (K/M/G) each thread's requests cycle through, on each side; a multiple of --block-size, at most "
      "--batch-size x --depth blocks (the default: every request in flight has a block of its own). Equal to "
      "--block-size: one block per thread, the working set of iperf3's one -l buffer");
  sub->add_flag("--huge-pages", o->huge_pages,
                "local buffers on reserved 2 MiB huge pages (MAP_HUGETLB; see /proc/sys/vm/nr_hugepages) "
                "instead of transparent huge pages");
  sub->add_option("--cpu-pid", o->cpu_pid,
                  "also report the CPU time this local process (the target) spent over the timed run");
  auto* secs = sub->add_option("--seconds", o->seconds, "run this long (default 5 when --total is not given)");
  auto* tot = sub->add_option("--total", o->total, "move this many bytes (K/M/G), then stop");
  secs->excludes(tot);
  sub->add_flag("--json", o->json, "print the summary as one JSON object on the last line");
  sub->add_flag("--no-verify", o->no_verify, "skip the data check");
  sub->add_option("--metadata", o->metadata,
                  "metadata: p2p, etcd://host:port[,host:port], etcds://... (TLS: etcd.* config keys) or "
                  "http://host:port/metadata")
      ->capture_default_str();
  sub->add_option("--name", o->name, "this engine's server name");
  sub->add_option("--host", o->host, "local address to listen on / advertise")->capture_default_str();
  sub->add_option("--local-location", o->local_location,
                  "where the initiator's buffers live: cpu, or cuda:N (GPU memory; data checked through a host copy)")
      ->capture_default_str();
  sub->add_option("--target-offset", o->target_offset, "start of the target range inside the segment")
      ->capture_default_str();
  sub->add_option("--blocks", o->blocks,
                  "block requests: N blocks of --block-size as one request (a plan posted each round), against "
                  "1 MiB requests, one block alone and one request per block, in interleaved rounds")
      ->excludes(span);
  sub->add_option("--layout", o->layout,
                  "with --blocks: contiguous, scattered or strided; kv (without --blocks): a paged KV cache, layers x "
                  "K/V x blocks scattered differently on both sides, as one block request against the same bytes "
                  "contiguous")
      ->capture_default_str();
  sub->add_option("--rounds", o->rounds, "with --blocks or --layout kv: interleaved rounds (medians are reported)")
      ->capture_default_str();
  auto* layers = sub->add_option("--layers", o->layers, "with --layout kv: layers (each a K and a V tensor)")
                     ->capture_default_str();
  auto* kv_blocks = sub->add_option("--kv-blocks", o->kv_blocks, "with --layout kv: blocks of the request per tensor")
                        ->capture_default_str();
  auto* kv_pool = sub->add_option("--kv-pool", o->kv_pool,
                                  "with --layout kv: blocks in each side's pool per tensor, the block tables' choice "
                                  "(default 2 x --kv-blocks)");
  auto* kv_plan = sub->add_flag("--kv-plan", o->kv_plan,
                                "with --layout kv: prepare the KV block request once and post it each round "
                                "(default: submitBlocks each round)");
  auto* kv_repeat = sub->add_option("--kv-repeat", o->kv_repeat,
                                    "with --layout kv: transfers of each way timed one after another in a round, "
                                    "each waited for before the next is posted (1: each a request issued alone)")
                        ->capture_default_str();
  sub->callback([o, &cmds, block_size, layers, kv_blocks, kv_pool, kv_plan, kv_repeat] {
    const bool kv_options =
        layers->count() || kv_blocks->count() || kv_pool->count() || kv_plan->count() || kv_repeat->count();
    const bool block_size_given = block_size->count() > 0;
    cmds.run = [o, kv_options, block_size_given] {
      if (o->layout == "kv") {
        if (o->blocks != 0) {
          fmt::print(stderr, "hawser bench: --layout kv takes --kv-blocks, not --blocks\n");
          return 2;
        }
        if (o->no_verify) {
          fmt::print(stderr, "hawser bench: --layout kv verifies every byte of every transfer: drop --no-verify\n");
          return 2;
        }
        KvBenchOpts k;
        const std::string kv_block_size = k.block_size;
        static_cast<BenchBasics&>(k) = *o;
        if (!block_size_given) k.block_size = kv_block_size;
        k.layers = o->layers;
        k.kv_blocks = o->kv_blocks;
        k.kv_pool = o->kv_pool;
        k.plan = o->kv_plan;
        k.repeat = o->kv_repeat;
        k.local_location = o->local_location;
        return runKvBench(k);
      }
      if (kv_options) {
        fmt::print(stderr, "hawser bench: --layers, --kv-blocks, --kv-pool and --kv-plan need --layout kv\n");
        return 2;
      }
      if (o->blocks == 0) return runBench(*o);
      BlockBenchOpts b;
      static_cast<BenchBasics&>(b) = *o;
      b.blocks = o->blocks;
      b.layout = o->layout;
      b.no_verify = o->no_verify;
      return runBlockBench(b);
    };
  });
}

}  // namespace hawser::tools
