// The file transport's I/O engines (io_uring and pread/pwrite), driven
// directly: completions matched by cookie, queue depth, cancellation, fixed
// buffers. Every case runs on both engines.
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/util.h"
#include "transport/file/file_transport.h"
#include "transport/file/io_engine.h"

using namespace hawser;
using namespace hawser::file;
using namespace hawser::test;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// Why io_uring cannot run here ("" when it can), from facts: this build
// has no io_uring engine, or the kernel refuses io_uring_setup (a raw
// system call, not the code under test). Where it can, an engine that
// fails to start is a failure, not a skip.
std::string uringMissing() {
  if (!uringCompiledIn()) return "this build has no io_uring engine";
  return uringUnavailableReason();
}

// Makes an io_uring engine: "" once made (or failed: `e` stays null), else
// why io_uring cannot run here (skip).
std::string makeUring(const IoEngineOptions& o, std::unique_ptr<IoEngine>& e) {
  if (std::string why = uringMissing(); !why.empty()) return why;
  Status s = makeUringEngine(o, std::make_shared<FileCounters>(), e);
  if (!s.ok()) ADD_FAILURE() << "io_uring works on this host, yet makeUringEngine: " << s.toString();
  return "";
}

#define MAKE_URING_OR_SKIP(opts, e)                                            \
  do {                                                                         \
    const std::string why_ = makeUring(opts, e);                               \
    if (!why_.empty()) GTEST_SKIP() << "io_uring cannot run: " << why_;        \
    if (!e) return;                                                            \
  } while (0)

// Whether this process may pin `bytes` more of memory: CAP_IPC_LOCK in
// its effective set exempts it from RLIMIT_MEMLOCK; else the limit must
// leave room (what this process pinned already counts: VmLck).
bool canPin(uint64_t bytes, std::string* why) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) == 0 && (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))))
    return true;
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    *why = std::string("getrlimit(RLIMIT_MEMLOCK): ") + std::strerror(errno);
    return false;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return true;
  uint64_t locked_kib = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmLck:", 0) == 0) locked_kib = std::strtoull(line.c_str() + 6, nullptr, 10);
  if (rl.rlim_cur >= locked_kib * KiB + bytes) return true;
  *why = "RLIMIT_MEMLOCK is " + std::to_string(rl.rlim_cur) + " bytes (" + std::to_string(locked_kib) +
         " KiB locked already) and this process lacks CAP_IPC_LOCK: it cannot pin " + std::to_string(bytes);
  return false;
}

// Collects completions; optionally blocks inside the first one (to hold the
// engine's completion thread while the test queues more work).
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, int64_t> results;
  size_t count = 0;
  bool hold_first = false;
  bool holding = false;
  bool release = false;

  CompletionSink fn() {
    return [this](std::span<const IoCompletion> cs) {
      std::unique_lock lk(mu);
      for (auto& c : cs) {
        EXPECT_EQ(results.count(c.cookie), 0u) << "cookie " << c.cookie << " completed twice";
        results[c.cookie] = c.result;
        count++;
      }
      cv.notify_all();
      if (hold_first) {
        hold_first = false;
        holding = true;
        cv.notify_all();
        cv.wait(lk, [&] { return release; });
      }
    };
  }
  bool waitCount(size_t n, int ms = 20000) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return count >= n; });
  }
  bool waitHolding(int ms = 20000) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return holding; });
  }
  void unhold() {
    std::lock_guard lk(mu);
    release = true;
    cv.notify_all();
  }
};

class IoEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir.path.empty());
    path = dir.path + "/data";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 8 * MiB), 0);
    ::close(fd);
    fd_ = ::open(path.c_str(), O_RDWR | O_DIRECT);
    ASSERT_GE(fd_, 0) << std::strerror(errno);
  }
  void TearDown() override {
    if (engine) {
      EXPECT_EQ(engine->stop(std::chrono::seconds(10)), 0u);
    }
    engine.reset();
    if (fd_ >= 0) ::close(fd_);
  }
  // Makes the engine: "" once made (or failed: `engine` stays null), else
  // why io_uring cannot run on this host (skip).
  std::string make(IoEngineOptions o = {}) {
    if (GetParam() == "uring") {
      if (std::string why = makeUring(o, engine); !why.empty() || !engine) return why;
    } else {
      engine = makePosixEngine(o);
    }
    EXPECT_TRUE(engine->start(sink.fn()).ok());
    return "";
  }
  // A vectored op over `v` (kept alive by the caller).
  IoOp vop(uint64_t cookie, bool write, const std::vector<iovec>& v, uint64_t off) {
    uint64_t len = 0;
    for (const iovec& x : v) len += x.iov_len;
    IoOp o = op(cookie, write, nullptr, len, off);
    o.iov = v.data();
    o.iov_count = static_cast<uint32_t>(v.size());
    return o;
  }
  IoOp op(uint64_t cookie, bool write, void* buf, uint64_t len, uint64_t off) {
    IoOp o;
    o.cookie = cookie;
    o.fd = fd_;
    o.write = write;
    o.buf = buf;
    o.len = len;
    o.offset = off;
    return o;
  }

  TempDir dir;
  std::string path;
  int fd_ = -1;
  Sink sink;
  std::unique_ptr<IoEngine> engine;
};

#define MAKE_OR_SKIP(...)                                             \
  do {                                                                \
    const std::string why_ = make(__VA_ARGS__);                       \
    if (!why_.empty()) GTEST_SKIP() << "io_uring cannot run: " << why_; \
    if (!engine) return;                                              \
  } while (0)

}  // namespace

TEST_P(IoEngineTest, completions_are_matched_by_cookie_not_by_position) {
  MAKE_OR_SKIP();
  // Ops of different lengths, cookies not in submission order: each result
  // must come back under its own cookie.
  Buffer buf(4 * MiB);
  fillPattern(buf.p, buf.n, 7);
  std::vector<IoOp> ops;
  std::map<uint64_t, uint64_t> want;
  uint64_t off = 0;
  for (int i = 0; i < 16; ++i) {
    uint64_t len = (i % 4 + 1) * 64 * KiB;
    uint64_t cookie = 1000 - i * 7;  // one-based, arbitrary order
    ops.push_back(op(cookie, true, buf.p + off, len, off));
    want[cookie] = len;
    off += len;
  }
  engine->submit(ops);
  ASSERT_TRUE(sink.waitCount(ops.size()));
  for (auto& [c, len] : want) EXPECT_EQ(sink.results[c], static_cast<int64_t>(len)) << "cookie " << c;

  // Read it all back through the engine and compare byte for byte.
  Buffer back(4 * MiB);
  engine->submit(std::vector<IoOp>{op(1, false, back.p, off, 0)});
  ASSERT_TRUE(sink.waitCount(ops.size() + 1));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(off));
  EXPECT_EQ(checkPattern(back.p, off, 7), -1);
}

TEST_P(IoEngineTest, more_ops_than_the_queue_depth_all_complete) {
  IoEngineOptions o;
  o.io_depth = 4;
  o.posix_threads = 2;
  MAKE_OR_SKIP(o);
  Buffer buf(8 * MiB);
  fillPattern(buf.p, buf.n, 11);
  std::vector<IoOp> ops;
  for (uint64_t i = 0; i < 128; ++i) ops.push_back(op(i + 1, true, buf.p + i * 64 * KiB, 64 * KiB, i * 64 * KiB));
  engine->submit(ops);
  ASSERT_TRUE(sink.waitCount(128));
  for (uint64_t i = 0; i < 128; ++i) EXPECT_EQ(sink.results[i + 1], static_cast<int64_t>(64 * KiB));
  if (GetParam() == "uring") {
    IoEngineStats st = engine->stats();
    EXPECT_EQ(st.submitted, 128u);
    // Batched: far fewer kernel submissions than ops would mean one per op;
    // each submit call carries up to io_depth ops.
    EXPECT_LT(st.submit_calls, 128u + 64u);
  }
}

