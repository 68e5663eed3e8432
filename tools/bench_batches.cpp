// `hawser bench`'s batch mode (bench_batches.h), in the steps of one run:
// options checked, target and local buffers set up, patterns prepared, the
// timed run (worker threads and the progress line), verification, report.
#include "tools/bench_batches.h"

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
#include <memory>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"
#include "tools/latency_histogram.h"
#include "tools/location.h"
#include "tools/metrics_json.h"
#include "tools/pattern.h"

namespace hawser::tools {

namespace {

using Clock = std::chrono::steady_clock;

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

// One run. Each step returns 0 to go on, else the exit code (after printing
// why).
class BatchBench {
 public:
  explicit BatchBench(const BenchOpts& o) : o_(o) {}

  int run() {
    int rc = checkOptions();
    if (rc == 0) rc = setup();
    if (rc == 0) rc = prepare();
    if (rc == 0) rc = timed();
    if (rc == 0) rc = verify();
    if (rc != 0) return rc;
    report();
    (void)engine_.unregisterLocalMemory(local_);
    if (gpu_ >= 0) (void)freeDeviceMemory(local_);
    ::munmap(lmem_, local_len_);
    return verify_ && !verified_ ? 3 : 0;
  }

 private:
  // The options, parsed and checked against each other.
  int checkOptions();
  // The engine, the target's range, the local buffers (registered).
  int setup();
  // The target's used blocks hold pattern(seed_read); for writes the local
  // slots hold pattern(seed_write) of their target offsets.
  int prepare();
  // The worker threads and the progress line, until the time or the bytes
  // are used up or a transfer fails.
  int timed();
  // One thread: batches of its own slots, `depth` of them in flight; with
  // depth 1, transferSync (submit, wait, free) one after another.
  void worker(size_t t);
  // Checks what was read, or reads back what was written (verified_,
  // verify_error_).
  int verify();
  // The summary: text, or one JSON object.
  void report();

  // Host mirror -> local buffers and back (no-ops for host memory).
  Status push(uint64_t off, uint64_t n) { return gpu_ < 0 ? Status::OK() : copyMemory(local_ + off, host_ + off, n); }
  Status pull(uint64_t off, uint64_t n) { return gpu_ < 0 ? Status::OK() : copyMemory(host_ + off, local_ + off, n); }
  uint64_t targetOf(size_t slot) const { return (slot % slots_per_target_) * block_; }  // relative to tbase_

  void failed(const Status& st) {
    std::lock_guard lk(err_mu_);
    if (first_error_.ok()) first_error_ = st;
    errors_++;
    stop_ = true;
  }

