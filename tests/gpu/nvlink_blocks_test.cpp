// Block requests over nvlink: a paged KV cache's scattered blocks reach the
// transport a window of runs at a time (no task per run) and each window is
// copied with one launch of hawser's copy kernel (gpu/batch_copy.h). Every
// byte verified; a failed launch, a cancel and an owner's death mid-request
// end the request with nothing left in flight.
#include <signal.h>

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"
#include "transport/nvlink/nvlink_testing.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 555;

EngineOptions gpuOptions(std::map<std::string, std::string> extra = {}) {
  EngineOptions o;
  o.config = gpuConfig();
  for (auto& [k, v] : extra) o.config[k] = v;
  return o;
}

// `n` blocks of `block` bytes: block i at local slot lperm[i] and remote
// slot rperm[i] (two different permutations: each side its own block table).
std::vector<Block> kvBlocks(char* local, uint64_t remote, size_t n, uint64_t block, unsigned seed) {
  std::vector<size_t> lperm(n), rperm(n);
  std::iota(lperm.begin(), lperm.end(), 0);
  std::iota(rperm.begin(), rperm.end(), 0);
  std::shuffle(lperm.begin(), lperm.end(), std::mt19937(seed));
  std::shuffle(rperm.begin(), rperm.end(), std::mt19937(seed + 1));
  std::vector<Block> blocks(n);
  for (size_t i = 0; i < n; ++i) blocks[i] = Block{local + lperm[i] * block, remote + rperm[i] * block, block};
  return blocks;
}

// Two engines of this process, GPU memory on both: the target's filled with
// pattern(kSeed), the initiator's zeroed.
// The initiator's memory on the host's last GPU (another GPU than the
// target's where there are two), or on GPU 0 with same_gpu.
struct Pair {
  explicit Pair(size_t bytes, std::map<std::string, std::string> opts = {}, bool same_gpu = false)
      : src(0, bytes), dst(same_gpu ? 0 : gpu::CudaDriver::get()->deviceCount() - 1, bytes) {
    EXPECT_TRUE(target.init("p2p", "nvlink-blocks-t", "127.0.0.1", 0, gpuOptions()).ok());
    EXPECT_TRUE(init.init("p2p", "nvlink-blocks-i", "127.0.0.1", 0, gpuOptions(opts)).ok());
    std::vector<char> pattern(bytes);
    fillPattern(pattern.data(), bytes, kSeed);
    src.upload(pattern);
    dst.fill(0);
    EXPECT_TRUE(target.registerLocalMemory(src.data(), bytes).ok());
    EXPECT_TRUE(init.registerLocalMemory(dst.data(), bytes).ok());
    EXPECT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  }
  ~Pair() {
    (void)init.unregisterLocalMemory(dst.data());
    (void)target.unregisterLocalMemory(src.data());
  }
  uint64_t remote() const { return reinterpret_cast<uint64_t>(src.data()); }
  DeviceBuffer src, dst;
  TransferEngine target, init;
  SegmentID seg = 0;
};