// A vectored op: one I/O between a contiguous range of the (O_DIRECT) file
// and pieces of memory scattered in any order (preadv/pwritev, io_uring
// readv/writev).
TEST_P(IoEngineTest, a_vectored_op_moves_scattered_memory_as_one_io) {
  MAKE_OR_SKIP();
  constexpr uint64_t piece = 64 * KiB, n = 16;
  Buffer src(2 * n * piece), dst(2 * n * piece);
  std::vector<iovec> wv, rv;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t slot = (i * 7) % (2 * n);  // scattered, out of order
    fillPattern(src.p + slot * piece, piece, 31, i * piece);
    wv.push_back(iovec{src.p + slot * piece, piece});
    rv.push_back(iovec{dst.p + slot * piece, piece});
  }
  engine->submit(std::vector<IoOp>{vop(1, true, wv, MiB)});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(n * piece));
  // Read back plainly: the file holds the pieces in order.
  Buffer back(n * piece);
  engine->submit(std::vector<IoOp>{op(2, false, back.p, n * piece, MiB)});
  ASSERT_TRUE(sink.waitCount(2));
  EXPECT_EQ(checkPattern(back.p, n * piece, 31, 0), -1);
  // And vectored into the scattered pieces.
  engine->submit(std::vector<IoOp>{vop(3, false, rv, MiB)});
  ASSERT_TRUE(sink.waitCount(3));
  EXPECT_EQ(sink.results[3], static_cast<int64_t>(n * piece));
  for (uint64_t i = 0; i < n; ++i)
    EXPECT_EQ(checkPattern(rv[i].iov_base, piece, 31, i * piece), -1) << "piece " << i;
}

TEST_P(IoEngineTest, read_past_end_of_file_is_short_not_an_error) {
  MAKE_OR_SKIP();
  Buffer buf(2 * MiB);
  engine->submit(std::vector<IoOp>{op(5, false, buf.p, 2 * MiB, 7 * MiB)});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[5], static_cast<int64_t>(MiB));
}

TEST_P(IoEngineTest, bad_fd_completes_with_an_error_instead_of_failing_submit) {
  MAKE_OR_SKIP();
  Buffer buf(4096);
  IoOp o = op(3, false, buf.p, 4096, 0);
  o.fd = 987654;  // not open
  engine->submit(std::vector<IoOp>{o});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[3], -EBADF);
}

TEST_P(IoEngineTest, queued_op_can_be_cancelled) {
  IoEngineOptions o;
  o.posix_threads = 1;
  MAKE_OR_SKIP(o);
  Buffer buf(3 * 4096);
  sink.hold_first = true;  // park the completion thread inside the first completion
  engine->submit(std::vector<IoOp>{op(1, false, buf.p, 4096, 0)});
  ASSERT_TRUE(sink.waitHolding());
  engine->submit(std::vector<IoOp>{op(2, false, buf.p + 4096, 4096, 4096), op(3, false, buf.p + 8192, 4096, 8192)});
  uint64_t c = 2;
  engine->cancel(std::span<const uint64_t>(&c, 1));
  sink.unhold();
  ASSERT_TRUE(sink.waitCount(3));
  EXPECT_EQ(sink.results[1], 4096);
  EXPECT_EQ(sink.results[2], -ECANCELED);
  EXPECT_EQ(sink.results[3], 4096);
}

TEST_P(IoEngineTest, cancel_of_an_unknown_cookie_is_harmless) {
  MAKE_OR_SKIP();
  uint64_t c = 42;
  engine->cancel(std::span<const uint64_t>(&c, 1));
  Buffer buf(4096);
  engine->submit(std::vector<IoOp>{op(1, false, buf.p, 4096, 0)});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results.count(42), 0u);
}

