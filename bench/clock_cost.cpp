// What the engine's fixed per-batch costs are made of on this host: ns per
// steady_clock::now() (a batch reads it three times: the bench, the commit,
// the completion), per uncontended atomic add (each a full barrier on x86),
// per uncontended mutex lock + unlock. A guest whose clock source has no
// vDSO fast path pays a system call per clock read, which would show here.
// Compiled and run by scripts/device_run.sh (host.txt) beside the
// clock source's name; no engine needed.
//
// Usage: clock_cost [N]   (N operations of each kind; default 10,000,000)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

template <class F>
double nsPer(long n, F f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 10000000;
  if (n <= 0) return std::fprintf(stderr, "usage: %s [N]\n", argv[0]), 2;
  std::thread([] {}).join();  // glibc takes locks the single-threaded way until a thread was made
  volatile long sink = 0;
  const double clock_ns =
      nsPer(n, [&] { sink = sink + std::chrono::steady_clock::now().time_since_epoch().count(); });
  std::atomic<long> a{0};
  const double atomic_ns = nsPer(n, [&] { a.fetch_add(1); });
  std::mutex m;
  const double mutex_ns = nsPer(n, [&] {
    std::lock_guard lk(m);
    sink = sink + 1;
  });
  std::printf("steady_clock::now %.1f ns, atomic add %.1f ns, mutex lock+unlock %.1f ns\n", clock_ns, atomic_ns,
              mutex_ns);
  return 0;
}