// Every block of `blocks` (read into dst) holds the target's bytes.
// Posts `plan` in a batch of its own, waits for it and says how it ended.
void postAndWait(Pair& p, PlanID plan, TransferStatus& st) {
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  size_t task = 0;
  ASSERT_TRUE(p.init.postPlan(b, plan, &task).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
  ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
}

void expectBlocks(const Pair& p, const std::vector<Block>& blocks) {
  std::vector<char> got = p.dst.download();
  size_t bad = 0;
  for (const Block& b : blocks) {
    const uint64_t at = static_cast<uint64_t>(static_cast<char*>(b.local) - p.dst.data());
    bad += checkPattern(got.data() + at, b.length, kSeed, b.remote - p.remote()) != -1;
  }
  EXPECT_EQ(bad, 0u) << "blocks whose bytes are wrong";
}

TEST(nvlink_blocks, scattered_kv_blocks_move_a_window_per_kernel_launch) {
  HAWSER_REQUIRE_GPU(1);
  const uint64_t block = 16 << 10;
  const size_t n = 3000;
  Pair p(n * block);
  std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 1);
  PlanID plan;
  ASSERT_TRUE(p.init.prepareBlocks(OpCode::kRead, p.seg, blocks, plan).ok());
  PlanInfo info;
  ASSERT_TRUE(p.init.planInfo(plan, info).ok());
  ASSERT_GT(info.runs, 2900u) << "two random block tables leave few blocks contiguous on both sides";
  TransferStatus st;
  ASSERT_NO_FATAL_FAILURE(postAndWait(p, plan, st));
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, n * block);
  expectBlocks(p, blocks);
  // No task per run: the runs went as windows, each one launch.
  const uint64_t windows = counter(p.init, "nvlink", "gpu_copy_windows");
  EXPECT_EQ(counter(p.init, "nvlink", "gpu_copy_runs"), info.runs);
  EXPECT_EQ(windows, (info.runs + 8191) / 8192) << "a prepared plan's windows are whole ones of block.run_window runs";
  EXPECT_EQ(counter(p.init, "nvlink", "gpu_copy_kernel_launches"), windows) << "one launch per window";
  EXPECT_EQ(counter(p.init, "nvlink", "gpu_copy_per_run"), 0u);
  EXPECT_LE(counter(p.init, "nvlink", "gpu_copy_ctas_max"), 32u) << "gpu.copy_max_ctas's default";
  // Where the windows' time went is counted per group (one group a window).
  EXPECT_EQ(counter(p.init, "nvlink", "groups_issued"), windows);
  EXPECT_GT(counter(p.init, "nvlink", "group_gpu_ns"), 0u) << "launched until seen done";
  EXPECT_EQ(counter(p.init, "nvlink", "slices_failed"), 0u);

  // The other way: the initiator's blocks written into the target's, checked there.
  std::vector<char> mine(n * block);
  fillPattern(mine.data(), mine.size(), 77);
  p.dst.upload(mine);
  std::vector<Block> wblocks = kvBlocks(p.dst.data(), p.remote(), n, block, 9);
  BatchID b;
  size_t task = 0;
  ASSERT_TRUE(p.init.allocateBatchID(4, b).ok());
  ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kWrite, p.seg, wblocks, &task).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
  ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
  std::vector<char> there = p.src.download();
  size_t bad = 0;
  for (const Block& w : wblocks) {
    const uint64_t from = static_cast<uint64_t>(static_cast<char*>(w.local) - p.dst.data());
    bad += memcmp(there.data() + (w.remote - p.remote()), mine.data() + from, w.length) != 0;
  }
  EXPECT_EQ(bad, 0u);
  ASSERT_TRUE(p.init.releasePlan(plan).ok());
}

TEST(nvlink_blocks, a_prepared_plan_posted_again_is_launched_from_its_run_list_kept_on_the_gpu) {
  HAWSER_REQUIRE_GPU(1);
  const uint64_t block = 16 << 10;
  const size_t n = 3000;
  Pair p(n * block, {}, /*same_gpu=*/true);  // lists are kept for copies within one GPU
  std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 6);
  PlanID plan;
  ASSERT_TRUE(p.init.prepareBlocks(OpCode::kRead, p.seg, blocks, plan).ok());
  auto post = [&](TransferState want) {
    p.dst.fill(0);
    TransferStatus st;
    ASSERT_NO_FATAL_FAILURE(postAndWait(p, plan, st));
    ASSERT_EQ(st.s, want) << st.error.toString();
    if (want == TransferState::kCompleted) expectBlocks(p, blocks);
  };
  post(TransferState::kCompleted);
  const uint64_t windows = counter(p.init, "nvlink", "gpu_copy_windows");
  EXPECT_EQ(counter(p.init, "nvlink", "plan_cache_misses"), windows) << "the first post makes each window's run list";
  EXPECT_EQ(counter(p.init, "nvlink", "plan_cache_hits"), 0u);
  EXPECT_GT(counter(p.init, "nvlink", "plan_cache_bytes"), n * 24 - 1);
  const long long copies = fakeCudaCalls("memcpy_async");
  post(TransferState::kCompleted);
  post(TransferState::kCompleted);
  EXPECT_EQ(counter(p.init, "nvlink", "plan_cache_hits"), 2 * windows) << "later posts launch the kept lists";
  EXPECT_EQ(counter(p.init, "nvlink", "plan_cache_misses"), windows);
  if (copies >= 0) {
    EXPECT_EQ(fakeCudaCalls("memcpy_async"), copies) << "no run list copied to the GPU again";
  }
  // One-shot requests keep nothing.
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kRead, p.seg, blocks).ok());
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
  EXPECT_EQ(counter(p.init, "nvlink", "plan_cache_misses"), windows);
  // The target withdraws its memory: the kept lists are not trusted, the
  // request fails as it would without them.
  ASSERT_TRUE(p.target.unregisterLocalMemory(p.src.data()).ok());
  post(TransferState::kFailed);
  ASSERT_TRUE(p.init.releasePlan(plan).ok());
  ASSERT_TRUE(p.target.registerLocalMemory(p.src.data(), p.src.size()).ok());
}