TEST_P(IoEngineTest, registered_file_is_used_for_fixed_file_ops) {
  MAKE_OR_SKIP();
  int token = engine->addFile(fd_);
  if (GetParam() == "posix") {
    EXPECT_EQ(token, -1);
  } else {
    EXPECT_GE(token, 0);
  }
  Buffer buf(64 * KiB);
  fillPattern(buf.p, buf.n, 3);
  IoOp w = op(1, true, buf.p, buf.n, 0);
  w.file_token = token;
  engine->submit(std::vector<IoOp>{w});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(buf.n));
  Buffer back(64 * KiB);
  IoOp r = op(2, false, back.p, back.n, 0);
  r.file_token = token;
  engine->submit(std::vector<IoOp>{r});
  ASSERT_TRUE(sink.waitCount(2));
  EXPECT_EQ(checkPattern(back.p, back.n, 3), -1);
  if (GetParam() == "uring") {
    EXPECT_EQ(engine->stats().fixed_file_ops, 2u);
  }
  engine->removeFile(token);
}

// Registration pins nothing; the first op that carries the memory asks for
// its piece and goes out plain; once the piece is registered in the
// background, ops that carry it use the fixed buffer. An op in the same
// memory that does not carry it goes plain: the engine never looks an
// address up.
TEST_P(IoEngineTest, registered_memory_is_used_as_fixed_buffers_by_the_ops_that_carry_it) {
  MAKE_OR_SKIP();
  Buffer buf(MiB);
  fillPattern(buf.p, buf.n, 9);
  std::shared_ptr<EngineMemory> mem = engine->addMemory(buf.p, buf.n, -1);
  if (GetParam() == "uring") {
    ASSERT_NE(mem, nullptr);
  } else {
    EXPECT_EQ(mem, nullptr) << "the POSIX engine sets nothing up";
  }
  auto in = [&](IoOp o) {
    o.memory = mem.get();
    return o;
  };
  EXPECT_EQ(engine->stats().registered_bytes, 0u);  // nothing pinned at registration
  engine->submit(std::vector<IoOp>{in(op(1, true, buf.p, buf.n, 0))});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(MiB));
  Buffer back(MiB);
  engine->submit(std::vector<IoOp>{op(2, false, back.p, back.n, 0)});
  ASSERT_TRUE(sink.waitCount(2));
  EXPECT_EQ(checkPattern(back.p, back.n, 9), -1);
  if (GetParam() == "uring") {
    EXPECT_EQ(engine->stats().fixed_buffer_ops, 0u);  // the write asked for the piece; `back` is not registered
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (engine->stats().registered_bytes != MiB && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(engine->stats().registered_bytes, MiB) << "the piece was never registered";
    engine->submit(std::vector<IoOp>{in(op(4, true, buf.p, buf.n, 0))});
    ASSERT_TRUE(sink.waitCount(3));
    EXPECT_EQ(sink.results[4], static_cast<int64_t>(MiB));
    EXPECT_EQ(engine->stats().fixed_buffer_ops, 1u);
    // The same registered bytes without the memory: plain, not found by address.
    engine->submit(std::vector<IoOp>{op(5, true, buf.p, buf.n, 0)});
    ASSERT_TRUE(sink.waitCount(4));
    EXPECT_EQ(sink.results[5], static_cast<int64_t>(MiB));
    EXPECT_EQ(engine->stats().fixed_buffer_ops, 1u) << "an op that carried no memory used a fixed buffer";
  }
  if (mem) engine->removeMemory(*mem);
  if (GetParam() == "uring") {
    EXPECT_EQ(engine->stats().registered_bytes, 0u);
  }
  // After removal the same memory still works, unregistered, even by an op
  // that still carries what was removed.
  const size_t before = sink.count;
  engine->submit(std::vector<IoOp>{in(op(3, false, buf.p, buf.n, 0))});
  ASSERT_TRUE(sink.waitCount(before + 1));
  EXPECT_EQ(sink.results[3], static_cast<int64_t>(MiB));
  if (GetParam() == "uring") {
    EXPECT_EQ(engine->stats().fixed_buffer_ops, 1u) << "an op used a fixed buffer of removed memory";
  }
}

