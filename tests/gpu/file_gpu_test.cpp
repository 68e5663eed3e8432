// GPU memory <-> file segments (issue 9 items 4, 5, 7): through cuFile
// (file.cufile=on), through pinned staging (file.cufile=off), and the
// fallback when cuFile refuses one file (auto). Every byte is checked by
// uploading a pattern to the GPU and downloading what arrived; host code
// never touches device memory (the stand-in driver SEGVs if it does).
//
// gpu.*: the real driver and libcufile.so.0 (on the H200 machine cuFile runs
// in compat mode and needs the udev record; see docs/file.md). gpu_sim.*:
// the stand-ins (tests/gpu/sim); HAWSER_TEST_CUFILE_LIB overrides the library.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <cstring>
#include <thread>

#include "common/log_capture.h"
#include "common/lone_file.h"
#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"
#include "transport/file/file_transport.h"

namespace hawser::test {
namespace {

// The stand-in libcufile goes with the stand-in driver (gpu_sim.*).
bool stubCufile() {
  const char* d = getenv("HAWSER_TEST_CUDA_DRIVER");
  return d && *d;
}
// $HAWSER_TEST_CUFILE_LIB, else the stand-in (gpu_sim.*) or libcufile.so.0.
std::string testCufilePath() {
  const char* e = getenv("HAWSER_TEST_CUFILE_LIB");
  if (e && *e) return e;
  return stubCufile() ? HAWSER_FAKE_CUFILE : "libcufile.so.0";
}

#define HAWSER_REQUIRE_CUFILE()                                                                  \
  do {                                                                                           \
    /* NODELETE: the transport loads it next; unloading it in between would drop its state */  \
    void* h_ = dlopen(testCufilePath().c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);          \
    if (!h_) GTEST_SKIP() << "cuFile library " << testCufilePath() << " not loadable: " << dlerror(); \
    dlclose(h_);                                                                                 \
  } while (0)

// The stand-in libcufile's counts (hawserFakeCufileStats).
struct FakeCufileStats {
  long opens = 0, setups = 0, live_batches = 0, submits = 0, entries = 0, max_entries = 0, files = 0, bufs = 0,
       canceled = 0, gate_waiting = 0, buf_register_calls = 0, buf_entries = 0;
};
FakeCufileStats fakeCufileStats() {
  FakeCufileStats s;
  void* h = dlopen(testCufilePath().c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return s;
  using Fn = int (*)(long*, int);
  auto fn = reinterpret_cast<Fn>(dlsym(h, "hawserFakeCufileStats"));
  long v[12] = {0};
  if (fn) fn(v, 12);
  dlclose(h);
  s = FakeCufileStats{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
  return s;
}

// The stand-in libcufile's gate (hawserFakeCufileGate): calls named in
// `mask` wait there until a later call clears their bit.
constexpr int kGateDriverOpen = 1, kGateBufRegister = 2;
void gateCufile(int mask) {
  void* h = dlopen(testCufilePath().c_str(), RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr) << "the stand-in libcufile is not loaded";
  auto fn = reinterpret_cast<void (*)(int)>(dlsym(h, "hawserFakeCufileGate"));
  dlclose(h);
  ASSERT_NE(fn, nullptr) << "the stand-in libcufile has no hawserFakeCufileGate";
  fn(mask);
}
// Registers [p, +n) with `e` while the gate holds cuFile calls: true when
// registerLocalMemory returned OK without waiting for them. Otherwise the
// gate is opened (so that the call can end) and false returned.
bool registersWhileGated(TransferEngine& e, void* p, size_t n) {
  std::atomic<bool> done{false};
  Status s;
  std::thread t([&] {
    s = e.registerLocalMemory(p, n);
    done = true;
  });
  const bool returned = eventually([&] { return done.load(); }, std::chrono::seconds(10));
  if (!returned) gateCufile(0);
  t.join();
  EXPECT_TRUE(s.ok()) << s.toString();
  return returned && s.ok();
}
// Opens the gate when the test ends, whatever ended it (declare it after
// any thread that must be joined: it opens first, then the thread joins).
struct GateOpener {
  ~GateOpener() { gateCufile(0); }
};

std::map<std::string, uint64_t> fileCounters(TransferEngine& e) {
  std::map<std::string, uint64_t> out;
  for (auto& t : e.stats().transports)
    if (t.transport == "file")
      for (auto& [k, v] : t.counters) out[k] = v;
  return out;
}

class FileGpu : public ::testing::Test {
 protected:
  static constexpr uint64_t kSeed = 99;
  static constexpr size_t kFileA = (1u << 20) + 4096 + 17;  // odd sizes: the boundary is unaligned
  static constexpr size_t kFileB = (2u << 20) + 333;
  static constexpr size_t kLen = 123457;  // roundTrip's write and read
  static constexpr uint64_t kMoved = 2 * kLen + kFileA + kFileB;  // bytes one roundTrip moves

  // Starts the engine with `extra` config; two files "a" and "bfile" as one segment.
  void start(std::map<std::string, std::string> extra, const std::string& b_name = "bfile") {
    EngineOptions o;
    o.config = gpuConfig();
    o.config["file.cufile_lib"] = testCufilePath();
    for (auto& [k, v] : extra) o.config[k] = v;
    Status s = engine_.init("p2p", "file-gpu", "127.0.0.1", 0, o);
    ASSERT_TRUE(s.ok()) << s.toString();
    a_ = dir_.path + "/a";
    b_ = dir_.path + "/" + b_name;
    ASSERT_TRUE(writeFile(a_, kFileA, kSeed, 0));
    ASSERT_TRUE(writeFile(b_, kFileB, kSeed, kFileA));
    ASSERT_TRUE(engine_.registerFileSegment("two", {{a_, kFileA, {}}, {b_, kFileB, {}}}).ok());
    ASSERT_TRUE(engine_.openSegment("two", seg_).ok());
  }

  Status run(OpCode op, void* local, uint64_t target, size_t len) {
    return engine_.transferSync({{op, local, seg_, target, len}}, std::chrono::seconds(60));
  }
  // Starts with file.cufile=on and registers `dev`: "" when cuFile takes the
  // files here, else why not (no udev record on this host: skip then).
  std::string startCufileOn(const DeviceBuffer& dev) {
    start({{"file.cufile", "on"}});
    EXPECT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
    Status p = run(OpCode::kRead, dev.data(), 0, 4096);
    if (p.code() == Code::kNotSupported) return "cuFile refuses files here: " + p.message();
    EXPECT_TRUE(p.ok()) << p.toString();
    return "";
  }

  // One block request in its own batch: OK when it completed.
  Status runBlocks(OpCode op, SegmentID seg, const std::vector<Block>& blocks) {
    BatchID b;
    Status s = engine_.allocateBatchID(1, b);
    if (!s.ok()) return s;
    s = engine_.submitBlocks(b, op, seg, blocks);
    if (s.ok()) s = engine_.waitTransfer(b, std::chrono::seconds(60));
    TransferStatus st;
    if (s.ok()) s = engine_.getTransferStatus(b, 0, st);
    if (s.ok() && st.s != TransferState::kCompleted) s = st.error.ok() ? Status(Code::kInternal, "not completed") : st.error;
    Status f = engine_.freeBatchID(b);
    return s.ok() ? f : s;
  }

  // GPU -> file across the boundary (unaligned offset, length and address),
  // then file -> GPU of the same bytes and of the whole segment; every byte
  // of the files and of the GPU checked.
  void roundTrip(const DeviceBuffer& dev) {
    const uint64_t target = kFileA - 5000;  // 5000 bytes into a, the rest into b
    const size_t len = kLen;
    std::vector<char> pattern(len);
    fillPattern(pattern.data(), len, 7, 0);
    dev.upload(pattern, 9);
    Status s = run(OpCode::kWrite, dev.data() + 9, target, len);
    ASSERT_TRUE(s.ok()) << s.toString();
    auto a = readFile(a_, 0, kFileA), b = readFile(b_, 0, kFileB);
    ASSERT_EQ(a.size(), kFileA);
    ASSERT_EQ(b.size(), kFileB);
    EXPECT_EQ(checkPattern(a.data() + target, 5000, 7, 0), -1);
    EXPECT_EQ(checkPattern(b.data(), len - 5000, 7, 5000), -1);
    EXPECT_EQ(checkPattern(a.data(), target, kSeed, 0), -1) << "bytes before the write changed";
    EXPECT_EQ(checkPattern(b.data() + (len - 5000), kFileB - (len - 5000), kSeed, kFileA + (len - 5000)), -1)
        << "bytes after the write changed";

    dev.fill(0);
    s = run(OpCode::kRead, dev.data() + 4096 + 3, target, len);
    ASSERT_TRUE(s.ok()) << s.toString();
    auto back = dev.download(4096 + 3, len);
    EXPECT_EQ(checkPattern(back.data(), len, 7, 0), -1);

    // Restore the written range, then the whole segment at an unaligned address.
    ASSERT_TRUE(writeFile(a_, kFileA, kSeed, 0));
    ASSERT_TRUE(writeFile(b_, kFileB, kSeed, kFileA));
    dev.fill(0);
    s = run(OpCode::kRead, dev.data() + 17, 0, kFileA + kFileB);
    ASSERT_TRUE(s.ok()) << s.toString();
    auto whole = dev.download(17, kFileA + kFileB);
    EXPECT_EQ(checkPattern(whole.data(), kFileA + kFileB, kSeed, 0), -1);
    auto edge = dev.download(0, 17);
    EXPECT_EQ(std::count(edge.begin(), edge.end(), 0), 17) << "bytes before the read's address changed";
  }

  static uint64_t delta(const std::map<std::string, uint64_t>& after, const std::map<std::string, uint64_t>& before,
                        const std::string& k) {
    auto a = after.find(k);
    auto b = before.find(k);
    return (a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
  }

  TempDir dir_;
  TransferEngine engine_;
  SegmentID seg_ = kInvalidSegment;
  std::string a_, b_;
};

TEST_F(FileGpu, gpu_to_file_and_back_through_cufile_every_byte_checked) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  DeviceBuffer dev(0, 8 << 20);
  if (std::string why = startCufileOn(dev); !why.empty()) GTEST_SKIP() << why;
  auto before = fileCounters(engine_);
  roundTrip(dev);
  auto after = fileCounters(engine_);
  EXPECT_GT(delta(after, before, "gpu_compat_slices") + delta(after, before, "gpu_gds_slices"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_compat_bytes") + delta(after, before, "gpu_gds_bytes"), kMoved);
  EXPECT_GT(delta(after, before, "cufile_batches"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_staged_uring_slices") + delta(after, before, "gpu_staged_posix_slices"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_copy_windows"), 0u);
  EXPECT_TRUE(engine_.unregisterLocalMemory(dev.data()).ok());
}

class FileGpuStaged : public FileGpu, public ::testing::WithParamInterface<std::string> {};

// io_uring may be missing on a host (skipped, with the reason); pread and
// pwrite never are: file.engine=posix that does not install fails.
#define HAWSER_REQUIRE_FILE_ENGINE()                                                              \
  do {                                                                                            \
    if (!hasTransport(engine_, "file")) {                                                         \
      ASSERT_NE(GetParam(), "posix") << "file.engine=posix did not install";                     \
      GTEST_SKIP() << "file.engine=" << GetParam() << " cannot run here: " << uringUnavailableReason(); \
    }                                                                                             \
  } while (0)

TEST_P(FileGpuStaged, gpu_to_file_and_back_through_staging_every_byte_checked) {
  HAWSER_REQUIRE_GPU(1);
  // Two 64 KiB slots for ~3 MiB: slices wait for slots, copies pipeline.
  start({{"file.cufile", "off"},
         {"file.engine", GetParam()},
         {"file.gpu_staging_buffers", "2"},
         {"file.max_io_size", "64K"}});
  HAWSER_REQUIRE_FILE_ENGINE();
  DeviceBuffer dev(0, 8 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  auto before = fileCounters(engine_);
  roundTrip(dev);
  auto after = fileCounters(engine_);
  const std::string path = "gpu_staged_" + GetParam();
  EXPECT_GT(delta(after, before, path + "_slices"), 40u);
  EXPECT_EQ(delta(after, before, path + "_bytes"), kMoved);
  EXPECT_GT(delta(after, before, "gpu_copy_windows"), 40u);
  EXPECT_EQ(delta(after, before, "gpu_compat_slices") + delta(after, before, "gpu_gds_slices"), 0u);
  EXPECT_EQ(delta(after, before, "bounce_slices"), 0u) << "GPU memory must never bounce through host code";
}

// A paged KV cache offloaded to disk: 128 blocks of 32 KiB scattered over
// GPU memory, one contiguous 4 MiB of a file. Staged in 1 MiB I/Os, each
// with one batched copy (its 32 runs) between the slot and the GPU, not one
// I/O and one copy per block; every byte checked on both sides.
TEST_P(FileGpuStaged, scattered_gpu_blocks_go_to_a_contiguous_file_range_in_large_ios_one_copy_each) {
  HAWSER_REQUIRE_GPU(1);
  start({{"file.cufile", "off"}, {"file.engine", GetParam()}, {"file.max_io_size", "1M"}});
  HAWSER_REQUIRE_FILE_ENGINE();
  constexpr uint64_t n = 128, bs = 32 << 10;
  const std::string kv = dir_.path + "/kv";
  ASSERT_TRUE(writeFile(kv, n * bs + (1 << 20), kSeed));
  SegmentID seg;
  ASSERT_TRUE(engine_.openSegment("file://" + kv, seg).ok());
  DeviceBuffer dev(0, 4 * n * bs);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  // Block i at slot[i] * 2 * bs: scattered, never right after another block.
  std::vector<uint64_t> slot(2 * n);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), std::mt19937(9));
  slot.resize(n);
  std::vector<Block> blocks(n);
  std::vector<char> host(dev.size(), 0);
  for (uint64_t i = 0; i < n; ++i) {
    blocks[i] = Block{dev.data() + slot[i] * 2 * bs, i * bs, bs};
    fillPattern(host.data() + slot[i] * 2 * bs, bs, 21, i * bs);
  }
  dev.upload(host);
  const std::string path = "gpu_staged_" + GetParam();
  auto before = fileCounters(engine_);
  Status st = runBlocks(OpCode::kWrite, seg, blocks);
  ASSERT_TRUE(st.ok()) << st.toString();
  auto after = fileCounters(engine_);
  const uint64_t ios = delta(after, before, "gpu_copy_windows");
  EXPECT_GE(ios, n * bs / (1 << 20));
  EXPECT_LE(ios, n * bs / (1 << 20) + 2) << "4 MiB in 1 MiB I/Os (a window boundary may split one more)";
  EXPECT_EQ(delta(after, before, "gpu_copy_runs"), n) << "each block copied once, in its I/O's batched copy";
  EXPECT_EQ(delta(after, before, "coalesced_runs"), n);
  EXPECT_EQ(delta(after, before, "coalesced_ios"), ios);
  EXPECT_EQ(delta(after, before, path + "_slices"), n);
  EXPECT_EQ(delta(after, before, path + "_bytes"), n * bs);
  auto disk = readFile(kv, 0, n * bs + (1 << 20));
  ASSERT_EQ(disk.size(), n * bs + (1 << 20));
  EXPECT_EQ(checkPattern(disk.data(), n * bs, 21, 0), -1);
  EXPECT_EQ(checkPattern(disk.data() + n * bs, 1 << 20, kSeed, n * bs), -1) << "bytes past the range changed";

  dev.fill(0);
  before = fileCounters(engine_);
  st = runBlocks(OpCode::kRead, seg, blocks);
  ASSERT_TRUE(st.ok()) << st.toString();
  after = fileCounters(engine_);
  EXPECT_LE(delta(after, before, "gpu_copy_windows"), n * bs / (1 << 20) + 2);
  EXPECT_EQ(delta(after, before, "gpu_copy_runs"), n);
  auto back = dev.download();
  EXPECT_EQ(back, host) << "every block read back in place, nothing else written";
  EXPECT_EQ(delta(after, before, "bounce_slices"), 0u) << "GPU memory must never bounce through host code";
}

// Blocks of odd lengths at odd GPU addresses: a read whose blocks leave
// gaps of 1000 bytes in the file (read through and dropped: staging rounds
// the I/O out to the alignment), a write of blocks back to back from an odd
// offset (its unaligned head and tail through the page cache); every byte
// checked, and the file's bytes around and between the blocks unchanged.
TEST_P(FileGpuStaged, odd_gpu_blocks_with_gaps_stage_through_few_ios) {
  HAWSER_REQUIRE_GPU(1);
  start({{"file.cufile", "off"}, {"file.engine", GetParam()}, {"file.max_io_size", "1M"}});
  HAWSER_REQUIRE_FILE_ENGINE();
  constexpr uint64_t n = 100, gap = 1000, at = 77;
  const std::string kv = dir_.path + "/odd";
  std::vector<uint64_t> len(n), roff(n), woff(n);
  uint64_t rend = at, wend = at;
  for (uint64_t i = 0; i < n; ++i) {
    len[i] = 3000 + (i * 53) % 2000 + 1;
    roff[i] = rend;
    rend += len[i] + gap;
    woff[i] = wend;
    wend += len[i];
  }
  ASSERT_TRUE(writeFile(kv, rend + 4096, kSeed));
  SegmentID seg;
  ASSERT_TRUE(engine_.openSegment("file://" + kv, seg).ok());
  DeviceBuffer dev(0, 2 * n * 8192);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  dev.fill(0);
  std::vector<Block> reads(n), writes(n);
  for (uint64_t i = 0; i < n; ++i) {
    char* p = dev.data() + ((i * 67) % (2 * n)) * 8192 + 3 + i % 5;
    reads[i] = Block{p, roff[i], len[i]};
    writes[i] = Block{p, woff[i], len[i]};
  }
  auto before = fileCounters(engine_);
  Status st = runBlocks(OpCode::kRead, seg, reads);
  ASSERT_TRUE(st.ok()) << st.toString();
  auto after = fileCounters(engine_);
  EXPECT_LE(delta(after, before, "gpu_copy_windows"), 4u) << "one I/O per block?";
  EXPECT_GE(delta(after, before, "gpu_copy_runs"), n) << "a block across a 1 MiB boundary is two runs";
  EXPECT_EQ(delta(after, before, "coalesced_runs"), delta(after, before, "gpu_copy_runs"));
  auto host = dev.download();
  for (uint64_t i = 0; i < n; ++i) {
    const char* p = host.data() + (static_cast<char*>(reads[i].local) - dev.data());
    ASSERT_EQ(checkPattern(p, len[i], kSeed, roff[i]), -1) << "block " << i;
    ASSERT_EQ(p[-1], 0) << "the byte before block " << i << " was written";
    ASSERT_EQ(p[len[i]], 0) << "the byte after block " << i << " was written";
  }

  // Write the same memory back to back from offset 77.
  before = fileCounters(engine_);
  st = runBlocks(OpCode::kWrite, seg, writes);
  ASSERT_TRUE(st.ok()) << st.toString();
  after = fileCounters(engine_);
  EXPECT_LE(delta(after, before, "gpu_copy_windows"), 6u) << "two windows: each an aligned middle, a head and a tail";
  auto disk = readFile(kv, 0, rend + 4096);
  ASSERT_EQ(disk.size(), rend + 4096);
  EXPECT_EQ(checkPattern(disk.data(), at, kSeed, 0), -1) << "bytes before the write changed";
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(disk.data() + woff[i], len[i], kSeed, roff[i]), -1) << "block " << i;
  EXPECT_EQ(checkPattern(disk.data() + wend, rend + 4096 - wend, kSeed, wend), -1) << "bytes after the write changed";
}

INSTANTIATE_TEST_SUITE_P(Engines, FileGpuStaged, ::testing::Values("uring", "posix"),
                         [](const auto& i) { return i.param; });

// file.cufile=auto: a file cuFile refuses goes through staging, and so does
// a file it accepts while the library runs in compat mode (as the stand-in
// does, and the H200 machine without nvidia-fs): one line per file, saying
// why.
TEST_F(FileGpu, under_auto_a_refused_file_and_compat_mode_go_through_staging_logged_once_per_file) {
  HAWSER_REQUIRE_GPU(1);
  if (!stubCufile()) GTEST_SKIP() << "needs the stand-in libcufile's refusal hook (gpu_sim only)";
  setenv("HAWSER_FAKE_CUFILE_REFUSE", "refused-b", 1);
  start({{"file.cufile", "auto"}}, "refused-b");
  DeviceBuffer dev(0, 8 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  auto before = fileCounters(engine_);
  std::string logged;
  {
    LogCapture log;
    roundTrip(dev);
    roundTrip(dev);
    logged = log.text();
  }
  unsetenv("HAWSER_FAKE_CUFILE_REFUSE");
  auto after = fileCounters(engine_);
  // One line per file (whatever descriptors it took), naming it and why.
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t pos = 0; (pos = logged.find(what, pos)) != std::string::npos; ++pos) ++n;
    return n;
  };
  EXPECT_EQ(count("goes through pinned staging"), 2u) << logged;
  EXPECT_EQ(count("'" + b_ + "' goes through pinned staging buffers: cuFile refuses it"), 1u) << logged;
  EXPECT_NE(logged.find("5027"), std::string::npos) << logged;
  EXPECT_EQ(count("'" + a_ + "' goes through pinned staging buffers: cuFile's mode is compat"), 1u) << logged;
  EXPECT_GT(delta(after, before, "cufile_refused_files"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_compat_slices") + delta(after, before, "gpu_gds_slices"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_staged_uring_bytes") + delta(after, before, "gpu_staged_posix_bytes"),
            2 * kMoved);
}

// file.cufile=on: cuFile takes one buffer per batch entry, so a block
// request's runs are one entry each (batched up to file.cufile_batch), never
// joined; every byte checked.
TEST_F(FileGpu, with_cufile_on_each_run_of_a_block_request_is_one_cufile_entry) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  DeviceBuffer dev(0, 4 << 20);
  if (std::string why = startCufileOn(dev); !why.empty()) GTEST_SKIP() << why;
  constexpr uint64_t n = 32, bs = 8192;
  std::vector<Block> blocks(n);
  for (uint64_t i = 0; i < n; ++i) blocks[i] = Block{dev.data() + ((i * 5) % n) * 2 * bs, i * bs, bs};
  dev.fill(0);
  auto before = fileCounters(engine_);
  Status st = runBlocks(OpCode::kRead, seg_, blocks);
  ASSERT_TRUE(st.ok()) << st.toString();
  auto after = fileCounters(engine_);
  EXPECT_EQ(delta(after, before, "cufile_ops"), n);
  EXPECT_EQ(delta(after, before, "coalesced_ios"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_copy_windows"), 0u);
  auto host = dev.download();
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(checkPattern(host.data() + ((i * 5) % n) * 2 * bs, bs, kSeed, i * bs), -1) << "block " << i;
}

TEST_F(FileGpu, cufile_batches_stay_within_the_library_limit_and_reuse_handles) {
  HAWSER_REQUIRE_GPU(1);
  if (!stubCufile()) GTEST_SKIP() << "counts batches through the stand-in libcufile (gpu_sim only)";
  // 4 KiB slices, 256 in flight, batches asked larger than the library's 128.
  start({{"file.cufile", "on"}, {"file.io_depth", "256"}, {"file.cufile_batch", "256"}, {"file.max_io_size", "4K"}});
  const FakeCufileStats base = fakeCufileStats();
  {
    DeviceBuffer dev(0, 4 << 20);
    ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
    for (int round = 0; round < 3; ++round) {
      dev.fill(0);
      Status s = run(OpCode::kRead, dev.data() + 5, 0, kFileA + kFileB);
      ASSERT_TRUE(s.ok()) << s.toString();
      auto got = dev.download(5, kFileA + kFileB);
      ASSERT_EQ(checkPattern(got.data(), got.size(), kSeed, 0), -1) << "round " << round;
    }
    EXPECT_TRUE(eventually([&] { return fakeCufileStats().bufs == base.bufs + 1; }))
        << "registered with cuFileBufRegister (in the background, once the first transfer opened cuFile)";
    const FakeCufileStats now = fakeCufileStats();
    EXPECT_LE(now.max_entries, 128) << "a batch beyond the library's max_batch_io_size";
    EXPECT_GT(now.submits - base.submits, 3 * 6) << "~790 slices per round need several batches";
    EXPECT_LE(now.setups - base.setups, 64) << "batch handles are pooled, not set up per batch";
    EXPECT_GT(now.files, base.files) << "file handles stay registered while the segment is open";
    ASSERT_TRUE(engine_.unregisterLocalMemory(dev.data()).ok());
    EXPECT_EQ(fakeCufileStats().bufs, base.bufs) << "cuFileBufDeregister at unregister";
  }
  ASSERT_TRUE(engine_.closeSegment(seg_).ok());
  EXPECT_TRUE(eventually([&] { return fakeCufileStats().files == base.files; }))
      << "file handles deregistered when their descriptors close";
}

TEST_F(FileGpu, a_failed_cufile_entry_fails_the_task_and_cancels_its_siblings) {
  HAWSER_REQUIRE_GPU(1);
  if (!stubCufile()) GTEST_SKIP() << "makes cuFile entries fail through the stand-in libcufile (gpu_sim only)";
  // Slow entries, 4 KiB slices, 64 in flight: when file b's entries fail,
  // most of file a's are still queued or in batches.
  setenv("HAWSER_FAKE_CUFILE_DELAY_MS", "1", 1);
  setenv("HAWSER_FAKE_CUFILE_FAIL", "bfile", 1);
  start({{"file.cufile", "on"}, {"file.io_depth", "64"}, {"file.max_io_size", "4K"}});
  DeviceBuffer dev(0, 4 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  const FakeCufileStats base = fakeCufileStats();
  auto before = fileCounters(engine_);
  std::vector<TransferStatus> st;
  // File b first in the request's last part: its entries fail while a's wait.
  Status s = engine_.transferSync({{OpCode::kRead, dev.data(), seg_, kFileA - 8192, 8192 + kFileB},
                                   {OpCode::kRead, dev.data() + (3 << 20), seg_, 0, kFileA - 8192}},
                                  std::chrono::seconds(60), &st);
  unsetenv("HAWSER_FAKE_CUFILE_FAIL");
  unsetenv("HAWSER_FAKE_CUFILE_DELAY_MS");
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].s, TransferState::kFailed) << st[0].error.toString();
  EXPECT_NE(st[0].error.message().find(b_), std::string::npos) << st[0].error.toString();
  EXPECT_EQ(st[1].s, TransferState::kCompleted) << "another task is not a sibling: " << st[1].error.toString();
  auto after = fileCounters(engine_);
  EXPECT_GT(delta(after, before, "cancel_requests"), 0u) << "the failed slice's siblings were asked to stop";
  // Siblings queued in the engine end at once; whole batches of them are
  // cancelled in the library (cuFileBatchIOCancel), never another task's.
  const FakeCufileStats now = fakeCufileStats();
  EXPECT_LT(now.entries - base.entries, static_cast<long>((8192 + kFileB) / 4096 + (kFileA - 8192) / 4096 + 2))
      << "every slice ran: nothing was cancelled";
  auto got = dev.download(3 << 20, kFileA - 8192);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 0), -1);
}

TEST_F(FileGpu, a_gpu_range_outside_registered_memory_is_refused) {
  HAWSER_REQUIRE_GPU(1);
  start({{"file.cufile", "auto"}});
  DeviceBuffer dev(0, 1 << 20), other(0, 1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), 512 << 10).ok());
  Status s = run(OpCode::kRead, dev.data() + (512 << 10) - 100, 0, 200);  // runs past the region
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  s = run(OpCode::kWrite, other.data(), 0, 4096);  // never registered
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  auto a = readFile(a_, 0, kFileA);
  EXPECT_EQ(checkPattern(a.data(), kFileA, kSeed, 0), -1) << "nothing written";
}