// A window posted while its stream is idle is checked and launched by the
// posting thread (no hand-over to a sleeping stream thread), and that
// thread's current GPU context is what it was before the post.
TEST(nvlink_blocks, a_window_posted_to_an_idle_stream_is_issued_by_the_posting_thread_which_keeps_its_context) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = testCudaDriver();
  ASSERT_NE(d, nullptr);
  const uint64_t block = 8 << 10;
  const size_t n = 500;
  for (bool inline_issue : {true, false}) {
    SCOPED_TRACE(inline_issue ? "nvlink.issue_inline=true" : "nvlink.issue_inline=false");
    Pair p(n * block, {{"nvlink.issue_inline", inline_issue ? "true" : "false"}});
    std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 12);
    PlanID plan;
    ASSERT_TRUE(p.init.prepareBlocks(OpCode::kRead, p.seg, blocks, plan).ok());
    const int posts = 5;
    for (int i = 0; i < posts; ++i) {
      p.dst.fill(0);
      // An application thread with no current context (it never touched CUDA).
      ASSERT_EQ(d->api().CtxSetCurrent(nullptr), gpu::cu::kSuccess);
      BatchID b;
      ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
      size_t task = 0;
      ASSERT_TRUE(p.init.postPlan(b, plan, &task).ok());
      gpu::cu::Context now = reinterpret_cast<gpu::cu::Context>(1);
      ASSERT_EQ(d->api().CtxGetCurrent(&now), gpu::cu::kSuccess);
      EXPECT_EQ(now, nullptr) << "the post left a GPU context current on the caller's thread";
      ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
      TransferStatus st;
      ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
      ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
      ASSERT_TRUE(p.init.freeBatchID(b).ok());
      expectBlocks(p, blocks);
    }
    EXPECT_EQ(counter(p.init, "nvlink", "groups_issued"), uint64_t(posts)) << "one window a post (a prepared plan's first is whole)";
    if (inline_issue)
      EXPECT_GE(counter(p.init, "nvlink", "groups_inline"), 1u) << "posted to an idle stream, issued by the poster";
    else
      EXPECT_EQ(counter(p.init, "nvlink", "groups_inline"), 0u);
    ASSERT_TRUE(p.init.releasePlan(plan).ok());
  }
}

// A caller waiting for its batch ends the groups whose copies are done on
// its own thread (Transport::poll within batch.wait_spin_us): here the stream
// threads ignore the posters' kicks, so every request ends through the
// waiter's poll or not at all.
TEST(nvlink_blocks, a_waiting_caller_ends_the_copies_it_waits_for_without_the_stream_thread) {
  HAWSER_REQUIRE_GPU(1);
  const uint64_t block = 8 << 10;
  const size_t n = 400;
  Pair p(n * block, {{"batch.wait_spin_us", "1000000"}});
  std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 21);
  PlanID plan;
  ASSERT_TRUE(p.init.prepareBlocks(OpCode::kRead, p.seg, blocks, plan).ok());
  struct Ignore {
    Ignore() { nvlink::testing::stream_threads_ignore_kicks.store(true); }
    ~Ignore() { nvlink::testing::stream_threads_ignore_kicks.store(false); }
  };
  const int posts = 6;
  {
    Ignore ignore;
    for (int i = 0; i < posts; ++i) {
      p.dst.fill(0);
      TransferStatus st;
      ASSERT_NO_FATAL_FAILURE(postAndWait(p, plan, st));
      ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
      expectBlocks(p, blocks);
    }
  }
  EXPECT_EQ(counter(p.init, "nvlink", "groups_issued"), uint64_t(posts));
  EXPECT_EQ(counter(p.init, "nvlink", "groups_inline"), uint64_t(posts)) << "each posted to an idle stream";
  EXPECT_EQ(counter(p.init, "nvlink", "groups_polled"), uint64_t(posts)) << "each ended by the waiting caller";
  ASSERT_TRUE(p.init.releasePlan(plan).ok());
}