TEST_P(IoEngineTest, memory_the_kernel_will_not_pin_still_moves_data) {
  MAKE_OR_SKIP();
  // A MAP_SHARED file mapping: io_uring may refuse it as a fixed buffer;
  // either way the op must succeed (plain I/O fallback).
  std::string mp = dir.path + "/mapped";
  int mfd = ::open(mp.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(::ftruncate(mfd, 256 * KiB), 0);
  void* m = ::mmap(nullptr, 256 * KiB, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  ASSERT_NE(m, MAP_FAILED);
  fillPattern(m, 256 * KiB, 21);
  std::shared_ptr<EngineMemory> mem = engine->addMemory(m, 256 * KiB, -1);
  IoOp w = op(1, true, m, 256 * KiB, MiB);
  w.memory = mem.get();
  engine->submit(std::vector<IoOp>{w});
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(256 * KiB));
  Buffer back(256 * KiB);
  engine->submit(std::vector<IoOp>{op(2, false, back.p, back.n, MiB)});
  ASSERT_TRUE(sink.waitCount(2));
  EXPECT_EQ(checkPattern(back.p, back.n, 21), -1);
  if (mem) engine->removeMemory(*mem);
  ::munmap(m, 256 * KiB);
  ::close(mfd);
}

TEST_P(IoEngineTest, stop_cancels_queued_work_and_reports_nothing_left) {
  IoEngineOptions o;
  o.posix_threads = 1;
  MAKE_OR_SKIP(o);
  Buffer buf(64 * 4096);
  sink.hold_first = true;
  engine->submit(std::vector<IoOp>{op(1, false, buf.p, 4096, 0)});
  ASSERT_TRUE(sink.waitHolding());
  std::vector<IoOp> more;
  for (uint64_t i = 1; i < 64; ++i) more.push_back(op(i + 1, false, buf.p + i * 4096, 4096, i * 4096));
  engine->submit(more);
  // stop() runs on its own thread; the completion thread is released only
  // once stop() has marked the queued ops and sleeps waiting for them.
  std::atomic<pid_t> stopper{0};
  size_t left = 1;
  std::thread t([&] {
    stopper = static_cast<pid_t>(::syscall(SYS_gettid));
    left = engine->stop(std::chrono::seconds(10));
  });
  EXPECT_TRUE(eventually([&] { return stopper.load() != 0 && threadState(stopper.load()) == 'S'; }))
      << "stop() never waited";
  sink.unhold();
  t.join();
  EXPECT_EQ(left, 0u);
  std::lock_guard lk(sink.mu);
  EXPECT_EQ(sink.count, 64u);  // every op reported once
  EXPECT_EQ(sink.results[1], 4096);  // the op in flight when stop() began completed
  for (uint64_t c = 2; c <= 64; ++c) EXPECT_EQ(sink.results[c], -ECANCELED) << "cookie " << c;  // queued: cancelled
  engine.reset();
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest, ::testing::Values("uring", "posix"),
                         [](const auto& info) { return info.param; });

// Large ops enter the kernel one per io_uring_enter: a submission of more
// than two ops is plugged, and the block layer would merge adjacent large
// writes into fewer, larger requests (on a virtio disk 1 MiB writes went
// out as ~3.4 MiB requests at 0.63-0.74 of fio's rate). Small ops still go
// together.
TEST(UringEngine, large_ops_enter_the_kernel_one_per_call_small_ones_together) {
  TempDir dir;
  const std::string path = dir.path + "/data";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 16 * MiB), 0);
  std::unique_ptr<IoEngine> e;
  IoEngineOptions o;
  o.io_depth = 32;
  MAKE_URING_OR_SKIP(o, e);
  Sink sink;
  ASSERT_TRUE(e->start(sink.fn()).ok());
  Buffer buf(16 * MiB);
  fillPattern(buf.p, buf.n, 21);
  auto ops = [&](uint64_t first_cookie, bool write, char* base, uint64_t len, size_t n) {
    std::vector<IoOp> v;
    for (size_t i = 0; i < n; ++i) {
      IoOp x;
      x.cookie = first_cookie + i;
      x.fd = fd;
      x.write = write;
      x.buf = base + i * len;
      x.len = len;
      x.offset = i * len;
      v.push_back(x);
    }
    return v;
  };
  e->submit(ops(1, true, buf.p, MiB, 16));  // adjacent 1 MiB writes, all at once
  ASSERT_TRUE(sink.waitCount(16));
  EXPECT_LE(e->stats().largest_submit, 2u) << "large ops went to the kernel together (plugged: merged)";
  e->submit(ops(101, false, buf.p, 4 * KiB, 32));  // 32 small reads: together
  ASSERT_TRUE(sink.waitCount(48));
  EXPECT_GT(e->stats().largest_submit, 2u) << "small ops went to the kernel one by one";
  for (uint64_t c = 1; c <= 16; ++c) EXPECT_EQ(sink.results[c], static_cast<int64_t>(MiB)) << c;
  for (uint64_t c = 101; c < 133; ++c) EXPECT_EQ(sink.results[c], static_cast<int64_t>(4 * KiB)) << c;
  EXPECT_EQ(e->stop(std::chrono::seconds(10)), 0u);
  ::close(fd);
  // What was written is what the file holds.
  std::vector<char> back = readFile(path, 0, 16 * MiB);
  ASSERT_EQ(back.size(), 16 * MiB);
  EXPECT_EQ(checkPattern(back.data(), back.size(), 21), -1);
}