TEST_F(FileGpu, cufile_on_without_libcufile_is_a_clear_error) {
  HAWSER_REQUIRE_GPU(1);
  const std::string missing = dir_.path + "/no-such-libcufile.so.0";
  start({{"file.cufile", "on"}, {"file.cufile_lib", missing}});
  DeviceBuffer dev(0, 1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok()) << "other transports may move it";
  Status s = run(OpCode::kRead, dev.data(), 0, 4096);
  EXPECT_EQ(s.code(), Code::kNotSupported) << s.toString();
  EXPECT_NE(s.message().find("file.cufile=on"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  // Host memory still moves, and the doctor says what is missing.
  Buffer host(8192);
  ASSERT_TRUE(engine_.registerLocalMemory(host.p, host.n).ok());
  ASSERT_TRUE(run(OpCode::kRead, host.p, 100, 4096).ok());
  EXPECT_EQ(checkPattern(host.p, 4096, kSeed, 100), -1);
  bool said = false;
  for (auto& d : engine_.diagnose())
    for (auto& [k, v] : d.facts)
      if (k == "cuFile library") said = v.find("not loadable") != std::string::npos;
  EXPECT_TRUE(said) << "hawser doctor names the missing library";
}

TEST_F(FileGpu, without_libcufile_auto_goes_through_staging) {
  HAWSER_REQUIRE_GPU(1);
  start({{"file.cufile", "auto"}, {"file.cufile_lib", dir_.path + "/no-such-libcufile.so.0"}});
  DeviceBuffer dev(0, 8 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  auto before = fileCounters(engine_);
  roundTrip(dev);
  auto after = fileCounters(engine_);
  EXPECT_GT(delta(after, before, "gpu_staged_uring_slices") + delta(after, before, "gpu_staged_posix_slices"), 0u);
  EXPECT_EQ(delta(after, before, "gpu_compat_slices") + delta(after, before, "gpu_gds_slices"), 0u);
}

// Issue 14 item 1: registering GPU memory never waits for cuFile. The
// library's driver opens at the first GPU <-> file transfer, on a thread of
// the transport's own; buffers are registered on the engine's registration
// thread. The stand-in holds both calls at a gate the test opens, so
// nothing here depends on timing.
TEST_F(FileGpu, gpu_registration_returns_before_cufile_opens_and_registers_and_io_meanwhile_is_exact) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  if (!stubCufile()) GTEST_SKIP() << "holds cuFile calls at the stand-in libcufile's gate (gpu_sim only)";
  // A path of its own: cuFile is opened once per path and process, so this
  // one's cuFileDriverOpen happens in this test (the same library object).
  const std::string lib = dir_.path + "/libcufile-gated.so.0";
  ASSERT_EQ(::symlink(testCufilePath().c_str(), lib.c_str()), 0) << strerror(errno);
  std::atomic<bool> gpu_done{false};
  Status gpu_s;
  DeviceBuffer dev(0, 8 << 20);
  std::jthread reader;  // joined after the gate opens (GateOpener below)
  GateOpener opener;
  gateCufile(kGateDriverOpen | kGateBufRegister);
  start({{"file.cufile", "on"}, {"file.cufile_lib", lib}});
  const FakeCufileStats base = fakeCufileStats();
  ASSERT_EQ(base.gate_waiting, 0);

  ASSERT_TRUE(registersWhileGated(engine_, dev.data(), dev.size())) << "registration waited for cuFile";
  // A transfer that does not need cuFile neither opens nor waits for it.
  Buffer host(8192);
  ASSERT_TRUE(engine_.registerLocalMemory(host.p, host.n).ok());
  ASSERT_TRUE(run(OpCode::kRead, host.p, 100, 4096).ok());
  EXPECT_EQ(checkPattern(host.p, 4096, kSeed, 100), -1);
  EXPECT_EQ(fakeCufileStats().gate_waiting, 0) << "cuFile was opened before a transfer needed it";
  EXPECT_EQ(fakeCufileStats().buf_register_calls, base.buf_register_calls);

  // The first GPU <-> file transfer opens the library and waits for it.
  dev.fill(0);
  reader = std::jthread([&] {
    gpu_s = run(OpCode::kRead, dev.data() + 17, 0, kFileA + kFileB);
    gpu_done = true;
  });
  ASSERT_TRUE(eventually([&] { return fakeCufileStats().gate_waiting == 1; }))
      << "the first GPU transfer did not open cuFile";
  EXPECT_TRUE(holdsFor([&] { return !gpu_done.load(); }, std::chrono::milliseconds(100)))
      << "a GPU transfer went ahead of cuFileDriverOpen: " << gpu_s.toString();

  // The driver opens; the buffer's registration is now held at the gate: the
  // transfer goes through unregistered memory (the library stages it) and
  // moves every byte.
  auto before = fileCounters(engine_);
  gateCufile(kGateBufRegister);
  ASSERT_TRUE(eventually([&] {
    auto f = fakeCufileStats();
    return f.buf_register_calls == base.buf_register_calls + 1 && f.gate_waiting == 1;
  })) << "the region was not queued for cuFileBufRegister when the driver opened";
  reader.join();
  ASSERT_TRUE(gpu_s.ok()) << gpu_s.toString();
  auto whole = dev.download(17, kFileA + kFileB);
  EXPECT_EQ(checkPattern(whole.data(), kFileA + kFileB, kSeed, 0), -1);
  roundTrip(dev);  // writes and reads, still unregistered
  EXPECT_EQ(fakeCufileStats().bufs, base.bufs) << "the registration is still held at the gate";
  auto after = fileCounters(engine_);
  EXPECT_EQ(delta(after, before, "gpu_compat_bytes"), kFileA + kFileB + kMoved) << "through cuFile";

  // Registered once the gate opens; the same I/O then uses the registration.
  gateCufile(0);
  ASSERT_TRUE(eventually([&] { return fakeCufileStats().bufs == base.bufs + 1; }));
  roundTrip(dev);
  ASSERT_TRUE(engine_.unregisterLocalMemory(dev.data()).ok());
  EXPECT_EQ(fakeCufileStats().bufs, base.bufs) << "cuFileBufDeregister at unregister";
}

TEST_F(FileGpu, unregistering_right_after_registering_leaves_no_cufile_registration) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  if (!stubCufile()) GTEST_SKIP() << "holds cuFileBufRegister at the stand-in libcufile's gate (gpu_sim only)";
  start({{"file.cufile", "on"}});
  DeviceBuffer a(0, 1 << 20), b(0, 1 << 20);
  std::atomic<bool> a_gone{false}, b_gone{false};
  std::jthread unreg_a, unreg_b;
  GateOpener opener;
  // cuFile opens at the first GPU <-> file transfer.
  ASSERT_TRUE(engine_.registerLocalMemory(a.data(), a.size()).ok());
  ASSERT_TRUE(run(OpCode::kRead, a.data(), 0, 4096).ok());
  ASSERT_TRUE(engine_.unregisterLocalMemory(a.data()).ok());
  const FakeCufileStats base = fakeCufileStats();

  // Without a gate, many times over: nothing is left behind.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(engine_.registerLocalMemory(a.data(), a.size()).ok());
    ASSERT_TRUE(engine_.unregisterLocalMemory(a.data()).ok());
    ASSERT_EQ(fakeCufileStats().bufs, base.bufs) << "round " << i;
  }

  // a's registration running (held at the gate), b's queued behind it.
  gateCufile(kGateBufRegister);
  const long calls = fakeCufileStats().buf_register_calls;
  ASSERT_TRUE(registersWhileGated(engine_, a.data(), a.size())) << "registration waited for cuFileBufRegister";
  ASSERT_TRUE(eventually([&] { return fakeCufileStats().gate_waiting == 1; }));
  ASSERT_TRUE(registersWhileGated(engine_, b.data(), b.size()));
  // b's is dropped before it reaches the library: its unregister need not wait.
  unreg_b = std::jthread([&] {
    EXPECT_TRUE(engine_.unregisterLocalMemory(b.data()).ok());
    b_gone = true;
  });
  EXPECT_TRUE(eventually([&] { return b_gone.load(); })) << "unregistering a queued registration waited";
  // a's is under way: its unregister waits for it, then deregisters it.
  unreg_a = std::jthread([&] {
    EXPECT_TRUE(engine_.unregisterLocalMemory(a.data()).ok());
    a_gone = true;
  });
  EXPECT_TRUE(holdsFor([&] { return !a_gone.load(); }, std::chrono::milliseconds(100)))
      << "unregister returned while the registration was still running";
  gateCufile(0);
  unreg_a.join();
  const FakeCufileStats now = fakeCufileStats();
  EXPECT_EQ(now.bufs, base.bufs) << "a registration was left behind";
  EXPECT_EQ(now.buf_register_calls, calls + 1) << "b's dropped registration reached the library";
}

