// signal_sender: the initiator of the signal tests, a process of its own so
// that tests can kill it, cut it off or drop its frames. It writes to the
// segment given (the test process: the receiver that waits on signals) and
// runs the commands given, in order:
//
//   write:NAME:N:LEN:OFF:SEED    N write requests of LEN bytes, one submit with signal NAME: the
//                                pattern SEED (base OFF) from local OFF to remote + OFF; waits, prints
//                                "done NAME STATE CODE" (the batch's state, its first error's code)
//   blocks:NAME:N:LEN:OFF:SEED   the same as one block request (submitBlocks with the signal)
//   notify:NAME:N:LEN:OFF:SEED   the same with notification {NAME, "kv"} instead of a signal
//   cancel:NAME:N:LEN            N writes of LEN bytes with signal NAME, canceled at once; prints the
//                                batch's state as `write` does
//   loop:NAME:LEN                writes of LEN bytes with signal NAME, 8 in flight, forever; prints
//                                "looping" once the first is submitted
//   nloop:NAME:LEN               the same with notification {NAME, "kv"}
//   await:PATH                   waits until file PATH exists
//   hold                         stays alive until killed (the test kills it)
//   stale                        takes the target's change notice, so the next submit keeps the
//                                descriptor this process holds (a range withdrawn since reaches the target)
//   drop:K | losereply:K         the next K signal frames sent are lost / their replies are lost
//   dropall                      every signal frame from now on is lost
//
// Options: --target SEG --remote ADDR (hex, the receiver's region) --bytes N
// (local buffer, default 64 MiB; a write beyond it takes its bytes from the
// buffer's start, with the pattern of its remote offset) --location cpu|cuda:N --host IP. It prints
// "segment: NAME" and "ready" once it opened the target.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/transport.h"
#include "common/util.h"
#include "engine/access.h"
#include "engine/notify_testing.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"

using namespace hawser;
namespace seam = hawser::notify_testing;