// io_uring only: an op blocked in the kernel (a read from an empty pipe) is
// cancelled by io_uring_prep_cancel and completes with -ECANCELED.
TEST(UringEngine, op_blocked_in_the_kernel_is_cancelled) {
  std::unique_ptr<IoEngine> e;
  MAKE_URING_OR_SKIP(IoEngineOptions{}, e);
  Sink sink;
  ASSERT_TRUE(e->start(sink.fn()).ok());
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  char b[16];
  IoOp o;
  o.cookie = 77;
  o.fd = p[0];
  o.buf = b;
  o.len = sizeof(b);
  o.offset = static_cast<uint64_t>(-1);  // stream: current position
  e->submit(std::vector<IoOp>{o});
  // In the kernel: handed to the ring, and not completed (the pipe is empty).
  ASSERT_TRUE(eventually([&] { return e->stats().submitted == 1; })) << "the op never reached the ring";
  EXPECT_FALSE(sink.waitCount(1, 0));
  uint64_t c = 77;
  e->cancel(std::span<const uint64_t>(&c, 1));
  ASSERT_TRUE(sink.waitCount(1));
  EXPECT_EQ(sink.results[77], -ECANCELED);
  EXPECT_EQ(e->stats().cancels, 1u);  // cancelled inside the kernel, not before submission
  EXPECT_EQ(e->stop(std::chrono::seconds(5)), 0u);
  ::close(p[0]);
  ::close(p[1]);
}