  const BenchOpts& o_;
  // checkOptions
  uint64_t block_ = 0, base_off_ = 0;
  // Each thread owns batch_size x depth slots, one set per batch in flight,
  // unless --span makes its requests share fewer: request j of the thread
  // uses its slot j % per_thread, local and target side alike.
  size_t per_thread_ = 0;
  uint64_t total_bytes_ = 0;
  double seconds_ = 0;
  OpCode op_ = OpCode::kRead;
  int gpu_ = -1;  // the local buffers' GPU, or -1: host memory
  // setup
  TransferEngine engine_;
  SegmentID seg_{};
  uint64_t tbase_ = 0, tlen_ = 0;
  uint64_t slots_per_target_ = 0;
  size_t nslots_ = 0, used_slots_ = 0;
  uint64_t local_len_ = 0;
  void* lmem_ = nullptr;
  // With --local-location cuda:N the buffers the engine moves are GPU
  // memory; `host_` (the mmap) is their mirror for patterns and checks.
  char* host_ = nullptr;
  char* local_ = nullptr;
  // prepare
  bool verify_ = false;
  uint64_t seed_read_ = 0, seed_write_ = 0;
  // timed
  EngineStats stats_before_;
  std::atomic<uint64_t> budget_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> errors_{0};
  // What each worker moved, on a line of its own: written by its worker
  // alone, read by the timer; a count every worker added to would be a
  // line they all write each batch, which memcpy's baseline does not pay.
  // `wrote`: it completed a batch (read or write): with --total a fast
  // transport may use up the budget before a thread gets to run, and its
  // slots then keep the prepared pattern. 128 bytes apart, not 64: cores
  // fetch lines in pairs (as the engine's src/base/cache_line.h says).
  struct alignas(128) Done {
    std::atomic<uint64_t> bytes{0}, ops{0};
    std::atomic<bool> wrote{false};
  };
  std::unique_ptr<Done[]> done_;
  // Every worker's count of `what` (&Done::bytes, &Done::ops).
  uint64_t sumDone(std::atomic<uint64_t> Done::*what) const {
    uint64_t n = 0;
    for (size_t t = 0; t < o_.threads; ++t) n += (done_[t].*what).load(std::memory_order_relaxed);
    return n;
  }
  uint64_t bytesDone() const { return sumDone(&Done::bytes); }
  uint64_t opsDone() const { return sumDone(&Done::ops); }
  std::mutex err_mu_;
  Status first_error_;
  std::mutex lat_mu_;
  LatencyHistogram lat_;  // every thread's batches
  uint64_t batch_bytes_ = 0;
  double elapsed_ = 0, cpu_s_ = 0, peer_cpu_s_ = 0;
  // verify
  bool verified_ = false;
  std::string verify_error_;
};

int BatchBench::checkOptions() {
  auto block = parseSize(o_.block_size);
  if (!block || *block == 0) {
    fmt::print(stderr, "hawser bench: --block-size '{}' is not a size\n", o_.block_size);
    return 2;
  }
  block_ = *block;
  auto base_off = parseSize(o_.target_offset);
  if (!base_off) {
    fmt::print(stderr, "hawser bench: --target-offset '{}' is not a size\n", o_.target_offset);
    return 2;
  }
  base_off_ = *base_off;
  if (o_.op != "read" && o_.op != "write") {
    fmt::print(stderr, "hawser bench: --op must be read or write, got '{}'\n", o_.op);
    return 2;
  }
  if (o_.batch_size == 0 || o_.threads == 0 || o_.depth == 0) {
    fmt::print(stderr, "hawser bench: --batch-size, --threads and --depth must be >= 1\n");
    return 2;
  }
  per_thread_ = o_.batch_size * o_.depth;
  if (!o_.span.empty()) {
    auto span = parseSize(o_.span);
    if (!span || *span == 0 || *span % block_ != 0) {
      fmt::print(stderr, "hawser bench: --span '{}' is not a multiple of --block-size {}\n", o_.span, block_);
      return 2;
    }
    if (*span / block_ > per_thread_) {
      fmt::print(stderr,
                 "hawser bench: --span {} is more than the {} blocks of {} a thread has in flight (--batch-size x "
                 "--depth); each request keeps one block\n",
                 *span, per_thread_, block_);
      return 2;
    }
    per_thread_ = *span / block_;
  }
  if (o_.cpu_pid > 0 && procCpuSeconds(o_.cpu_pid) < 0) {
    fmt::print(stderr, "hawser bench: --cpu-pid {}: no such process here\n", o_.cpu_pid);
    return 2;
  }
  if (!o_.total.empty()) {
    auto t = parseSize(o_.total);
    if (!t || *t == 0) {
      fmt::print(stderr, "hawser bench: --total '{}' is not a size\n", o_.total);
      return 2;
    }
    total_bytes_ = *t;
  }
  seconds_ = o_.seconds > 0 ? o_.seconds : (total_bytes_ ? 0 : 5.0);
  op_ = o_.op == "read" ? OpCode::kRead : OpCode::kWrite;
  const std::optional<int> place = parseMemoryPlace(o_.local_location);
  if (!place) {
    fmt::print(stderr, "hawser bench: --local-location '{}' is not cpu or cuda:N\n", o_.local_location);
    return 2;
  }
  gpu_ = *place;
  return 0;
}

int BatchBench::setup() {
  // With a named store (etcd) every engine needs its own name: default to a
  // per-process one so several benches can run at once.
  std::string name = o_.name;
  if (name.empty()) name = o_.metadata == "p2p" ? o_.host : fmt::format("bench-{}-{}", o_.host, ::getpid());
  Status s = engine_.init(o_.metadata, name, o_.host, 0);
  if (!s.ok()) return fail("init", s), 1;
  s = engine_.openSegment(o_.target, seg_);
  if (!s.ok()) return fail(fmt::format("open segment '{}'", o_.target), s), 1;
  std::vector<SegmentBuffer> bufs;
  s = engine_.segmentBuffers(seg_, bufs);
  if (!s.ok()) return fail("segment buffers", s), 1;
  if (bufs.empty()) {
    fmt::print(stderr, "hawser bench: segment '{}' exposes no buffers\n", o_.target);
    return 1;
  }
  // Target space: memory -> its first buffer; file -> the whole logical space.
  const bool is_file = isFileSegment(o_.target, bufs);
  tbase_ = is_file ? 0 : bufs[0].addr;
  tlen_ = is_file ? bufs.back().addr + bufs.back().length : bufs[0].length;
  if (base_off_ >= tlen_) {
    fmt::print(stderr, "hawser bench: --target-offset {} is past the segment's {} bytes\n", base_off_, tlen_);
    return 2;
  }
  tbase_ += base_off_;
  tlen_ -= base_off_;
  slots_per_target_ = tlen_ / block_;
  if (slots_per_target_ == 0) {
    fmt::print(stderr, "hawser bench: block size {} is larger than the target's {} bytes\n", block_, tlen_);
    return 2;
  }
  nslots_ = o_.threads * per_thread_;
  const uint64_t huge = 2ull << 20;
  local_len_ = o_.huge_pages ? (nslots_ * block_ + huge - 1) / huge * huge : nslots_ * block_;
  lmem_ = ::mmap(nullptr, local_len_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (o_.huge_pages ? MAP_HUGETLB : 0), -1, 0);
  if (lmem_ == MAP_FAILED && o_.huge_pages) {
    fmt::print(stderr,
               "hawser bench: --huge-pages: cannot map {} bytes of 2 MiB huge pages ({}); reserve {} more in "
               "/proc/sys/vm/nr_hugepages\n",
               local_len_, std::strerror(errno), local_len_ / huge);
    return 1;
  }
  if (lmem_ != MAP_FAILED && !o_.huge_pages) {
    // Transparent huge pages (THP is often "madvise" only): a 1 MiB O_DIRECT
    // I/O into scattered 4 KiB pages needs ~256 block segments, and on
    // virtio-blk such requests exhaust the virtqueue and get requeued (reads
    // ran at ~60% of fio's speed). Physically contiguous memory takes a few
    // segments. Best effort; then fault everything in before timing.
    (void)::madvise(lmem_, local_len_, MADV_HUGEPAGE);
  }
  if (lmem_ != MAP_FAILED) std::memset(lmem_, 0, local_len_);
  if (lmem_ == MAP_FAILED) {
    fmt::print(stderr, "hawser bench: cannot allocate {} bytes of local memory\n", local_len_);
    return 1;
  }
  host_ = static_cast<char*>(lmem_);
  local_ = host_;
  if (gpu_ >= 0) {
    void* d = nullptr;
    if (!(s = loadCudaDriver()).ok()) return fail("--local-location " + o_.local_location, s), 1;
    if (!(s = allocateDeviceMemory(gpu_, local_len_, &d)).ok()) return fail("allocate GPU memory", s), 1;
    local_ = static_cast<char*>(d);
  }
  s = engine_.registerLocalMemory(local_, local_len_, "*", false);
  if (!s.ok()) return fail("register local memory", s), 1;
  used_slots_ = std::min<uint64_t>(nslots_, slots_per_target_);
  return 0;
}

int BatchBench::prepare() {
  verify_ = !o_.no_verify;
  std::random_device rd;
  seed_read_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  seed_write_ = seed_read_ ^ 0x5a5a5a5a5a5a5a5aULL;
  Status s;
  if (verify_) {
    for (size_t k = 0; k < used_slots_; ++k) fillPattern(host_ + k * block_, block_, seed_read_, targetOf(k));
    if (!(s = push(0, used_slots_ * block_)).ok()) return fail("copy the pattern to GPU memory", s), 1;
    for (size_t k = 0; k < used_slots_; ++k) {
      s = bulk(engine_, seg_, OpCode::kWrite, local_ + k * block_, tbase_ + targetOf(k), block_, block_, 1);
      if (!s.ok()) return fail("prepare target pattern", s), 1;
    }
  }
  if (op_ == OpCode::kWrite)
    for (size_t k = 0; k < nslots_; ++k) fillPattern(host_ + k * block_, block_, seed_write_, targetOf(k));
  else
    std::memset(host_, 0, local_len_);
  if (!(s = push(0, local_len_)).ok()) return fail("copy to GPU memory", s), 1;
  return 0;
}

void BatchBench::worker(size_t t) {
  pthread_setname_np(pthread_self(), "bench");  // top -H, perf
  std::vector<std::vector<TransferRequest>> reqs(o_.depth, std::vector<TransferRequest>(o_.batch_size));
  for (size_t d = 0; d < o_.depth; ++d)
    for (size_t i = 0; i < o_.batch_size; ++i) {
      size_t k = t * per_thread_ + (d * o_.batch_size + i) % per_thread_;
      reqs[d][i] = TransferRequest{op_, local_ + k * block_, seg_, tbase_ + targetOf(k), block_};
    }
  LatencyHistogram mine;
  // Returns when the batch ended: the next one's start at depth 1 (one
  // clock read a batch, not two).
  auto done = [&](Clock::time_point b0) {
    const auto end = Clock::now();
    mine.record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - b0).count()));
    Done& d = done_[t];  // this thread's alone: no read-modify-write needed
    d.wrote.store(true, std::memory_order_relaxed);
    d.bytes.store(d.bytes.load(std::memory_order_relaxed) + batch_bytes_, std::memory_order_relaxed);
    d.ops.store(d.ops.load(std::memory_order_relaxed) + o_.batch_size, std::memory_order_relaxed);
    return end;
  };
  auto more = [&] {
    return !stop_.load(std::memory_order_relaxed) &&
           !(total_bytes_ && budget_.fetch_add(batch_bytes_) >= total_bytes_);
  };
  if (o_.depth == 1) {
    for (auto b0 = Clock::now(); more();) {
      Status st = engine_.transferSync(reqs[0], std::chrono::seconds(60));
      if (!st.ok()) {
        failed(st);
        break;
      }
      b0 = done(b0);
    }
  } else {
    struct Flight {
      BatchID id = kInvalidBatch;
      Clock::time_point t0;
    };
    std::vector<Flight> ring(o_.depth);
    auto launch = [&](size_t d) {
      if (!more()) return;
      Flight f{kInvalidBatch, Clock::now()};
      Status st = engine_.allocateBatchID(o_.batch_size, f.id);
      if (st.ok()) st = engine_.submitTransfer(f.id, reqs[d]);
      if (!st.ok()) {
        if (f.id != kInvalidBatch) (void)engine_.freeBatchID(f.id);
        return failed(st);
      }
      ring[d] = f;
    };
    for (size_t d = 0; d < o_.depth; ++d) launch(d);
    // Oldest first: wait, check, free, submit the same slots again.
    for (size_t d = 0, idle = 0; idle < o_.depth; d = (d + 1) % o_.depth) {
      Flight f = ring[d];
      if (f.id == kInvalidBatch) {
        ++idle;
        continue;
      }
      idle = 0;
      ring[d].id = kInvalidBatch;
      Status st = engine_.waitTransfer(f.id, std::chrono::seconds(60));
      if (!st.ok()) {
        (void)engine_.cancelTransfer(f.id);
        (void)engine_.waitTransfer(f.id, std::chrono::seconds(5));
      }
      TransferStatus bs;
      if (st.ok()) st = engine_.getBatchTransferStatus(f.id, bs);
      if (st.ok() && bs.s != TransferState::kCompleted)
        st = bs.error.ok() ? Status(Code::kInternal, fmt::format("batch ended {}", stateName(bs.s))) : bs.error;
      (void)engine_.freeBatchID(f.id);
      if (!st.ok()) {
        failed(st);
        continue;
      }
      done(f.t0);
      launch(d);
    }
  }
  std::lock_guard lk(lat_mu_);
  lat_.merge(mine);
}

