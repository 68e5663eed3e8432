#include "common/util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace hawser::test {

static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static inline uint8_t patByte(uint64_t seed, uint64_t off) {
  return static_cast<uint8_t>(mix(seed * 0x9e3779b97f4a7c15ULL + (off >> 3)) >> ((off & 7) * 8));
}

void fillPattern(void* buf, size_t len, uint64_t seed, uint64_t base) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < len; ++i) p[i] = patByte(seed, base + i);
}

int64_t checkPattern(const void* buf, size_t len, uint64_t seed, uint64_t base) {
  auto* p = static_cast<const uint8_t*>(buf);
  for (size_t i = 0; i < len; ++i)
    if (p[i] != patByte(seed, base + i)) return static_cast<int64_t>(i);
  return -1;
}

uint64_t checksum(const void* buf, size_t len) {
  auto* p = static_cast<const uint8_t*>(buf);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
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

bool Child::exec(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  char tmpl[] = "/tmp/hawser-child-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return false;
  out_path = tmpl;
  pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
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