// io_uring only: registering a region larger than the kernel's 1 GiB
// per-buffer limit, untouched, pins and faults nothing; each op asks for the
// 64 MiB piece holding it, which is registered in the background (the last
// piece is the region's 2 MiB tail), and later ops there use fixed buffers.
TEST(UringEngine, pieces_are_registered_on_first_use_in_the_background) {
  std::unique_ptr<IoEngine> e;
  MAKE_URING_OR_SKIP(IoEngineOptions{}, e);
  const size_t n = (1ULL << 30) + 2 * MiB;
  void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) GTEST_SKIP() << "cannot map 1 GiB here";
  Sink sink;
  ASSERT_TRUE(e->start(sink.fn()).ok());
  std::shared_ptr<EngineMemory> mem = e->addMemory(m, n, -1);
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(e->stats().registered_bytes, 0u);
  unsigned char present = 1;
  ASSERT_EQ(::mincore(m, 4096, &present), 0);
  EXPECT_EQ(present & 1, 0) << "registration faulted the region in";
  TempDir dir;
  std::string path = dir.path + "/f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0);
  auto* base = static_cast<char*>(m);
  IoOp a;
  a.cookie = 1;
  a.fd = fd;
  a.write = true;
  a.buf = base;
  a.len = MiB;
  a.offset = 0;
  a.memory = mem.get();
  IoOp b = a;
  b.cookie = 2;
  b.buf = base + (1ULL << 30);  // the tail piece
  b.offset = MiB;
  e->submit(std::vector<IoOp>{a, b});
  ASSERT_TRUE(sink.waitCount(2));
  EXPECT_EQ(sink.results[1], static_cast<int64_t>(MiB));
  EXPECT_EQ(sink.results[2], static_cast<int64_t>(MiB));
  EXPECT_EQ(e->stats().fixed_buffer_ops, 0u);
  const uint64_t want = (64 + 2) * MiB;
  std::string why;
  if (!canPin(want, &why)) {
    ::munmap(m, n);
    GTEST_SKIP() << why;
  }
  EXPECT_TRUE(eventually([&] { return e->stats().registered_bytes == want; }))
      << "this process may pin " << want << " bytes, yet " << e->stats().registered_bytes << " were registered";
  ASSERT_EQ(e->stats().registered_bytes, want);
  a.cookie = 3;
  b.cookie = 4;
  e->submit(std::vector<IoOp>{a, b});
  ASSERT_TRUE(sink.waitCount(4));
  EXPECT_EQ(sink.results[3], static_cast<int64_t>(MiB));
  EXPECT_EQ(sink.results[4], static_cast<int64_t>(MiB));
  EXPECT_EQ(e->stats().fixed_buffer_ops, 2u);
  e->removeMemory(*mem);
  EXPECT_EQ(e->stats().registered_bytes, 0u);
  EXPECT_EQ(e->stop(std::chrono::seconds(5)), 0u);
  ::close(fd);
  ::munmap(m, n);
}

// io_uring only: with RLIMIT_MEMLOCK too small to pin a region (and no
// CAP_IPC_LOCK), registration fails and the engine falls back to plain I/O:
// the op still moves the right bytes. Runs in a child process, which drops
// the capability for good.
TEST(UringEngine, registration_refused_by_rlimit_memlock_falls_back_to_plain_io) {
  {
    std::unique_ptr<IoEngine> probe;
    MAKE_URING_OR_SKIP(IoEngineOptions{}, probe);
    EXPECT_EQ(probe->stop(std::chrono::seconds(5)), 0u);
  }
  TempDir dir;
  const std::string path = dir.path + "/f";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Drop CAP_IPC_LOCK (exempts from RLIMIT_MEMLOCK) from this thread, which
    // creates the engine's thread, and cap locked memory at 64 KiB.
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &hdr, data) != 0) _exit(10);
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    if (::syscall(SYS_capset, &hdr, data) != 0) _exit(11);
    rlimit rl{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(12);
    std::unique_ptr<IoEngine> e;
    if (!makeUringEngine(IoEngineOptions{}, std::make_shared<FileCounters>(), e).ok()) _exit(13);
    Sink sink;
    if (!e->start(sink.fn()).ok()) _exit(14);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (fd < 0) _exit(15);
    Buffer buf(4 * MiB), back(4 * MiB);
    fillPattern(buf.p, buf.n, 33);
    std::shared_ptr<EngineMemory> mem = e->addMemory(buf.p, buf.n, -1);  // 4 MiB > 64 KiB: refused
    if (e->stats().registered_bytes != 0) _exit(16);
    IoOp w;
    w.memory = mem.get();
    w.cookie = 1;
    w.fd = fd;
    w.write = true;
    w.buf = buf.p;
    w.len = buf.n;
    e->submit(std::vector<IoOp>{w});
    IoOp r = w;
    if (!sink.waitCount(1)) _exit(17);
    r.cookie = 2;
    r.write = false;
    r.buf = back.p;
    e->submit(std::vector<IoOp>{r});
    if (!sink.waitCount(2)) _exit(18);
    if (sink.results[1] != static_cast<int64_t>(buf.n) || sink.results[2] != static_cast<int64_t>(buf.n)) _exit(19);
    if (checkPattern(back.p, back.n, 33) != -1) _exit(20);
    if (e->stats().fixed_buffer_ops != 0) _exit(21);
    if (e->stop(std::chrono::seconds(5)) != 0) _exit(22);
    ::close(fd);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "child step " << WEXITSTATUS(st) << " failed";
}
