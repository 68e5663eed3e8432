#include "common/util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tools/pattern.h"

namespace hawser::test {

void fillPattern(void* buf, size_t len, uint64_t seed, uint64_t base) {
  tools::fillPattern(buf, len, seed, base);
}

int64_t checkPattern(const void* buf, size_t len, uint64_t seed, uint64_t base) {
  return tools::checkPattern(buf, len, seed, base);
}

uint64_t checksum(const void* buf, size_t len) {
  auto* p = static_cast<const uint8_t*>(buf);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

bool writeFile(const std::string& path, uint64_t size, uint64_t seed, uint64_t base) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  std::vector<char> buf(std::min<uint64_t>(size, 1u << 20));
  for (uint64_t off = 0; off < size; off += buf.size()) {
    uint64_t n = std::min<uint64_t>(buf.size(), size - off);
    fillPattern(buf.data(), n, seed, base + off);
    if (::pwrite(fd, buf.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      ::close(fd);
      return false;
    }
  }
  return ::close(fd) == 0;
}

std::vector<char> readFile(const std::string& path, uint64_t off, uint64_t len) {
  std::vector<char> out(len);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {};
  ssize_t n = ::pread(fd, out.data(), len, static_cast<off_t>(off));
  ::close(fd);
  if (n != static_cast<ssize_t>(len)) return {};
  return out;
}

std::string uringUnavailableReason() {
  io_uring_params p{};
  long fd = ::syscall(__NR_io_uring_setup, 4, &p);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return "";
  }
  std::string why = std::string("io_uring_setup: ") + std::strerror(errno);
  std::ifstream dis("/proc/sys/kernel/io_uring_disabled");
  std::string v;
  if (dis >> v) why += " (kernel.io_uring_disabled = " + v + ")";
  return why;
}

Status freeWhenIdle(TransferEngine& e, BatchID b, std::chrono::milliseconds timeout) {
  Status s;
  eventually([&] { return (s = e.freeBatchID(b)).code() != Code::kBatchBusy; }, timeout);
  return s;
}

namespace {
// The state letter of a /proc/.../stat file, or '?' (unreadable: the thread ended).
char statState(const std::string& path) {
  std::ifstream in(path);
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto paren = stat.rfind(')');  // the name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}
}  // namespace

char threadState(pid_t tid) { return statState("/proc/self/task/" + std::to_string(tid) + "/stat"); }

bool allThreadsStopped(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  bool any = false;
  for (auto it = std::filesystem::directory_iterator(task, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const char st = statState(it->path() / "stat");
    if (st == '?') continue;  // the thread just ended
    if (st != 'T' && st != 't') return false;
    any = true;
  }
  return any;
}

bool stopProcess(pid_t pid, std::chrono::milliseconds timeout) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  return eventually([&] { return allThreadsStopped(pid); }, timeout);
}

std::vector<TcpSocket> tcpSockets() {
  std::vector<TcpSocket> out;
  std::string text;
  if (sh("ss -tmniH state established 2>/dev/null", &text) != 0) return out;
  // Each connection: "RECVQ SENDQ LOCAL:PORT PEER:PORT" then, on the next
  // line, "skmem:(r0,rb131072,t0,tb2626560,...) ... bytes_acked:N ...
  // bytes_received:N ..." (a count that is still 0 is left out).
  auto port = [](const std::string& addr) -> uint16_t {
    const size_t c = addr.rfind(':');
    return c == std::string::npos ? 0 : static_cast<uint16_t>(std::atoi(addr.c_str() + c + 1));
  };
  auto field = [](const std::string& mem, const std::string& key) -> int {
    const size_t k = mem.find("," + key);
    return k == std::string::npos ? 0 : std::atoi(mem.c_str() + k + 1 + key.size());
  };
  std::istringstream in(text);
  std::string line;
  TcpSocket cur;
  bool have = false;
  while (std::getline(in, line)) {
    const size_t m = line.find("skmem:(");
    if (m != std::string::npos) {
      if (!have) continue;
      const std::string mem = "," + line.substr(m + 7);
      cur.rcvbuf = field(mem, "rb");
      cur.sndbuf = field(mem, "tb");
      auto count = [&](const std::string& key) -> uint64_t {
        const size_t k = line.find(" " + key + ":");
        return k == std::string::npos ? 0 : std::strtoull(line.c_str() + k + key.size() + 2, nullptr, 10);
      };
      // bytes_sent counts retransmissions too; bytes_acked each byte once.
      cur.bytes_acked = count("bytes_acked");
      cur.bytes_received = count("bytes_received");
      out.push_back(cur);
      have = false;
      continue;
    }
    std::istringstream w(line);
    std::string rq, sq, local, peer;
    if (w >> rq >> sq >> local >> peer) {
      cur = TcpSocket{};
      cur.local_port = port(local);
      cur.peer_port = port(peer);
      have = true;
    }
  }
  return out;
}

bool hasTransport(TransferEngine& e, const std::string& name) {
  for (auto& t : e.transports())
    if (t == name) return true;
  return false;
}

bool servedSegment(Child& c, std::string& segment, uint64_t& base, int timeout_ms) {
  std::string seg = c.waitFor("segment: ", timeout_ms);
  std::string mem = c.waitFor("memory: ", timeout_ms);
  if (seg.empty() || mem.empty() || c.waitFor("ready", timeout_ms).empty()) return false;
  segment = seg.substr(9);
  base = std::stoull(mem.substr(8), nullptr, 16);
  return true;
}

uint64_t counter(const EngineStats& st, const std::string& transport, const std::string& key) {
  if (transport.empty()) {
    for (auto& [k, v] : st.engine)
      if (k == key) return v;
    ADD_FAILURE() << "no engine counter " << key;
    return 0;
  }
  for (auto& t : st.transports)
    if (t.transport == transport)
      for (auto& [k, v] : t.counters)
        if (k == key) return v;
  ADD_FAILURE() << "no " << transport << " counter " << key;
  return 0;
}

Counters transportCounters(const TransferEngine& e, const std::string& transport) {
  for (auto& t : e.stats().transports)
    if (t.transport == transport) return t.counters;
  ADD_FAILURE() << "no transport " << transport << " in the engine's stats";
  return {};
}

Buffer::Buffer(size_t size, size_t align) : n(size) {
  if (posix_memalign(reinterpret_cast<void**>(&p), align, size ? size : 1) != 0) p = nullptr;
  if (p) std::memset(p, 0, size);
}
Buffer::~Buffer() { std::free(p); }

TempDir::TempDir(const std::string& base) {
  std::string tmpl = base + "/hawser-test-XXXXXX";
  std::vector<char> b(tmpl.begin(), tmpl.end());
  b.push_back('\0');
  if (::mkdtemp(b.data())) path = b.data();
}
TempDir::~TempDir() {
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
}

Child::~Child() {
  if (pid > 0) {
    kill(SIGKILL);
    wait();
  }
  if (!out_path.empty()) ::unlink(out_path.c_str());
}

bool Child::start(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv{hawserBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return exec(argv, env);
}

int sh(const std::string& cmd, std::string* out) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
    if (out) out->append(buf, n);
  int st = ::pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool mapsShmTableOf(pid_t pid) {
  std::ifstream f("/proc/self/maps");
  std::string line, want = "hawser-shm-" + std::to_string(pid) + " ";
  while (std::getline(f, line))
    if (line.find(want) != std::string::npos) return true;
  return false;
}

double metricValue(const EngineStats& st, const std::string& family, const std::map<std::string, std::string>& labels) {
  for (const MetricFamily& f : st.metrics) {
    if (f.name != family) continue;
    for (const MetricSample& s : f.samples) {
      size_t hit = 0;
      for (const auto& [k, v] : s.labels) hit += labels.count(k) && labels.at(k) == v;
      if (hit == labels.size()) return f.type == MetricType::kHistogram ? static_cast<double>(s.count) : s.value;
    }
  }
  return -1;
}

std::string lastLine(const std::string& out) {
  const size_t nl = out.find_last_of('\n', out.size() >= 2 ? out.size() - 2 : 0);
  return nl == std::string::npos ? out : out.substr(nl + 1);
}

bool Child::exec(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  char tmpl[] = "/tmp/hawser-child-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return false;
  out_path = tmpl;
  pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    // The child dies with the test, even when the test is killed (a ctest
    // timeout) before its destructors run.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(fd, 1);
    for (auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(copy[0].c_str(), argv.data());
    _exit(127);
  }
  ::close(fd);
  return true;
}

std::string Child::waitFor(const std::string& needle, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(out_path);
    std::string line;
    while (std::getline(in, line))
      if (line.find(needle) != std::string::npos) return line;
    int st;
    if (pid > 0 && ::waitpid(pid, &st, WNOHANG) == pid) {
      pid = -1;
      return "";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

void Child::kill(int sig) {
  if (pid > 0) ::kill(pid, sig);
}

int Child::wait() {
  if (pid <= 0) return -1;
  int st = 0;
  ::waitpid(pid, &st, 0);
  pid = -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

std::vector<TransferStatus> runBatch(TransferEngine& e, SegmentID, const std::vector<TransferRequest>& reqs,
                                     int timeout_ms, Status* submit_status) {
  std::vector<TransferStatus> out;
  BatchID b = 0;
  Status s = e.allocateBatchID(reqs.size(), b);
  if (s.ok()) s = e.submitTransfer(b, reqs);
  if (submit_status) *submit_status = s;
  if (!s.ok()) {
    if (b) (void)e.freeBatchID(b);
    return out;
  }
  (void)e.waitTransfer(b, std::chrono::milliseconds(timeout_ms));
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus st;
    (void)e.getTransferStatus(b, i, st);
    out.push_back(st);
  }
  (void)e.freeBatchID(b);
  return out;
}

}  // namespace hawser::test