int BatchBench::timed() {
  stats_before_ = engine_.stats();
  done_.reset(new Done[o_.threads]);
  batch_bytes_ = o_.batch_size * block_;
  const double cpu0 = selfCpuSeconds(), peer_cpu0 = o_.cpu_pid > 0 ? procCpuSeconds(o_.cpu_pid) : 0;
  auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 0; t < o_.threads; ++t) workers.emplace_back([this, t] { worker(t); });
  const bool tty = ::isatty(2);
  auto last = t0;
  uint64_t last_bytes = 0;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto now = Clock::now();
    double el = std::chrono::duration<double>(now - t0).count();
    if (seconds_ > 0 && el >= seconds_) stop_ = true;
    if (total_bytes_ && bytesDone() >= total_bytes_) stop_ = true;
    bool all_done = stop_.load();
    if (tty && (now - last >= std::chrono::milliseconds(500) || all_done)) {
      uint64_t b = bytesDone();
      double inst = (b - last_bytes) / std::chrono::duration<double>(now - last).count() / 1e9;
      fmt::print(stderr, "\r[{:6.1f}s] {:8.2f} GB/s now, {:10.3f} GB moved, {} ops   ", el, inst, b / 1e9,
                 opsDone());
      last = now;
      last_bytes = b;
    }
    if (all_done || errors_) break;
  }
  for (auto& w : workers) w.join();
  elapsed_ = std::chrono::duration<double>(Clock::now() - t0).count();
  cpu_s_ = selfCpuSeconds() - cpu0;
  peer_cpu_s_ = o_.cpu_pid > 0 ? procCpuSeconds(o_.cpu_pid) - peer_cpu0 : 0;
  if (tty) fmt::print(stderr, "\n");
  if (errors_) {
    fail("transfer", first_error_);
    return 1;
  }
  return 0;
}

