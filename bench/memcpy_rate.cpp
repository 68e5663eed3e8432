// memcpy throughput with the access pattern of `hawser bench`: the baseline
// of bench/shm_vs_memcpy.sh, shm_mechanisms.sh and shm_batch_cost.sh.
// THREADS threads each own BATCH slots of BLOCK bytes in a local buffer and
// copy between them and the same slots of a SOURCE-byte region that `hawser
// serve` would expose (slot k is target block k mod (SOURCE / BLOCK)),
// round after round. Prints GB/s (10^9 bytes/s).
//
// Usage: memcpy_rate BLOCK BATCH THREADS SECONDS SOURCE [MODE [TARGET_FILE]]   (bytes: plain integers)
// MODE (the memory of each side as hawser bench and hawser serve --host-memory
// shared have it):
//   (none)           both sides private anonymous memory; target -> slots
//   local-thp        reads: target -> slots; the slots (the initiator's side)
//                    on transparent huge pages, as `hawser bench` allocates its
//                    local buffers, the target a memfd mapped shared as
//                    allocateHostMemory makes it: on huge pages where the
//                    kernel can (base/huge_pages.h; MEMCPY_RATE_HUGE=0 in the
//                    environment: small pages, as host_memory.huge_pages=false)
//   local-thp-write  writes: the same memory, slots -> target
// TARGET_FILE (with a MODE): the target is this file mapped shared instead of
// a memfd of our own, e.g. /proc/PID/fd/N of a `hawser serve --host-memory
// shared`: the very pages hawser bench copies to or from (shm_mechanisms.sh
// SAME_PAGES=1). Faulted in by reading: its contents are left alone.
// With MEMCPY_RATE_PAGES=C in the environment (C: the L2's page colours, 32
// for a 2 MiB 16-way L2 as on the H100 hosts' Xeons, 16 for a 1 MiB 16-way
// one; 1 means 32) and the rights to read page frame numbers from
// /proc/self/pagemap (root), the line also says where the target's pages
// lie: `runs=R`, its physically contiguous runs (ascending or descending),
// and `colors=X`: of the target pages a thread copies, the most that share a
// colour (frame number mod C) over the mean a colour, averaged over the
// threads. 1.00 when spread evenly, as contiguous memory is; where a
// thread's working set is its L2, more means conflict misses.
// With MEMCPY_RATE_TOUCH=N each thread also touches N cache lines of its own
// after each block (the same lines every round): what an engine's own data
// or code a request costs memcpy (bench/l2_edge.sh). MEMCPY_RATE_TOUCH_KIND:
// w writes them (the default), r reads them, x executes them (a jump a line);
// MEMCPY_RATE_TOUCH=w:W,r:R,x:X touches W, R and X lines of each kind.
//
// Built with the engine's src/base/huge_pages.cpp (system headers only):
//   c++ -O2 -std=c++17 -pthread -Isrc bench/memcpy_rate.cpp src/base/huge_pages.cpp
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/huge_pages.h"

