// A plain TCP send/recv loop over loopback with the memory footprint of
// `hawser bench`: the second baseline of bench/tcp_vs_iperf3.sh. iperf3
// sends one -l buffer over and over (it stays in the CPU caches); the bench
// moves THREADS x BATCH distinct blocks per side. PAIRS sender/receiver
// thread pairs, one connection each; every sender cycles through its own
// SPAN bytes in BLOCK-byte blocking send()s, every receiver recv()s into its
// own SPAN bytes. What separates hawser from this loop is hawser's own cost;
// what separates this loop from iperf3 is the working set.
//
// SNDBUF and RCVBUF (optional, bytes, 0 = the kernel's autotuning) set
// SO_SNDBUF of the senders and SO_RCVBUF of the receivers, as hawser sizes
// its data sockets (tcp.loopback_send_buf, tcp.sock_buf), so the loop and
// hawser wait on buffers of one size.
//
// Prints "GBPS CORES": 10^9 bytes/s received, and CPU seconds per second of
// the whole process (both ends).
//
// Usage: socket_loop BLOCK SPAN PAIRS SECONDS [SNDBUF [RCVBUF]]   (plain integers)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

char* alloc(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  (void)::madvise(p, n, MADV_HUGEPAGE);  // as hawser serve and bench do
  std::memset(p, 1, n);
  return static_cast<char*>(p);
}

double cpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// A connected pair of loopback TCP sockets: {sender, receiver}.
bool connectedPair(int fds[2]) {
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (ls < 0 || ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0 ||
      ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return false;
  fds[0] = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fds[0] < 0 || ::connect(fds[0], reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
  fds[1] = ::accept(ls, nullptr, nullptr);
  ::close(ls);
  return fds[1] >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) {
    std::fprintf(stderr, "usage: %s BLOCK SPAN PAIRS SECONDS [SNDBUF [RCVBUF]]\n", argv[0]);
    return 2;
  }
  const int sndbuf = argc > 5 ? std::atoi(argv[5]) : 0, rcvbuf = argc > 6 ? std::atoi(argv[6]) : 0;
  const size_t block = std::strtoull(argv[1], nullptr, 10), span = std::strtoull(argv[2], nullptr, 10);
  const size_t pairs = std::strtoull(argv[3], nullptr, 10);
  const double seconds = std::atof(argv[4]);
  if (!block || span < block || !pairs || seconds <= 0) return 2;
  const size_t blocks = span / block;
  std::atomic<bool> go{false}, stop{false};
  std::atomic<uint64_t> received{0};
  std::vector<std::thread> ts;
  std::vector<int> fds;
  for (size_t p = 0; p < pairs; ++p) {
    int fd[2];
    if (!connectedPair(fd)) {
      std::perror("loopback connection");
      return 1;
    }
    fds.insert(fds.end(), {fd[0], fd[1]});
    if (sndbuf > 0) ::setsockopt(fd[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    if (rcvbuf > 0) ::setsockopt(fd[1], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    char* out = alloc(blocks * block);
    char* in = alloc(blocks * block);
    ts.emplace_back([&go, &stop, fd, out, block, blocks] {
      while (!go.load()) std::this_thread::yield();
      for (size_t k = 0; !stop.load(std::memory_order_relaxed); k = (k + 1) % blocks)
        for (size_t done = 0; done < block;) {
          const ssize_t n = ::send(fd[0], out + k * block + done, block - done, MSG_NOSIGNAL);
          if (n <= 0) return;
          done += static_cast<size_t>(n);
        }
      ::shutdown(fd[0], SHUT_WR);
    });
    ts.emplace_back([&received, fd, in, block, blocks] {
      uint64_t mine = 0;
      for (size_t k = 0;; k = (k + 1) % blocks) {
        size_t done = 0;
        while (done < block) {
          const ssize_t n = ::recv(fd[1], in + k * block + done, block - done, 0);
          if (n <= 0) break;
          done += static_cast<size_t>(n);
        }
        mine += done;
        if (done < block) break;
      }
      received += mine;
    });
  }
  const double cpu0 = cpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpuSeconds() - cpu0;
  for (int fd : fds) ::close(fd);
  std::printf("%.3f %.2f\n", static_cast<double>(received.load()) / el / 1e9, cpu / el);
  return 0;
}