TEST(nvlink_blocks, every_mechanism_moves_the_same_bytes) {
  HAWSER_REQUIRE_GPU(1);
  for (const char* m : {"kernel", "copy_engine", "per_run"}) {
    if (std::string(m) == "copy_engine" && !gpu::CudaDriver::get()->api().MemcpyBatchAsync) continue;
    SCOPED_TRACE(m);
    const uint64_t block = 4096 + 512;  // not a multiple of 4 KiB
    const size_t n = 700;
    Pair p(n * block, {{"gpu.copy_mechanism", m}});
    std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 4);
    std::vector<TransferStatus> st;
    BatchID b;
    ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
    size_t task = 0;
    ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kRead, p.seg, blocks, &task).ok());
    ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus ts;
    ASSERT_TRUE(p.init.getTransferStatus(b, task, ts).ok());
    ASSERT_EQ(ts.s, TransferState::kCompleted) << ts.error.toString();
    ASSERT_TRUE(p.init.freeBatchID(b).ok());
    expectBlocks(p, blocks);
    const std::string key = std::string(m) == "kernel"        ? "gpu_copy_kernel_launches"
                            : std::string(m) == "copy_engine" ? "gpu_copy_engine_batches"
                                                              : "gpu_copy_per_run";
    EXPECT_EQ(counter(p.init, "nvlink", key), std::string(m) == "per_run" ? counter(p.init, "nvlink", "gpu_copy_runs")
                                                                : counter(p.init, "nvlink", "gpu_copy_windows"));
  }
}

TEST(nvlink_blocks, a_failed_launch_fails_the_request_and_leaves_nothing_in_flight) {
  HAWSER_REQUIRE_GPU(1);
  auto fail = fakeHook<void (*)(long, int, int)>("hawserFakeCudaFailLaunch");
  if (!fail) GTEST_SKIP() << "needs the stand-in driver's hawserFakeCudaFailLaunch (a real GPU cannot be made to fail)";
  const uint64_t block = 8 << 10;
  const size_t n = 2500;
  Pair p(n * block, {{"block.first_run_window", "64"}});  // a short first window: the request is two
  std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 2);
  for (int async : {0, 1}) {
    SCOPED_TRACE(async ? "a fault on the GPU" : "refused at the launch");
    fail(1, async ? 700 : 701, async);  // the second window's launch
    BatchID b;
    ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
    size_t task = 0;
    ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kRead, p.seg, blocks, &task).ok());
    ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus st;
    ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
    EXPECT_EQ(st.s, TransferState::kFailed);
    EXPECT_EQ(st.error.code(), Code::kIoError) << st.error.toString();
    EXPECT_NE(st.error.message().find(async ? "CUresult 700" : "CUresult 701"), std::string::npos)
        << st.error.message();
    EXPECT_LT(st.transferred_bytes, n * block);
    EXPECT_TRUE(p.init.freeBatchID(b).ok()) << "nothing of it is still in flight";
    if (async) break;  // a fault leaves the stream failed, as a GPU context is
    // The next request of the same engine moves every byte.
    p.dst.fill(0);
    ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
    ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kRead, p.seg, blocks, &task).ok());
    ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
    ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
    EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    ASSERT_TRUE(p.init.freeBatchID(b).ok());
    expectBlocks(p, blocks);
  }
  fail(-1, 0, 0);
}