namespace {

// " runs=R colors=X" of the target (see the head); "" when the frame
// numbers cannot be read.
std::string placement(const char* target, size_t block, size_t batch, size_t threads, size_t per_source, size_t colors) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const size_t pages = per_source * block / 4096;
  std::vector<uint64_t> e(pages);
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(target) / 4096 * 8);
  const ssize_t got = ::pread(fd, e.data(), pages * 8, at);
  ::close(fd);
  if (got != static_cast<ssize_t>(pages * 8)) return "";
  std::vector<uint64_t>& pfn = e;  // each entry's frame number, in place
  size_t runs = 0;
  for (size_t i = 0; i < pages; ++i) {
    const bool present = e[i] >> 63;
    pfn[i] = e[i] & ((1ULL << 55) - 1);
    if (!present || pfn[i] == 0) return "";  // not present, or frame numbers withheld
    if (i == 0 || (pfn[i] != pfn[i - 1] + 1 && pfn[i] + 1 != pfn[i - 1])) ++runs;  // ascending or descending
  }
  double sum = 0;
  for (size_t t = 0; t < threads; ++t) {
    std::vector<size_t> color(colors, 0);
    size_t n = 0;
    for (size_t i = 0; i < batch; ++i)
      for (size_t off = 0; off < block; off += 4096, ++n) ++color[pfn[(((t * batch + i) % per_source) * block + off) / 4096] % colors];
    sum += static_cast<double>(*std::max_element(color.begin(), color.end())) / (static_cast<double>(n) / static_cast<double>(colors));
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " runs=%zu colors=%.2f", runs, sum / static_cast<double>(threads));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const bool write = argc >= 7 && std::strcmp(argv[6], "local-thp-write") == 0;
  const bool local_thp = write || (argc >= 7 && std::strcmp(argv[6], "local-thp") == 0);
  if ((argc != 6 && !local_thp) || argc > 8) {
    std::fprintf(stderr, "usage: %s BLOCK BATCH THREADS SECONDS SOURCE [local-thp|local-thp-write [TARGET_FILE]]\n",
                 argv[0]);
    return 2;
  }
  const char* target_file = argc == 8 ? argv[7] : nullptr;
  const size_t block = std::strtoull(argv[1], nullptr, 10), batch = std::strtoull(argv[2], nullptr, 10);
  const size_t threads = std::strtoull(argv[3], nullptr, 10), source = std::strtoull(argv[5], nullptr, 10);
  const double seconds = std::atof(argv[4]);
  if (!block || !batch || !threads || source < block || seconds <= 0) return 2;
  const size_t slots = threads * batch, per_source = source / block;
  enum class Kind { kPrivate, kThp, kMemfd };
  auto alloc = [](size_t n, Kind kind) {
    const char* huge_env = std::getenv("MEMCPY_RATE_HUGE");
    const bool huge = kind == Kind::kMemfd && !(huge_env && std::strcmp(huge_env, "0") == 0);
    // Whole huge pages, as a serve's memory of several MiB has (the copies
    // use the first n bytes).
    const size_t hp = hawser::huge_pages::pageBytes();
    if (huge) n = (n + hp - 1) / hp * hp;
    int fd = -1;
    if (kind == Kind::kMemfd && ((fd = ::memfd_create("memcpy-rate-target", MFD_CLOEXEC)) < 0 ||
                                 ::ftruncate(fd, static_cast<off_t>(n)) != 0))
      std::exit(1);
    void* p = huge     ? hawser::huge_pages::mapShared(fd, 0, n, PROT_READ | PROT_WRITE)
              : fd >= 0 ? ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                        : ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::exit(1);
    if (fd >= 0) ::close(fd);
    if (huge) hawser::huge_pages::collapse(static_cast<char*>(p), n);
    if (kind == Kind::kThp) (void)::madvise(p, n, MADV_HUGEPAGE);
    std::memset(p, 1, n);  // fault in, as both hawser processes do
    return static_cast<char*>(p);
  };
  char* target = nullptr;
  if (target_file) {
    const int fd = ::open(target_file, O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < per_source * block) {
      std::fprintf(stderr, "memcpy_rate: %s: cannot open, or smaller than %zu bytes\n", target_file, per_source * block);
      return 1;
    }
    void* p = ::mmap(nullptr, per_source * block, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return 1;
    target = static_cast<char*>(p);
    volatile char sink = 0;
    for (size_t i = 0; i < per_source * block; i += 4096) sink = sink + target[i];  // faulted in, left as it is
  } else {
    target = alloc(per_source * block, local_thp ? Kind::kMemfd : Kind::kPrivate);
  }
  char* slots_mem = alloc(slots * block, local_thp ? Kind::kThp : Kind::kPrivate);
  char* const src_base = write ? slots_mem : target;
  char* const dst_base = write ? target : slots_mem;
  // MEMCPY_RATE_TOUCH=N: after each block, touch N cache lines of the
  // thread's own (N lines a block, the same ones every round): the stand-in
  // for what an engine touches a request besides the data (its task, slice,
  // counters: written or read; its code: executed), to see what that costs
  // memcpy where the data fills the L2. MEMCPY_RATE_TOUCH_KIND says how (w,
  // r or x); MEMCPY_RATE_TOUCH=w:W,r:R,x:X touches each kind's own lines.
  size_t touch_w = 0, touch_r = 0, touch_x = 0;
  if (const char* touch_env = std::getenv("MEMCPY_RATE_TOUCH"); touch_env && *touch_env) {
    const char* kind_env = std::getenv("MEMCPY_RATE_TOUCH_KIND");
    std::string spec = touch_env;
    if (spec.find(':') == std::string::npos) spec = std::string(kind_env && *kind_env ? kind_env : "w") + ":" + spec;
    for (size_t at = 0; at < spec.size();) {
      const size_t comma = std::min(spec.find(',', at), spec.size());
      const std::string item = spec.substr(at, comma - at);
      const size_t n = item.size() > 2 && item[1] == ':' ? std::strtoull(item.c_str() + 2, nullptr, 10) : 0;
      size_t* into = item.size() > 2 && item[1] == ':'
                         ? (item[0] == 'w' ? &touch_w : item[0] == 'r' ? &touch_r : item[0] == 'x' ? &touch_x : nullptr)
                         : nullptr;
      if (!into) {
        std::fprintf(stderr, "memcpy_rate: MEMCPY_RATE_TOUCH: N (with MEMCPY_RATE_TOUCH_KIND w, r or x) or "
                             "w:N,r:N,x:N, not '%s'\n", touch_env);
        return 2;
      }
      *into = n;
      at = comma + 1;
    }
  }
  // x: each thread's lines are code, a short jump to the next line at the
  // start of each, the block's last line a return: touch_x fetched lines a block.
  using Chunk = void (*)();
  std::vector<char*> code(threads, nullptr);
  if (touch_x > 0)
    for (size_t t = 0; t < threads; ++t) {
      const size_t len = batch * touch_x * 64;
      void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return std::perror("mmap"), 1;
      auto* c = static_cast<unsigned char*>(m);
      for (size_t l = 0; l < batch * touch_x; ++l) {
        unsigned char* line = c + l * 64;
        std::memset(line, 0xcc, 64);  // int3: never reached
        if ((l + 1) % touch_x == 0) {
          line[0] = 0xc3;  // ret
        } else {
          line[0] = 0xeb;  // jmp rel8 to the next line
          line[1] = 62;
        }
      }
      if (::mprotect(m, len, PROT_READ | PROT_EXEC) != 0) return std::perror("mprotect"), 1;
      code[t] = static_cast<char*>(m);
    }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      uint64_t mine = 0;
      // Written lines, then read ones, then the line the reads' sum goes to.
      std::vector<char> lines((batch * (touch_w + touch_r) + 2) * 64);
      volatile char* const own = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(lines.data()) + 63) & ~uintptr_t{63});
      volatile char* const own_r = own + batch * touch_w * 64;
      volatile char* const sum_line = own_r + batch * touch_r * 64;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < batch; ++i) {
          const size_t k = t * batch + i, slot = k * block, remote = (k % per_source) * block;
          std::memcpy(dst_base + (write ? remote : slot), src_base + (write ? slot : remote), block);
          for (size_t j = 0; j < touch_w; ++j) own[(i * touch_w + j) * 64] = own[(i * touch_w + j) * 64] + 1;
          if (touch_r > 0) {
            char sum = 0;
            for (size_t j = 0; j < touch_r; ++j) sum = static_cast<char>(sum + own_r[(i * touch_r + j) * 64]);
            *sum_line = sum;
          }
          if (touch_x > 0) reinterpret_cast<Chunk>(code[t] + i * touch_x * 64)();
        }
        mine += batch * block;
      }
      bytes += mine;
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const char* pages_env = std::getenv("MEMCPY_RATE_PAGES");
  const size_t colors = pages_env ? std::strtoull(pages_env, nullptr, 10) : 0;
  const std::string where = colors ? placement(target, block, batch, threads, per_source, colors == 1 ? 32 : colors) : "";
  std::printf("%.3f%s\n", static_cast<double>(bytes.load()) / el / 1e9, where.c_str());
  return 0;
}