int BatchBench::verify() {
  if (!verify_) return 0;
  verified_ = true;
  Status s;
  if (op_ == OpCode::kRead) {
    if (!(s = pull(0, local_len_)).ok()) {
      verified_ = false;
      verify_error_ = "copy from GPU memory failed: " + s.toString();
    }
    for (size_t k = 0; k < nslots_ && verified_; ++k) {
      if (!done_[k / per_thread_].wrote.load()) continue;  // its thread ran no batch: nothing read there
      int64_t bad = checkPattern(host_ + k * block_, block_, seed_read_, targetOf(k));
      if (bad >= 0) {
        verified_ = false;
        verify_error_ = fmt::format("read data mismatch at slot {} byte {} (target offset {})", k, bad,
                                    targetOf(k) + static_cast<uint64_t>(bad));
      }
    }
    return 0;
  }
  std::memset(host_, 0, local_len_);
  if (!(s = push(0, local_len_)).ok()) return fail("copy to GPU memory", s), 1;
  for (size_t k = 0; k < used_slots_ && verified_; ++k) {
    s = bulk(engine_, seg_, OpCode::kRead, local_ + k * block_, tbase_ + targetOf(k), block_, block_, 1);
    if (s.ok()) s = pull(k * block_, block_);
    if (!s.ok()) {
      verified_ = false;
      verify_error_ = "read-back failed: " + s.toString();
      break;
    }
    // The block holds the written pattern if a thread owning a slot that
    // maps to it ran a batch, else the prepared one.
    bool written = false;
    for (size_t j = k; j < nslots_ && !written; j += slots_per_target_) written = done_[j / per_thread_].wrote.load();
    int64_t bad = checkPattern(host_ + k * block_, block_, written ? seed_write_ : seed_read_, targetOf(k));
    if (bad >= 0) {
      verified_ = false;
      verify_error_ =
          fmt::format("written data mismatch at target offset {}", targetOf(k) + static_cast<uint64_t>(bad));
    }
  }
  return 0;
}