TEST_F(FileGpu, shutdown_with_registrations_pending_is_clean) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  if (!stubCufile()) GTEST_SKIP() << "holds cuFileBufRegister at the stand-in libcufile's gate (gpu_sim only)";
  DeviceBuffer a(0, 1 << 20), b(0, 1 << 20);
  auto e = std::make_unique<TransferEngine>();
  std::atomic<bool> gone{false};
  std::jthread closer;
  GateOpener opener;
  EngineOptions o;
  o.config = gpuConfig();
  o.config["file.cufile"] = "on";
  o.config["file.cufile_lib"] = testCufilePath();
  ASSERT_TRUE(e->init("p2p", "file-gpu-shutdown", "127.0.0.1", 0, o).ok());
  // cuFile opens at the first GPU <-> file transfer.
  const std::string f = dir_.path + "/f";
  ASSERT_TRUE(writeFile(f, 8192, kSeed, 0));
  ASSERT_TRUE(e->registerFileSegment("f", {{f, 8192, {}}}).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(e->openSegment("f", seg).ok());
  DeviceBuffer warm(0, 8192);
  ASSERT_TRUE(e->registerLocalMemory(warm.data(), warm.size()).ok());
  ASSERT_TRUE(e->transferSync({{OpCode::kRead, warm.data(), seg, 0, 8192}}, std::chrono::seconds(60)).ok());
  ASSERT_TRUE(e->unregisterLocalMemory(warm.data()).ok());
  const FakeCufileStats base = fakeCufileStats();
  gateCufile(kGateBufRegister);
  ASSERT_TRUE(registersWhileGated(*e, a.data(), a.size()));
  ASSERT_TRUE(eventually([&] { return fakeCufileStats().gate_waiting == 1; }));
  ASSERT_TRUE(registersWhileGated(*e, b.data(), b.size()));  // queued behind a's
  // The engine goes without unregistering: shutdown drops b's, waits for
  // a's and deregisters it.
  closer = std::jthread([&] {
    e.reset();
    gone = true;
  });
  EXPECT_TRUE(holdsFor([&] { return !gone.load(); }, std::chrono::milliseconds(100)))
      << "shutdown returned while a registration was running";
  gateCufile(0);
  closer.join();
  const FakeCufileStats now = fakeCufileStats();
  EXPECT_EQ(now.bufs, base.bufs) << "a registration outlived the engine";
  EXPECT_GE(now.buf_register_calls, base.buf_register_calls + 1);
  EXPECT_LE(now.buf_register_calls, base.buf_register_calls + 2);
}

