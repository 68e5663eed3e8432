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
//                    local buffers, the target a memfd mapped shared on small
//                    pages, as allocateHostMemory's is
//   local-thp-write  writes: the same memory, slots -> target
// TARGET_FILE (with a MODE): the target is this file mapped shared instead of
// a memfd of our own, e.g. /proc/PID/fd/N of a `hawser serve --host-memory
// shared`: the very pages hawser bench copies to or from (shm_mechanisms.sh
// SAME_PAGES=1). Faulted in by reading: its contents are left alone.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

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
    int fd = -1;
    if (kind == Kind::kMemfd && ((fd = ::memfd_create("memcpy-rate-target", MFD_CLOEXEC)) < 0 ||
                                 ::ftruncate(fd, static_cast<off_t>(n)) != 0))
      std::exit(1);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) std::exit(1);
    if (fd >= 0) ::close(fd);
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
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      uint64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < batch; ++i) {
          const size_t k = t * batch + i, slot = k * block, remote = (k % per_source) * block;
          std::memcpy(dst_base + (write ? remote : slot), src_base + (write ? slot : remote), block);
        }
        mine += batch * block;
      }
      bytes += mine;
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.3f\n", static_cast<double>(bytes.load()) / el / 1e9);
  return 0;
}
