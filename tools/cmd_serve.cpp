// `hawser serve`: a target exposing registered memory until SIGINT/SIGTERM.
// SIGUSR1 withdraws the memory (unregisters it, prints "withdrawn") while the
// process keeps running: a drained node, and the way tests make a peer
// refuse a range it published before.
// --print-notifies drains the notifications the engine receives and prints
// one line each: "notify: PEER NAME MESSAGE" (bytes outside printable ASCII
// as \xNN). A message "pattern OFF LEN SEED" is also checked against the
// memory as it is when the notification is taken: its bytes [OFF, OFF+LEN)
// must hold the --fill-seed pattern of SEED (logical offsets 0..LEN), and the
// line ends "pattern ok" or "pattern bad at N" — how tests show that a
// notification arrives only after the writes it follows.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <cstring>
#include <fmt/format.h>
#include <thread>
#include <vector>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/host_memory.h"
#include "hawser/engine.h"
#include "tools/commands.h"
#include "tools/location.h"
#include "tools/metrics_http.h"
#include "tools/pattern.h"

namespace hawser::tools {

namespace {
std::atomic<bool> g_stop{false};
std::atomic<bool> g_withdraw{false};
void onSignal(int) { g_stop = true; }
void onWithdraw(int) { g_withdraw = true; }

struct ServeOpts {
  std::string listen = "127.0.0.1:0";
  std::string memory = "1G";
  std::string metadata = "p2p";
  std::string name;
  int64_t fill_seed = -1;
  std::string location = "cpu";  // cpu, or cuda:N
  std::string host_memory = "shared";  // shared (allocateHostMemory: peers of this host map it) or private
  std::string gpu_memory = "device";   // device (cuMemAlloc) or vmm (allocateMappedDeviceMemory)
  std::string vmm_chunk = "0";         // vmm: bytes per physical allocation (0: the driver's granularity)
  std::string metrics;           // HOST:PORT of the Prometheus endpoint; empty: none
  bool print_notifies = false;
};

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out.push_back(static_cast<char>(c));
    else out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

// For a message "pattern OFF LEN SEED": " pattern ok" / " pattern bad at N"
// (or why it cannot be checked); "" for any other message.
std::string checkNotified(const std::string& msg, const char* mem, uint64_t size, bool gpu) {
  unsigned long long off = 0, len = 0, seed = 0;
  char tail = 0;
  if (std::sscanf(msg.c_str(), "pattern %llu %llu %llu%c", &off, &len, &seed, &tail) != 3) return "";
  if (off > size || len > size - off) return " pattern out of range";
  std::vector<char> host;
  const char* p = mem + off;
  if (gpu) {
    host.resize(len);
    Status s = copyMemory(host.data(), mem + off, len);
    if (!s.ok()) return " pattern unreadable: " + s.toString();
    p = host.data();
  }
  const int64_t bad = checkPattern(p, len, seed, 0);
  return bad < 0 ? " pattern ok" : fmt::format(" pattern bad at {}", bad);
}

// Fills GPU memory with the pattern through a host buffer, in pieces.
Status fillDevice(char* dev, uint64_t size, uint64_t seed) {
  constexpr uint64_t kPiece = 64ull << 20;
  std::vector<char> h(std::min(size, kPiece));
  for (uint64_t off = 0; off < size; off += kPiece) {
    uint64_t n = std::min(kPiece, size - off);
    fillPattern(h.data(), n, seed, off);
    Status s = copyMemory(dev + off, h.data(), n);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

int runServe(const ServeOpts& o) {
  auto size = parseSize(o.memory);
  if (!size || *size == 0) {
    fmt::print(stderr, "hawser serve: --memory '{}' is not a size (use e.g. 512M, 1G)\n", o.memory);
    return 2;
  }
  std::string host;
  uint16_t port = 0;
  auto colon = o.listen.rfind(':');
  if (colon == std::string::npos) {
    fmt::print(stderr, "hawser serve: --listen '{}' is not HOST:PORT\n", o.listen);
    return 2;
  }
  host = o.listen.substr(0, colon);
  try {
    int p = std::stoi(o.listen.substr(colon + 1));
    if (p < 0 || p > 65535) throw std::out_of_range("port");
    port = static_cast<uint16_t>(p);
  } catch (...) {
    fmt::print(stderr, "hawser serve: --listen '{}': port is not a number in 0..65535\n", o.listen);
    return 2;
  }
  const std::optional<int> place = parseMemoryPlace(o.location);
  if (!place) {
    fmt::print(stderr, "hawser serve: --location '{}' is not cpu or cuda:N\n", o.location);
    return 2;
  }
  std::string metrics_host;
  uint16_t metrics_port = 0;
  if (!o.metrics.empty() && !splitHostPort(o.metrics, metrics_host, metrics_port)) {
    fmt::print(stderr, "hawser serve: --metrics '{}' is not HOST:PORT\n", o.metrics);
    return 2;
  }
  const int gpu = *place;  // -1: host memory
  void* mem = nullptr;
  if (gpu >= 0) {
    Status ls = loadCudaDriver();
    auto chunk = parseSize(o.vmm_chunk);
    if (!chunk) ls = Status(Code::kInvalidArgument, fmt::format("--vmm-chunk '{}' is not a size", o.vmm_chunk));
    if (ls.ok())
      ls = o.gpu_memory == "vmm" ? allocateMappedDeviceMemory(gpu, *size, *chunk, &mem)
                                 : allocateDeviceMemory(gpu, *size, &mem);
    if (ls.ok() && o.fill_seed >= 0) ls = fillDevice(static_cast<char*>(mem), *size, static_cast<uint64_t>(o.fill_seed));
    if (!ls.ok()) {
      fmt::print(stderr, "hawser serve: --location {}: {}\n", o.location, ls.toString());
      return 1;
    }
  } else {
    if (o.host_memory == "shared") {
      Status as = allocateHostMemory(*size, &mem);
      if (!as.ok()) {
        fmt::print(stderr, "hawser serve: {}\n", as.toString());
        return 1;
      }
    } else {
      mem = ::mmap(nullptr, *size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) {
        fmt::print(stderr, "hawser serve: cannot allocate {} bytes: {}\n", *size, std::strerror(errno));
        return 1;
      }
    }
    // Transparent huge pages where THP is "madvise" only, as the bench's own
    // buffers: copies over a large region then miss the TLB far less. Best
    // effort; then fault everything in.
    (void)::madvise(mem, *size, MADV_HUGEPAGE);
    std::memset(mem, 0, *size);
    if (o.fill_seed >= 0) fillPattern(mem, *size, static_cast<uint64_t>(o.fill_seed), 0);
  }
  TransferEngine engine;
  Status s = engine.init(o.metadata, o.name.empty() ? host : o.name, host, port);
  if (!s.ok()) {
    fmt::print(stderr, "hawser serve: init: {}\n", s.toString());
    return 1;
  }
  s = engine.registerLocalMemory(mem, *size, "*", true);
  if (!s.ok()) {
    fmt::print(stderr, "hawser serve: register {} bytes: {}\n", *size, s.toString());
    return 1;
  }
  // Declared after the engine: stops before it.
  MetricsServer metrics;
  if (!o.metrics.empty()) {
    s = metrics.start(metrics_host, metrics_port, [&engine] { return prometheusText(engine.stats().metrics); });
    if (!s.ok()) {
      fmt::print(stderr, "hawser serve: --metrics {}: {}\n", o.metrics, s.toString());
      return 1;
    }
  }
  ::signal(SIGINT, onSignal);
  ::signal(SIGTERM, onSignal);
  ::signal(SIGUSR1, onWithdraw);
  fmt::print("segment: {}\n", engine.segmentName());
  fmt::print("memory: {:#x} {} bytes\n", reinterpret_cast<uint64_t>(mem), *size);
  fmt::print("location: {}\n", gpu >= 0 ? o.location : "cpu");
  fmt::print("transports: {}\n", fmt::join(engine.transports(), ","));
  if (!o.metrics.empty())
    fmt::print("metrics: http://{}:{}/metrics\n",
               metrics_host.find(':') != std::string::npos ? "[" + metrics_host + "]" : metrics_host, metrics.port());
  fmt::print("ready\n");
  std::fflush(stdout);
  bool exposed = true;
  std::vector<ReceivedNotification> notes;
  while (!g_stop) {
    if (o.print_notifies && engine.getNotifies(notes).ok() && !notes.empty()) {
      for (auto& n : notes)
        fmt::print("notify: {} {} {}{}\n", printable(n.peer), printable(n.name), printable(n.message),
                   checkNotified(n.message, static_cast<const char*>(mem), *size, gpu >= 0));
      std::fflush(stdout);
      continue;  // drain again at once: a sender may be waiting on a full queue
    }
    if (g_withdraw.exchange(false) && exposed) {
      s = engine.unregisterLocalMemory(mem);
      exposed = !s.ok();
      fmt::print("{}\n", s.ok() ? "withdrawn" : "withdraw failed: " + s.toString());
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (exposed) (void)engine.unregisterLocalMemory(mem);
  if (gpu >= 0 && o.gpu_memory == "vmm")
    (void)freeMappedDeviceMemory(mem);
  else if (gpu >= 0)
    (void)freeDeviceMemory(mem);
  else if (o.host_memory == "shared")
    (void)freeHostMemory(mem);
  else
    ::munmap(mem, *size);
  return 0;
}
}  // namespace

void addServe(CLI::App& app, Commands& cmds) {
  auto o = std::make_shared<ServeOpts>();
  auto* sub = app.add_subcommand("serve", "Expose registered memory as a segment until interrupted");
  sub->add_option("--listen", o->listen, "HOST:PORT to listen on (port 0 = any free)")->capture_default_str();
  sub->add_option("--memory", o->memory, "bytes of memory to expose (K/M/G suffixes)")->capture_default_str();
  sub->add_option("--metadata", o->metadata,
                  "metadata: p2p, etcd://host:port[,host:port], etcds://... (TLS: etcd.* config keys) or "
                  "http://host:port/metadata")
      ->capture_default_str();
  sub->add_option("--name", o->name, "server name (with etcd: the segment name)");
  sub->add_option("--location", o->location, "where the memory lives: cpu, or cuda:N (GPU memory)")
      ->capture_default_str();
  sub->add_option("--host-memory", o->host_memory,
                  "host memory: shared (hawser::allocateHostMemory, a memfd: shm peers map it and copy with memcpy) "
                  "or private (an anonymous mapping: shm peers use cross-memory attach)")
      ->check(CLI::IsMember({"shared", "private"}))
      ->capture_default_str();
  sub->add_option("--gpu-memory", o->gpu_memory,
                  "GPU memory (--location cuda:N): device (cuMemAlloc, shared by legacy CUDA IPC handle) or vmm "
                  "(CUDA virtual memory as PyTorch's expandable segments make it: cuMemCreate with the POSIX fd handle "
                  "type, --vmm-chunk bytes each, mapped back to back; shared by file descriptor)")
      ->check(CLI::IsMember({"device", "vmm"}))
      ->capture_default_str();
  sub->add_option("--vmm-chunk", o->vmm_chunk,
                  "--gpu-memory vmm: bytes of each physical allocation (0: the driver's granularity, 2 MiB)")
      ->capture_default_str();
  sub->add_option("--fill-seed", o->fill_seed, "fill the memory with the verification pattern of this seed");
  sub->add_option("--metrics", o->metrics,
                  "HOST:PORT to serve the engine's metrics on, at /metrics in the Prometheus text format (port 0 = "
                  "any free; the address is printed)");
  sub->add_flag("--print-notifies", o->print_notifies,
                "print each notification received (\"notify: PEER NAME MESSAGE\"); a message \"pattern OFF LEN "
                "SEED\" is checked against the memory when taken");
  sub->callback([o, &cmds] { cmds.run = [o] { return runServe(*o); }; });
}

}  // namespace hawser::tools