namespace {

std::atomic<int> g_drop{0}, g_lose{0};
std::atomic<bool> g_drop_all{false};

seam::FrameFate frameFate(const std::string&, uint64_t, int) {
  if (g_drop_all.load()) return seam::FrameFate::kDrop;
  if (g_drop.load() > 0 && g_drop.fetch_sub(1) > 0) return seam::FrameFate::kDrop;
  if (g_lose.load() > 0 && g_lose.fetch_sub(1) > 0) return seam::FrameFate::kLoseReply;
  return seam::FrameFate::kSend;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The local buffer: host memory or GPU memory, freed after the engine
// (declared before it in Sender) let go of it.
struct LocalBuffer {
  char* p = nullptr;
  bool gpu = false;
  ~LocalBuffer() {
    if (gpu && p) (void)freeDeviceMemory(p);
    else std::free(p);
  }
};

struct Sender {
  LocalBuffer buffer;
  TransferEngine engine;
  SegmentID seg = kInvalidSegment;
  std::string target;
  uint64_t remote = 0;
  char* local = nullptr;
  size_t bytes = 64u << 20;
  bool gpu = false;

  // Where the bytes for remote offset `off` lie here: at the same offset
  // when the local buffer reaches that far, else from its start.
  size_t localOffset(size_t off, size_t len) const { return off + len <= bytes ? off : 0; }

  void fill(size_t off, size_t len, uint64_t seed) {
    const size_t loff = localOffset(off, len);
    if (!gpu) return test::fillPattern(local + loff, len, seed, off);
    std::vector<char> h(len);
    test::fillPattern(h.data(), len, seed, off);
    (void)copyMemory(local + loff, h.data(), len);
  }

  std::vector<TransferRequest> writes(size_t n, size_t len, size_t off) {
    const size_t loff = localOffset(off, n * len);
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < n; ++i)
      reqs.push_back({OpCode::kWrite, local + loff + i * len, seg, remote + off + i * len, len});
    return reqs;
  }

  // Waits for batch `b` (and its signal's or notification's outcome) and prints it.
  void report(const std::string& name, BatchID b) {
    Status w = engine.waitTransfer(b, std::chrono::seconds(120));
    TransferStatus st;
    (void)engine.getBatchTransferStatus(b, st);
    say("done " + name + " " + std::string(stateName(st.s)) + " " + std::to_string(int(st.error.code())) +
        (w.ok() ? "" : " wait:" + w.toString()));
    (void)test::freeWhenIdle(engine, b);
  }

  int run(const std::string& cmd) {
    auto a = split(cmd, ':');
    const std::string& op = a[0];
    if ((op == "write" || op == "blocks" || op == "notify") && a.size() == 6) {
      const size_t n = std::stoul(a[2]), len = std::stoul(a[3]), off = std::stoul(a[4]);
      fill(off, n * len, std::stoull(a[5]));
      BatchID b;
      if (!engine.allocateBatchID(n, b).ok()) return 1;
      Status s;
      if (op == "write") {
        s = engine.submitTransfer(b, writes(n, len, off), Signal{a[1]});
      } else if (op == "notify") {
        s = engine.submitTransfer(b, writes(n, len, off), Notification{a[1], "kv"});
      } else {
        std::vector<Block> blocks;
        for (auto& r : writes(n, len, off)) blocks.push_back({r.source, r.target_offset, r.length});
        s = engine.submitBlocks(b, OpCode::kWrite, seg, blocks, Signal{a[1]});
      }
      if (!s.ok()) {
        say("refused " + a[1] + " " + s.toString());
        return 0;
      }
      report(a[1], b);
      return 0;
    }
    if (op == "cancel" && a.size() == 4) {
      const size_t n = std::stoul(a[2]), len = std::stoul(a[3]);
      BatchID b;
      if (!engine.allocateBatchID(n, b).ok()) return 1;
      if (!engine.submitTransfer(b, writes(n, len, 0), Signal{a[1]}).ok()) return 1;
      (void)engine.cancelTransfer(b);
      report(a[1], b);
      return 0;
    }
    if ((op == "loop" || op == "nloop") && a.size() == 3) {
      const size_t len = std::stoul(a[2]);
      const size_t slots = 8;
      if (slots * len > bytes) return 1;
      std::vector<BatchID> batches(slots);
      for (auto& b : batches)
        if (!engine.allocateBatchID(1, b).ok()) return 1;
      for (uint64_t k = 0;; ++k) {
        BatchID b = batches[k % slots];
        if (k >= slots) (void)engine.waitTransfer(b, std::chrono::seconds(120));
        (void)test::freeWhenIdle(engine, b);
        if (!engine.allocateBatchID(1, b).ok()) return 1;
        batches[k % slots] = b;
        auto req = writes(1, len, (k % slots) * len);
        Status s = op == "loop" ? engine.submitTransfer(b, req, Signal{a[1]})
                                : engine.submitTransfer(b, req, Notification{a[1], "kv"});
        if (!s.ok()) {
          say("refused " + a[1] + " " + s.toString());
          return 1;
        }
        if (k == 0) say("looping");
      }
    }
    if (op == "await" && a.size() == 2) {
      for (int i = 0; i < 6000 && !std::filesystem::exists(a[1]); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return std::filesystem::exists(a[1]) ? 0 : 1;
    }
    if (op == "stale") {
      auto* store = detail::EngineAccess::of(engine).store();
      return test::eventually([&] { return store->mayHaveChanged(target, 0); }) ? 0 : 1;
    }
    if (op == "hold" && a.size() == 1) {
      for (;;) ::pause();  // until the test's SIGKILL
    }
    if (op == "drop" && a.size() == 2) return g_drop.store(std::stoi(a[1])), 0;
    if (op == "losereply" && a.size() == 2) return g_lose.store(std::stoi(a[1])), 0;
    if (op == "dropall") return g_drop_all.store(true), 0;
    say("bad command: " + cmd);
    return 2;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Sender s;
  std::string location = "cpu", host = "127.0.0.1";
  std::vector<std::string> cmds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--target") s.target = next();
    else if (a == "--remote") s.remote = std::stoull(next(), nullptr, 16);
    else if (a == "--bytes") s.bytes = std::stoull(next());
    else if (a == "--location") location = next();
    else if (a == "--host") host = next();
    else cmds.push_back(a);
  }
  seam::on_signal_frame.store(frameFate);
  Status st = s.engine.init("p2p", "signal-sender", host, 0);
  if (!st.ok()) return say("init: " + st.toString()), 1;
  if (location == "cpu") {
    s.buffer.p = static_cast<char*>(std::aligned_alloc(4096, (s.bytes + 4095) / 4096 * 4096));
  } else {
    s.gpu = s.buffer.gpu = true;
    void* p = nullptr;
    if (!(st = loadCudaDriver()).ok() || !(st = allocateDeviceMemory(gpuOrdinalOf(location), s.bytes, &p)).ok())
      return say("gpu: " + st.toString()), 1;
    s.buffer.p = static_cast<char*>(p);
  }
  s.local = s.buffer.p;
  if (!(st = s.engine.registerLocalMemory(s.local, s.bytes, s.gpu ? "*" : "cpu:0", false)).ok())
    return say("register: " + st.toString()), 1;
  if (!(st = s.engine.openSegment(s.target, s.seg)).ok()) return say("open: " + st.toString()), 1;
  say("segment: " + s.engine.segmentName());
  say("ready");
  for (auto& c : cmds)
    if (int rc = s.run(c); rc != 0) return say("failed: " + c), rc;
  say("finished");
  return 0;
}