// cuFile I/O takes what it needs from the registration the request brings:
// an entry names the registered buffer (its base and the offset in it) once
// cuFileBufRegister took the region, the address itself before, and the GPU
// bound for a batch is the region's (found at registration). The driver is
// never asked where the memory is (the transport used to, for every batch
// of a buffer not yet registered).
TEST_F(FileGpu, cufile_entries_take_their_buffer_and_gpu_from_the_registration) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  if (!stubCufile()) GTEST_SKIP() << "counts entries and driver calls through the stand-ins (gpu_sim only)";
  GateOpener opener;
  start({{"file.cufile", "on"}, {"file.max_io_size", "64K"}});
  DeviceBuffer dev(0, 4 << 20);
  gateCufile(kGateBufRegister);  // the buffer's registration waits at the gate
  ASSERT_TRUE(registersWhileGated(engine_, dev.data(), dev.size()));
  const long long pointer_calls = fakeCudaCalls("pointer");
  ASSERT_GE(pointer_calls, 0);
  FakeCufileStats base = fakeCufileStats();
  dev.fill(0);
  Status s = run(OpCode::kRead, dev.data() + 17, 0, kFileA);  // opens cuFile; the region is queued
  ASSERT_TRUE(s.ok()) << s.toString();
  FakeCufileStats now = fakeCufileStats();
  EXPECT_GT(now.entries - base.entries, 10);
  EXPECT_EQ(now.buf_entries - base.buf_entries, 0) << "an entry named a buffer cuFile had not registered";
  EXPECT_EQ(fakeCudaCalls("pointer"), pointer_calls) << "the driver was asked where the memory is";
  auto got = dev.download(17, kFileA);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 0), -1);

  gateCufile(0);
  ASSERT_TRUE(eventually([&] { return fakeCufileStats().bufs == base.bufs + 1; })) << "never registered";
  base = fakeCufileStats();
  dev.fill(0);
  ASSERT_TRUE((s = run(OpCode::kRead, dev.data() + 4096 + 5, 0, kFileA + kFileB)).ok()) << s.toString();
  now = fakeCufileStats();
  EXPECT_GT(now.entries - base.entries, 10);
  EXPECT_EQ(now.buf_entries - base.buf_entries, now.entries - base.entries)
      << "entries named the address rather than the registered buffer";
  EXPECT_EQ(fakeCudaCalls("pointer"), pointer_calls) << "the driver was asked where the memory is";
  got = dev.download(4096 + 5, kFileA + kFileB);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 0), -1);
  ASSERT_TRUE(engine_.unregisterLocalMemory(dev.data()).ok());
  EXPECT_EQ(fakeCufileStats().bufs, base.bufs - 1) << "cuFileBufDeregister at unregister";
}

