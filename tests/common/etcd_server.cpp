#include "common/etcd_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "common/util.h"

#if HAWSER_HAVE_ETCD
#include "metadata/etcd_client.h"
#endif

namespace hawser::test {

namespace fs = std::filesystem;

namespace {

bool bindable(uint16_t port, uint16_t& bound) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof(a);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (ok) bound = ntohs(a.sin_port);
  ::close(fd);
  return ok;
}

}  // namespace

uint16_t freeLoopbackPort() {
  // Below the kernel's ephemeral range (32768+ by default), so that outgoing
  // connections of other processes do not take a port while a test has its
  // etcd stopped for a restart.
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) * 7919u +
                          static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uniform_int_distribution<int> pick(20000, 32000);
  uint16_t bound = 0;
  for (int i = 0; i < 64; ++i) {
    if (bindable(static_cast<uint16_t>(pick(rng)), bound)) return bound;
  }
  return bindable(0, bound) ? bound : 0;
}

std::string EtcdServer::binary() {
#if !HAWSER_HAVE_ETCD
  return std::string();  // no client to talk to it
#endif
  if (const char* env = std::getenv("HAWSER_ETCD_BIN"); env && *env) {
    return ::access(env, X_OK) == 0 ? std::string(env) : std::string();
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/etcd";
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return std::string();
}

std::string EtcdServer::missingReason() {
#if !HAWSER_HAVE_ETCD
  return "this build has no etcd support (configured with HAWSER_WITH_ETCD=OFF)";
#else
  return "etcd binary not found (install it with `apt-get install etcd-server`, or set HAWSER_ETCD_BIN)";
#endif
}

EtcdServer::~EtcdServer() {
  if (pid_ > 0) kill9();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string EtcdServer::uri() const { return (tls_.cert.empty() ? "etcd://" : "etcds://") + endpoint(); }
std::string EtcdServer::endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }

bool EtcdServer::start() {
  std::string bin = binary();
  if (bin.empty()) {
    error_ = missingReason();
    return false;
  }
  std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = base + "/hawser-etcd-XXXXXX";
  std::vector<char> b(tmpl.begin(), tmpl.end());
  b.push_back('\0');
  if (::mkdtemp(b.data()) == nullptr) {
    error_ = "mkdtemp under " + base + " failed";
    return false;
  }
  dir_ = b.data();
  // Ports can be taken between probing and etcd binding them: try a few pairs.
  for (int attempt = 0; attempt < 5; ++attempt) {
    client_port_ = freeLoopbackPort();
    peer_port_ = freeLoopbackPort();
    if (client_port_ == 0 || peer_port_ == 0 || client_port_ == peer_port_) continue;
    if (launch() && waitReady(20000)) return true;
    kill9();
    std::error_code ec;
    fs::remove_all(dir_ + "/data", ec);
  }
  if (error_.empty()) error_ = "etcd did not start";
  error_ += "; log: " + logTail();
  return false;
}

bool EtcdServer::launch() {
  const std::string bin = binary();
  const std::string client = (tls_.cert.empty() ? "http://" : "https://") + endpoint();
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  std::vector<std::string> args = {bin,
                                   "--name", "t0",
                                   "--data-dir", dir_ + "/data",
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", "t0=" + peer,
                                   "--initial-cluster-state", "new",
                                   "--logger", "zap",
                                   "--log-level", "warn"};
  if (!tls_.cert.empty()) {
    for (const std::string& a : {std::string("--cert-file"), tls_.cert, std::string("--key-file"), tls_.key,
                                 std::string("--trusted-ca-file"), tls_.ca})
      args.push_back(a);
    if (tls_.client_cert_auth) args.push_back("--client-cert-auth");
  }
  const std::string log = dir_ + "/etcd.log";
  pid_t pid = ::fork();
  if (pid < 0) {
    error_ = "fork failed";
    return false;
  }
  if (pid == 0) {
    // etcd dies with the test process, even when that one crashes.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) _exit(127);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    _exit(127);
  }
  pid_ = pid;
  return true;
}

bool EtcdServer::waitReady(int timeout_ms) {
#if !HAWSER_HAVE_ETCD
  (void)timeout_ms;
  error_ = "this build has no etcd client (HAWSER_WITH_ETCD=OFF)";
  return false;
#else
  etcd::Options o;
  o.timeout = std::chrono::milliseconds(500);
  o.connect_timeout = std::chrono::milliseconds(200);
  o.retries = 0;
  o.security = harnessSecurity();
  etcd::Client client({etcd::Endpoint{"127.0.0.1", client_port_}}, o);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "etcd exited during startup";
      return false;
    }
    // A linearizable read succeeds only once a leader is elected.
    std::optional<etcd::KeyValue> kv;
    if (client.get("hawser-test-ready", kv).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = "etcd did not answer within " + std::to_string(timeout_ms) + " ms";
  return false;
#endif
}

#if HAWSER_HAVE_ETCD
etcd::Security EtcdServer::harnessSecurity() const {
  etcd::Security s;
  s.tls = !tls_.cert.empty();
  s.ca_file = tls_.ca;
  s.cert_file = tls_.client_cert;
  s.key_file = tls_.client_key;
  if (!root_password_.empty()) {
    s.user = "root";
    s.password = root_password_;
  }
  return s;
}
#endif

std::string EtcdServer::enableAuth(const std::string& root_password, const std::string& user,
                                   const std::string& password, const std::string& prefix) {
#if !HAWSER_HAVE_ETCD
  return "this build has no etcd client";
#else
  etcd::Options o;
  o.security = harnessSecurity();
  etcd::Client c({etcd::Endpoint{"127.0.0.1", client_port_}}, o);
  nlohmann::json reply;
  const std::pair<const char*, nlohmann::json> steps[] = {
      {"auth/user/add", {{"name", "root"}, {"password", root_password}}},
      {"auth/role/add", {{"name", "root"}}},
      {"auth/user/grant", {{"user", "root"}, {"role", "root"}}},
      {"auth/role/add", {{"name", "hawser-rw"}}},
      {"auth/role/grant",
       {{"name", "hawser-rw"},
        {"perm",
         {{"permType", "READWRITE"},
          {"key", etcd::base64Encode(prefix)},
          {"range_end", etcd::base64Encode(etcd::prefixRangeEnd(prefix))}}}}},
      {"auth/user/add", {{"name", user}, {"password", password}}},
      {"auth/user/grant", {{"user", user}, {"role", "hawser-rw"}}},
      {"auth/enable", nlohmann::json::object()},
  };
  for (const auto& [path, body] : steps) {
    Status s = c.call(path, body, reply);
    if (!s.ok()) return std::string(path) + ": " + s.toString();
  }
  root_password_ = root_password;
  return std::string();
#endif
}

void EtcdServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::kill(pid_, SIGCONT);
  for (int i = 0; i < 500; ++i) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill9();
}

void EtcdServer::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::kill(pid_, SIGCONT);  // a stopped process dies only once continued
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
}

void EtcdServer::pause() {
  if (pid_ > 0) stopProcess(pid_);  // returns once every etcd thread has stopped
}

void EtcdServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

bool EtcdServer::restart(bool wipe) {
  if (pid_ > 0) stop();
  if (wipe) {
    std::error_code ec;
    fs::remove_all(dir_ + "/data", ec);
  }
  error_.clear();
  // The ports were ours a moment ago; SO_REUSEADDR in etcd lets it rebind.
  if (launch() && waitReady(20000)) return true;
  error_ += "; log: " + logTail();
  return false;
}

std::string EtcdServer::logTail() const {
  std::ifstream in(dir_ + "/etcd.log");
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > 8) lines.pop_front();
  }
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace hawser::test