void BatchBench::report() {
  uint64_t bytes = bytesDone();
  uint64_t ops = opsDone();
  double gbps = bytes / elapsed_ / 1e9;
  double p50 = lat_.quantileUs(0.50), p99 = lat_.quantileUs(0.99);
  // The transports that carried the timed transfers: those whose counters moved.
  const EngineStats stats_after = engine_.stats();
  std::vector<std::string> carried;
  nlohmann::json jstats = nlohmann::json::object();
  for (auto& t : stats_after.transports) {
    nlohmann::json c = nlohmann::json::object();
    bool moved = false;
    for (auto& [k, v] : t.counters) {
      c[k] = v;
      for (auto& b : stats_before_.transports)
        if (b.transport == t.transport)
          for (auto& [bk, bv] : b.counters) moved |= bk == k && bv != v;
    }
    jstats[t.transport] = c;
    if (moved) carried.push_back(t.transport);
  }
  if (!o_.json) {
    fmt::print("op {}  block {}  batch {}  depth {}  span {}  threads {}  local {}  target {}  transport {}\n", o_.op,
               block_, o_.batch_size, o_.depth, per_thread_ * block_, o_.threads,
               gpu_ >= 0 ? o_.local_location : "cpu", o_.target, fmt::join(carried, "+"));
    fmt::print("moved {:.3f} GB in {:.2f} s: {:.3f} GB/s, {:.0f} ops/s, batch latency p50 {:.0f} us p99 {:.0f} us\n",
               bytes / 1e9, elapsed_, gbps, ops / elapsed_, p50, p99);
    fmt::print("cpu: {:.2f} cores busy here{}\n", cpu_s_ / elapsed_,
               o_.cpu_pid > 0 ? fmt::format(", {:.2f} in process {}", peer_cpu_s_ / elapsed_, o_.cpu_pid) : "");
    fmt::print("verified: {}{}\n", verify_ ? (verified_ ? "yes" : "NO") : "skipped (--no-verify)",
               verify_error_.empty() ? "" : " — " + verify_error_);
    return;
  }
  if (!verify_error_.empty()) fmt::print(stderr, "hawser bench: {}\n", verify_error_);
  nlohmann::json j;
  j["op"] = o_.op;
  j["bytes"] = bytes;
  j["seconds"] = elapsed_;
  j["gbps"] = gbps;
  j["ops_per_s"] = ops / elapsed_;
  j["p50_us"] = p50;
  j["p99_us"] = p99;
  j["cpu_s"] = cpu_s_;  // this process, over the timed run
  if (o_.cpu_pid > 0) j["peer_cpu_s"] = peer_cpu_s_;
  j["depth"] = o_.depth;
  j["span"] = per_thread_ * block_;  // per thread and side
  j["verified"] = verified_;
  j["block_size"] = block_;
  j["batch_size"] = o_.batch_size;
  j["threads"] = o_.threads;
  j["target"] = o_.target;
  j["local_location"] = gpu_ >= 0 ? o_.local_location : "cpu";
  j["transports"] = carried;  // the ones that carried the data
  j["installed_transports"] = engine_.transports();
  j["stats"] = jstats;
  j["metrics"] = metricsJson(stats_after.metrics);  // since the engine started (pattern preparation included)
  fmt::print("{}\n", j.dump());
}

}  // namespace

int runBench(const BenchOpts& o) { return BatchBench(o).run(); }

}  // namespace hawser::tools