// Which GPU a request's memory is on comes with its registration
// (FileRegistration::gpu: Region::gpu, parsed once), never from a lookup: a
// file transport that never registered the region moves its GPU memory by
// the registration it is handed (staged: pinned slots and one GPU copy per
// I/O), and refuses it once the transport that made it unregistered the
// region. A transport that looked the address up would find nothing here
// and move device memory as host memory.
TEST(FileGpuRegistration, gpu_memory_moves_by_the_registration_it_brings_and_never_once_torn_down) {
  HAWSER_REQUIRE_GPU(1);
  TempDir dir;
  const std::string path = dir.path + "/f";
  constexpr uint64_t kSeed = 31;
  ASSERT_TRUE(writeFile(path, 1 << 20, kSeed));
  auto cfg = gpuConfig();
  cfg["file.cufile"] = "off";
  LoneFile owner(path, cfg), other(path, cfg);
  ASSERT_TRUE(owner.status.ok()) << owner.status.toString();
  ASSERT_TRUE(other.status.ok()) << other.status.toString();
  DeviceBuffer dev(0, 1 << 20);
  LocalRegion region;
  ASSERT_TRUE(owner.registerRegion(dev.data(), dev.size(), "cuda:0", region).ok());
  EXPECT_EQ(region.gpu, 0);
  dev.fill(0);
  const auto before = file::fileStatsOf(other.transport().stats());
  Status s = other.move(OpCode::kRead, dev.data() + 4096, 0, 256 << 10, region);
  ASSERT_TRUE(s.ok()) << s.toString();
  const LocalRegion regions[] = {region};
  const uint64_t at = reinterpret_cast<uint64_t>(dev.data()) + 4096;
  s = other.moveRuns(OpCode::kWrite, {{at, 512 << 10, 64 << 10, -1, 0}, {at + (128 << 10), 640 << 10, 64 << 10, -1, 0}},
                     regions);
  ASSERT_TRUE(s.ok()) << s.toString();
  const auto after = file::fileStatsOf(other.transport().stats());
  EXPECT_GT(after.gpu_staged_uring_slices + after.gpu_staged_posix_slices,
            before.gpu_staged_uring_slices + before.gpu_staged_posix_slices);
  EXPECT_EQ(after.direct_slices + after.bounce_slices + after.buffered_slices,
            before.direct_slices + before.bounce_slices + before.buffered_slices)
      << "GPU memory moved as host memory";
  auto got = dev.download(4096, 256 << 10);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 0), -1);
  auto file = readFile(path, 512 << 10, 64 << 10);
  EXPECT_EQ(checkPattern(file.data(), file.size(), kSeed, 0), -1);
  file = readFile(path, 640 << 10, 64 << 10);
  EXPECT_EQ(checkPattern(file.data(), file.size(), kSeed, 128 << 10), -1);

  // Torn down by the transport that made it: refused, nothing written.
  ASSERT_TRUE(owner.unregister(dev.data(), dev.size()).ok());
  s = other.move(OpCode::kWrite, dev.data(), 0, 4096, region);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  file = readFile(path, 0, 4096);
  EXPECT_EQ(checkPattern(file.data(), file.size(), kSeed, 0), -1) << "a refused write reached the file";
}