TEST(nvlink_blocks, cancel_mid_request_ends_it_canceled_with_only_issued_windows_moved) {
  HAWSER_REQUIRE_GPU(1);
  auto hold = fakeHook<void (*)(int)>("hawserFakeCudaHoldStreams");
  if (!hold) GTEST_SKIP() << "needs the stand-in driver's hawserFakeCudaHoldStreams to stop the GPU mid-request";
  const uint64_t block = 4 << 10;
  const size_t n = 12000;
  // A short first window: the request is several windows.
  Pair p(n * block, {{"nvlink.stream_depth", "1"}, {"block.first_run_window", "64"}});
  std::vector<Block> blocks = kvBlocks(p.dst.data(), p.remote(), n, block, 3);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  size_t task = 0;
  {
    Held held(hold);
    ASSERT_TRUE(p.init.submitBlocks(b, OpCode::kRead, p.seg, blocks, &task).ok());
    // The first window is issued (and held on the GPU); the others wait.
    ASSERT_TRUE(eventually([&] { return counter(p.init, "nvlink", "gpu_copy_windows") >= 1; }));
    ASSERT_TRUE(p.init.cancelTransfer(b).ok());
  }
  ASSERT_TRUE(p.init.waitTransfer(b, std::chrono::seconds(60)).ok());
  TransferStatus st;
  ASSERT_TRUE(p.init.getTransferStatus(b, task, st).ok());
  EXPECT_EQ(st.s, TransferState::kCanceled) << st.error.toString();
  EXPECT_GT(st.transferred_bytes, 0u) << "the issued window finished";
  EXPECT_LT(st.transferred_bytes, n * block / 2) << "windows not issued were not moved";
  EXPECT_EQ(st.transferred_bytes % block, 0u);
  EXPECT_TRUE(p.init.freeBatchID(b).ok()) << "nothing of it is still in flight";
}

TEST(nvlink_blocks, the_owner_killed_mid_request_fails_the_windows_not_yet_issued) {
  HAWSER_REQUIRE_GPU(1);
  auto hold = fakeHook<void (*)(int)>("hawserFakeCudaHoldStreams");
  if (!hold) GTEST_SKIP() << "needs the stand-in driver's hawserFakeCudaHoldStreams to stop the GPU mid-request";
  // The target in a process of its own: `hawser serve` with GPU memory.
  const uint64_t block = 4 << 10;
  const size_t n = 20000;
  Child serve;
  ASSERT_TRUE(serve.start({"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(n * block), "--fill-seed",
                           std::to_string(kSeed), "--location", "cuda:0"},
                          {"HAWSER_GPU_CUDA_DRIVER=" + testCudaDriverPath()}));
  const std::string seg_line = serve.waitFor("segment: ", 20000), mem_line = serve.waitFor("memory: ", 20000);
  ASSERT_FALSE(seg_line.empty());
  ASSERT_FALSE(serve.waitFor("ready", 20000).empty());
  const uint64_t remote = std::stoull(mem_line.substr(8), nullptr, 16);
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "nvlink-blocks-kill", "127.0.0.1", 0, gpuOptions({{"nvlink.stream_depth", "1"},
                                                                               {"block.run_window", "1024"}}))
                  .ok());
  DeviceBuffer dst(0, n * block);
  ASSERT_TRUE(e.registerLocalMemory(dst.data(), dst.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment(seg_line.substr(9), seg).ok());
  std::vector<Block> blocks = kvBlocks(dst.data(), remote, n, block, 8);
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(1, b).ok());
  size_t task = 0;
  {
    Held held(hold);
    ASSERT_TRUE(e.submitBlocks(b, OpCode::kRead, seg, blocks, &task).ok());
    ASSERT_TRUE(eventually([&] { return counter(e, "nvlink", "gpu_copy_windows") >= 1; }));
    serve.kill(SIGKILL);
    (void)serve.wait();
    ASSERT_TRUE(eventually([&] { return counter(e, "nvlink", "owner_deaths") == 1; })) << "the owner's exit is seen";
  }
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(60)).ok());
  TransferStatus st;
  ASSERT_TRUE(e.getTransferStatus(b, task, st).ok());
  EXPECT_EQ(st.s, TransferState::kFailed);
  EXPECT_EQ(st.error.code(), Code::kUnavailable) << st.error.toString();
  EXPECT_NE(st.error.message().find("has exited"), std::string::npos) << st.error.message();
  EXPECT_LT(st.transferred_bytes, n * block / 2) << "only the windows issued before the death moved";
  EXPECT_TRUE(e.freeBatchID(b).ok()) << "nothing of it is still in flight";
  EXPECT_TRUE(eventually([&] { return openedIpcHandles() == 0; })) << "the dead owner's mappings are closed";
  (void)e.unregisterLocalMemory(dst.data());
}

}  // namespace
}  // namespace hawser::test
