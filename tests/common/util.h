// Shared helpers for hawser tests.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "hawser/engine.h"

namespace hawser::test {

// Deterministic content: byte i of a buffer seeded with `seed` at logical
// offset `base`.
void fillPattern(void* buf, size_t len, uint64_t seed, uint64_t base = 0);
// Index of the first mismatching byte, or -1.
int64_t checkPattern(const void* buf, size_t len, uint64_t seed, uint64_t base = 0);
uint64_t checksum(const void* buf, size_t len);

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

// Runs a shell command; returns its exit status and (optionally) stdout.
int sh(const std::string& cmd, std::string* out = nullptr);

// Waits for a batch and returns per-task statuses.
std::vector<TransferStatus> runBatch(TransferEngine& e, SegmentID seg, const std::vector<TransferRequest>& reqs,
                                     int timeout_ms = 30000, Status* submit_status = nullptr);

// The "hawser" CLI binary of this build.
inline std::string hawserBin() { return HAWSER_BIN; }

}  // namespace hawser::test