// GPUDirect Storage as a route of its own, "gds" (docs/routes.md): where it
// cannot be had, a GPU request to a file segment falls back to "file"
// (staging, or cuFile's compat mode), counted per request, logged once per
// segment and reason, shown by explainRoute (hawser doctor --peer), and
// refused at submit under a contract requiring no_staging.
class FileGpuRoute : public FileGpu {
 protected:
  // A GPU read of the segment under `require` ("" : the engine's contract).
  Status submitGpu(const DeviceBuffer& dev, const std::string& require) {
    TransferRequest r{OpCode::kRead, dev.data(), seg_, 0, 4096};
    if (!require.empty()) {
      EXPECT_TRUE(parseRouteContract("", require, r.route).ok());
    }
    BatchID b;
    Status s = engine_.allocateBatchID(1, b);
    if (!s.ok()) return s;
    s = engine_.submitTransfer(b, {r});
    if (s.ok()) s = engine_.waitTransfer(b, std::chrono::seconds(60));
    Status f = freeWhenIdle(engine_, b);
    return s.ok() ? f : s;
  }
  std::string refusalPrefix(const std::string& reason) const {
    return "requests[0]: segment 'two': the route contract (require no_staging, from the request) forbids the route "
           "this request would take, file; the expected route, gds, is unavailable: " + reason + ": ";
  }
  std::string gdsFact() {
    for (auto& d : engine_.diagnose())
      for (auto& [k, v] : d.facts)
        if (d.transport == "file" && k == "route gds") return v;
    return "";
  }
};

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; ++p) ++n;
  return n;
}

