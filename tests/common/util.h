// Shared helpers for hawser tests.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hawser/engine.h"

namespace hawser::test {

// The one data pattern of the tests (the same as `hawser serve --fill-seed`
// and `hawser bench`, tools/pattern.h): the byte at logical offset `base + i`
// under `seed` is a function of both, so misplaced bytes are caught.
void fillPattern(void* buf, size_t len, uint64_t seed, uint64_t base = 0);
// Index of the first mismatching byte, or -1.
int64_t checkPattern(const void* buf, size_t len, uint64_t seed, uint64_t base = 0);
uint64_t checksum(const void* buf, size_t len);

// Polls `pred` (short, growing pauses: 1 ms up to 20 ms) until it holds or
// `timeout` passes; returns whether it held. A bound on waiting for a
// condition, not a timing assertion.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return pred();
}

// The dual of eventually(): `pred` holds at every poll for the whole of
// `duration` (for properties that are about time passing, such as a lease
// kept alive past its TTL). False at the first poll where it does not.
template <class Pred>
bool holdsFor(Pred pred, std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  do {
    if (!pred()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < end);
  return pred();
}

// A file of `size` bytes holding pattern(seed) of logical offsets
// [base, base + size). False if it cannot be written.
bool writeFile(const std::string& path, uint64_t size, uint64_t seed, uint64_t base = 0);
// `len` bytes of `path` at `off`; empty if the file cannot be read that far.
std::vector<char> readFile(const std::string& path, uint64_t off, uint64_t len);

// Why io_uring cannot be used by this process ("" when it can): the host
// kernel lacks it or has it disabled (kernel.io_uring_disabled, seccomp).
std::string uringUnavailableReason();

// freeBatchID(b) once it stops answering BatchBusy (the batch's I/O ended),
// within `timeout`; the last answer.
Status freeWhenIdle(TransferEngine& e, BatchID b, std::chrono::milliseconds timeout = std::chrono::seconds(20));

// The scheduler state of thread `tid` of this process (/proc/self/task/TID/stat:
// 'R' running, 'S' sleeping, 'T' stopped, ...), or '?' if unknown.
char threadState(pid_t tid);

// True when every thread of process `pid` is in the stopped state
// (/proc/PID/task/*/stat shows 'T' or 't').
bool allThreadsStopped(pid_t pid);

// SIGSTOP to `pid`, then waits (up to `timeout`) until every thread of it
// has stopped: kill() returns while threads running on another core still
// run on until they next enter the kernel, so a test that relies on the
// process being frozen must wait for that. False if it did not stop.
bool stopProcess(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(20));

// An established TCP connection's end on this host, as the kernel reports it
// (`ss -tmni`, through sock_diag: no descriptor of this process is touched,
// so threads that close theirs meanwhile race with nothing): both ports and
// its buffer sizes, SO_SNDBUF ("tb") and SO_RCVBUF ("rb"), twice what
// setsockopt asked for, and its byte counts: sent and acknowledged by the
// peer, each byte once (retransmissions are not counted; on the connecting
// end one more, for its SYN), and received.
struct TcpSocket {
  uint16_t local_port = 0, peer_port = 0;
  int sndbuf = 0, rcvbuf = 0;
  uint64_t bytes_acked = 0, bytes_received = 0;
};
// Every established TCP connection end of this network namespace (every
// process's); empty if `ss` (iproute2) cannot run.
std::vector<TcpSocket> tcpSockets();

// Whether `e` installed the transport `name`.
bool hasTransport(TransferEngine& e, const std::string& name);
// Counter `key` of transport `transport` in `st` (transport "": the
// engine's own counters). A counter that is not there fails the test,
// naming it, and reads 0.
uint64_t counter(const EngineStats& st, const std::string& transport, const std::string& key);
inline uint64_t counter(const TransferEngine& e, const std::string& transport, const std::string& key) {
  return counter(e.stats(), transport, key);
}
// Every counter of transport `transport` in `e`'s stats (none: the test fails).
Counters transportCounters(const TransferEngine& e, const std::string& transport);

// Page-aligned heap buffer.
struct Buffer {
  explicit Buffer(size_t n, size_t align = 4096);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  char* data() { return p; }
  size_t size() const { return n; }
  char* p = nullptr;
  size_t n = 0;
};

// A temporary directory removed at destruction (under /var/tmp by default,
// which supports O_DIRECT, unlike tmpfs).
struct TempDir {
  explicit TempDir(const std::string& base = "/var/tmp");
  ~TempDir();
  std::string path;
};

// A child process running `hawser <args>`; killed (SIGKILL) at destruction.
struct Child {
  Child() = default;
  ~Child();
  Child(Child&&) = delete;
  // Starts the process; stdout is captured to a file.
  bool start(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  // Starts any program: argv[0] is the path.
  bool exec(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  // Waits until stdout contains `needle` (returns that line) or timeout.
  std::string waitFor(const std::string& needle, int timeout_ms = 10000);
  void kill(int sig = 9);
  int wait();  // exit status (or 128+signal)
  pid_t pid = -1;
  std::string out_path;
};

// Waits for a started `hawser serve` to print its segment, its memory's
// address ("memory: 0x...") and "ready"; false when one did not come in time.
bool servedSegment(Child& c, std::string& segment, uint64_t& base, int timeout_ms = 20000);

// Whether this process maps the shm registration table of `pid` (hawser-shm-<pid>).
bool mapsShmTableOf(pid_t pid);

// Runs a shell command; returns its exit status and (optionally) stdout.
int sh(const std::string& cmd, std::string* out = nullptr);

// The value of the sample of metric family `family` whose labels include
// every one of `labels` (a histogram's: its count), or -1 when there is none.
double metricValue(const EngineStats& st, const std::string& family, const std::map<std::string, std::string>& labels);
// hawser_route_fallbacks_total{from,to,reason} of `e` (docs/routes.md), or -1.
inline double routeFallbacks(TransferEngine& e, const std::string& from, const std::string& to,
                             const std::string& reason) {
  return metricValue(e.stats(), "hawser_route_fallbacks_total", {{"from", from}, {"to", to}, {"reason", reason}});
}

// The last line of a command's output (a trailing newline ignored): where
// `--json` tools print their summary.
std::string lastLine(const std::string& out);

// Waits for a batch and returns per-task statuses.
std::vector<TransferStatus> runBatch(TransferEngine& e, SegmentID seg, const std::vector<TransferRequest>& reqs,
                                     int timeout_ms = 30000, Status* submit_status = nullptr);

// The hawser tool: $HAWSER_TEST_BIN where set (tests run from a bundle on
// another machine, scripts/gpu_test.sh), else the one this build made.
inline std::string hawserBin() {
  const char* e = getenv("HAWSER_TEST_BIN");
  return e && *e ? e : HAWSER_BIN;
}

#ifdef HAWSER_SIGNAL_SENDER
// tests/signals/signal_sender.cpp: beside $HAWSER_TEST_BIN where that is set
// (a bundle carries both in its bin/), else the one this build made.
inline std::string signalSenderBin() {
  const char* e = getenv("HAWSER_TEST_BIN");
  if (!e || !*e) return HAWSER_SIGNAL_SENDER;
  std::string dir(e);
  size_t slash = dir.rfind('/');
  return (slash == std::string::npos ? std::string(".") : dir.substr(0, slash)) + "/signal_sender";
}
#endif

}  // namespace hawser::test
