// memcpy throughput with the access pattern of `hawser bench --op read`: the
// baseline of bench/shm_vs_memcpy.sh. THREADS threads each own BATCH slots
// of BLOCK bytes in a local buffer and copy into them, round after round,
// from the same slots of a SOURCE-byte region that `hawser serve` would
// expose (slot k reads source block k mod (SOURCE / BLOCK)). Prints GB/s
// (10^9 bytes/s).
//
// Usage: memcpy_rate BLOCK BATCH THREADS SECONDS SOURCE [local-thp]   (bytes: plain integers)
// local-thp: the slots (the initiator's side) on transparent huge pages, as
// `hawser bench` allocates its local buffers, the source on small pages, as
// a target's memfd (hawser serve --host-memory shared) is.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6 && !(argc == 7 && std::strcmp(argv[6], "local-thp") == 0)) {
    std::fprintf(stderr, "usage: %s BLOCK BATCH THREADS SECONDS SOURCE [local-thp]\n", argv[0]);
    return 2;
  }
  const bool local_thp = argc == 7;
  const size_t block = std::strtoull(argv[1], nullptr, 10), batch = std::strtoull(argv[2], nullptr, 10);
  const size_t threads = std::strtoull(argv[3], nullptr, 10), source = std::strtoull(argv[5], nullptr, 10);
  const double seconds = std::atof(argv[4]);
  if (!block || !batch || !threads || source < block || seconds <= 0) return 2;
  const size_t slots = threads * batch, per_source = source / block;
  auto alloc = [](size_t n, bool thp = false) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::exit(1);
    if (thp) (void)::madvise(p, n, MADV_HUGEPAGE);
    std::memset(p, 1, n);  // fault in, as both hawser processes do
    return static_cast<char*>(p);
  };
  char* src = alloc(per_source * block);
  char* dst = alloc(slots * block, local_thp);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      uint64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < batch; ++i) {
          const size_t k = t * batch + i;
          std::memcpy(dst + k * block, src + (k % per_source) * block, block);
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