TEST_F(FileGpuRoute, cufile_in_compat_mode_is_a_counted_logged_fallback_and_refused_under_no_staging) {
  HAWSER_REQUIRE_GPU(1);
  HAWSER_REQUIRE_CUFILE();
  if (!stubCufile()) GTEST_SKIP() << "needs the stand-in libcufile, which runs in compat mode (gpu_sim only)";
  LogCapture log;
  start({{"file.cufile", "auto"}});
  DeviceBuffer dev(0, 1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  // Refused before any I/O: the library's mode is known (or foreseen) at submit.
  Status s = submitGpu(dev, "no_staging");
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  const std::string prefix = refusalPrefix("compat_mode") + "cuFile '" + testCufilePath() + "' ";
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  EXPECT_NE(s.message().find(" in compatibility mode ("), std::string::npos) << s.message();
  EXPECT_EQ(routeFallbacks(engine_, "gds", "file", "compat_mode"), -1) << "a refused request is not counted";
  // Without the contract: three requests and a block request, each counted once, logged once.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(submitGpu(dev, "").ok());
  ASSERT_TRUE(runBlocks(OpCode::kRead, seg_, {{dev.data(), 0, 4096}, {dev.data() + 8192, 16384, 4096}}).ok());
  auto got = dev.download(8192, 4096);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 16384), -1);
  EXPECT_EQ(routeFallbacks(engine_, "gds", "file", "compat_mode"), 4);
  EXPECT_EQ(occurrences(log.text(), "segment 'two': requests go over file, not gds: compat_mode: cuFile '" +
                                        testCufilePath() + "' "),
            1u)
      << log.text();
  // Now that the driver opened, refused with what it found.
  s = submitGpu(dev, "no_staging");
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  EXPECT_EQ(s.message().substr(0, prefix.size() + 4), prefix + "runs") << s.message();
  // The doctor's view (hawser doctor --peer): GPU memory falls back, host memory does not.
  RouteExplanation gpu_route, host_route;
  ASSERT_TRUE(engine_.explainRoute(seg_, "cuda:0", gpu_route).ok());
  EXPECT_EQ(gpu_route.transport, "file");
  EXPECT_EQ(gpu_route.fallback_from, "gds");
  EXPECT_EQ(gpu_route.fallback_reason, "compat_mode");
  EXPECT_EQ(gpu_route.fallback_detail.substr(0, 9 + testCufilePath().size()), "cuFile '" + testCufilePath() + "'");
  ASSERT_TRUE(engine_.explainRoute(seg_, "cpu:0", host_route).ok());
  EXPECT_EQ(host_route.transport, "file");
  EXPECT_EQ(host_route.fallback_from, "");
  EXPECT_EQ(gdsFact().substr(0, 26), "unavailable: compat_mode: ") << gdsFact();
  // Host memory is never counted.
  Buffer host(8192);
  ASSERT_TRUE(engine_.registerLocalMemory(host.p, host.n).ok());
  ASSERT_TRUE(run(OpCode::kRead, host.p, 100, 4096).ok());
  EXPECT_EQ(routeFallbacks(engine_, "gds", "file", "compat_mode"), 4);
}

TEST_F(FileGpuRoute, without_libcufile_gpu_requests_fall_back_as_not_installed) {
  HAWSER_REQUIRE_GPU(1);
  const std::string missing = dir_.path + "/no-such-libcufile.so.0";
  start({{"file.cufile", "auto"}, {"file.cufile_lib", missing}});
  DeviceBuffer dev(0, 1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  Status s = submitGpu(dev, "no_staging");
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  const std::string prefix = refusalPrefix("not_installed") + "cuFile library '" + missing + "' not loadable: ";
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  ASSERT_TRUE(submitGpu(dev, "").ok());
  ASSERT_TRUE(submitGpu(dev, "").ok());
  EXPECT_EQ(routeFallbacks(engine_, "gds", "file", "not_installed"), 2);
}

TEST_F(FileGpuRoute, with_cufile_off_staging_is_chosen_not_a_fallback_and_no_staging_is_refused) {
  HAWSER_REQUIRE_GPU(1);
  start({{"file.cufile", "off"}});
  DeviceBuffer dev(0, 1 << 20);
  ASSERT_TRUE(engine_.registerLocalMemory(dev.data(), dev.size()).ok());
  Status s = submitGpu(dev, "no_staging");
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  EXPECT_EQ(s.message(),
            "requests[0]: segment 'two': the route contract (require no_staging, from the request) forbids the route "
            "this request would take, file; no transport of this build that the contract allows moves GPU memory to "
            "a file segment (file.cufile=off: GPU memory <-> files goes through pinned staging buffers "
            "(file.cufile=auto takes GPUDirect Storage, route gds, where it can))");
  ASSERT_TRUE(submitGpu(dev, "").ok());
  EXPECT_EQ(routeFallbacks(engine_, "gds", "file", "compat_mode"), -1);
  EXPECT_EQ(gdsFact(), "not offered (file.cufile=off)");
}

}  // namespace
}  // namespace hawser::test
