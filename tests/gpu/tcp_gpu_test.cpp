// TCP moves GPU memory at both ends (docs/tcp.md "GPU memory"): an
// in-process initiator with GPU or host buffers against `hawser serve`
// children holding GPU or host memory, every byte checked. Small slices and
// few staging slots on both sides so the staging pipelines run exhausted
// (and the target cuts requests into several slot-sized chunks).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 9191;
constexpr size_t kTargetBytes = 32u << 20;

// Only tcp in the engines of these tests: on a GPU host with RDMA NICs,
// rdma would otherwise carry the data (or fail to register GPU memory).
const char* const kNoRdma = "/nonexistent/libibverbs.so.1";

// A `hawser serve` child: GPU 0 or host memory, filled with kSeed's pattern.
// Its own tcp slices are 64 KiB with 2 staging slots: a request of the
// initiator's 96 KiB slices is two uneven chunks there.
struct Target {
  Target(bool gpu, size_t bytes = kTargetBytes) {
    std::vector<std::string> args{"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(bytes),
                                  "--fill-seed", std::to_string(kSeed)};
    if (gpu) args.insert(args.end(), {"--location", "cuda:0"});
    if (!child.start(args, {"HAWSER_GPU_CUDA_DRIVER=" + testCudaDriverPath(), "HAWSER_TCP_SLICE_SIZE=64K",
                            "HAWSER_TCP_GPU_STAGING_BUFFERS=2", std::string("HAWSER_RDMA_VERBS_LIB=") + kNoRdma}))
      return;
    std::string seg = child.waitFor("segment: ", 20000);
    std::string mem = child.waitFor("memory: ", 20000);
    if (seg.empty() || mem.empty() || child.waitFor("ready", 20000).empty()) return;
    segment = seg.substr(seg.find("segment: ") + 9);
    base = std::stoull(mem.substr(mem.find("0x")), nullptr, 16);
  }
  bool ok() const { return base != 0; }
  Child child;
  std::string segment;
  uint64_t base = 0;
};

// The initiator: tcp only, 96 KiB slices, 4 staging slots.
struct Initiator {
  Initiator() {
    EngineOptions o;
    o.config = gpuConfig();
    o.config["transport"] = "tcp";
    o.config["rdma.verbs_lib"] = kNoRdma;
    o.config["tcp.slice_size"] = "96K";
    o.config["tcp.gpu_staging_buffers"] = "4";
    status = engine.init("p2p", "tcp-gpu-initiator", "127.0.0.1", 0, o);
  }
  Status open(const Target& t, SegmentID& seg) { return engine.openSegment(t.segment, seg); }
  Status status;
  TransferEngine engine;
};

// Local memory of either kind, registered with the initiator; bytes in and
// out through the driver for GPU memory.
class Local {
 public:
  Local(TransferEngine& e, bool gpu, size_t n) : gpu_(gpu), n_(n) {
    if (gpu) dev_ = std::make_unique<DeviceBuffer>(0, n);
    else host_ = std::make_unique<Buffer>(n);
    reg_ = e.registerLocalMemory(data(), n, "*", false);
  }
  const Status& registered() const { return reg_; }
  char* data() const { return gpu_ ? dev_->data() : host_->p; }
  void put(size_t at, const std::vector<char>& bytes) {
    if (gpu_) dev_->upload(bytes, at);
    else std::copy(bytes.begin(), bytes.end(), host_->p + at);
  }
  std::vector<char> get(size_t at, size_t n) const {
    if (gpu_) return dev_->download(at, n);
    return std::vector<char>(host_->p + at, host_->p + at + n);
  }
  void clear() { put(0, std::vector<char>(n_, 0)); }

 private:
  bool gpu_;
  size_t n_;
  std::unique_ptr<DeviceBuffer> dev_;
  std::unique_ptr<Buffer> host_;
  Status reg_;
};

std::vector<char> pattern(size_t n, uint64_t seed, uint64_t base) {
  std::vector<char> v(n);
  fillPattern(v.data(), n, seed, base);
  return v;
}

struct Ends {
  bool local_gpu;
  bool remote_gpu;
  const char* name;
};

void PrintTo(const Ends& e, std::ostream* os) { *os << e.name; }

class tcp_gpu_ends : public ::testing::TestWithParam<Ends> {
 protected:
  // A target of the parameter's kind and the initiator, its segment open.
  void start() {
    target_ = std::make_unique<Target>(GetParam().remote_gpu);
    ASSERT_TRUE(target_->ok()) << "hawser serve did not start";
    initiator_ = std::make_unique<Initiator>();
    ASSERT_TRUE(initiator_->status.ok()) << initiator_->status.toString();
    ASSERT_TRUE(initiator_->open(*target_, seg_).ok());
  }
  std::unique_ptr<Target> target_;
  std::unique_ptr<Initiator> initiator_;
  SegmentID seg_ = kInvalidSegment;
};

// Unaligned offsets and lengths, from one byte to several MiB (dozens of
// 96 KiB slices against 4 staging slots).
const std::vector<std::pair<uint64_t, size_t>> kRanges = {
    {7, 1}, {4099, 4093}, {65536 + 3, (96u << 10) + 1}, {(1u << 20) + 5, (3u << 20) + 17},
    {(9u << 20) + 11, (6u << 20) + 5}};

TEST_P(tcp_gpu_ends, reads_bring_every_byte_of_the_target) {
  HAWSER_REQUIRE_GPU(1);
  const Ends ends = GetParam();
  ASSERT_NO_FATAL_FAILURE(start());
  const Target& t = *target_;
  Initiator& in = *initiator_;
  const SegmentID seg = seg_;
  // With the driver loaded, tcp claims GPU memory at this end.
  RouteExplanation route;
  ASSERT_TRUE(in.engine.explainRoute(seg, ends.local_gpu ? "cuda:0" : "cpu:0", route).ok());
  EXPECT_EQ(route.transport, "tcp") << route.why;
  Local local(in.engine, ends.local_gpu, 8u << 20);
  ASSERT_TRUE(local.registered().ok()) << local.registered().toString();
  // Each range to an odd local address.
  for (size_t i = 0; i < kRanges.size(); ++i) {
    const auto [off, len] = kRanges[i];
    const size_t at = 2 * i + 1;
    auto st = runBatch(in.engine, seg, {{OpCode::kRead, local.data() + at, seg, t.base + off, len}}, 60000);
    ASSERT_EQ(st.size(), 1u);
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << "range " << i << ": " << st[0].error.toString();
    EXPECT_EQ(st[0].transferred_bytes, len);
    auto got = local.get(at, len);
    EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, off), -1) << "range " << i;
  }
  if (ends.local_gpu) {
    uint64_t total = 0;
    for (auto [off, len] : kRanges) total += len;
    EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_to_device_bytes"), total);
    EXPECT_GT(counter(in.engine, "tcp", "gpu_staging_waits"), 0u) << "the staging slots never ran out";
  } else {
    EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_to_device_bytes"), 0u);
  }
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u);
}

TEST_P(tcp_gpu_ends, writes_land_byte_for_byte_and_touch_nothing_around_them) {
  HAWSER_REQUIRE_GPU(1);
  const Ends ends = GetParam();
  ASSERT_NO_FATAL_FAILURE(start());
  const Target& t = *target_;
  Initiator& in = *initiator_;
  const SegmentID seg = seg_;
  Local src(in.engine, ends.local_gpu, 8u << 20);
  Local back(in.engine, ends.local_gpu, 8u << 20);
  ASSERT_TRUE(src.registered().ok() && back.registered().ok());
  // Four writes in one batch (their slices share the connections and the
  // staging slots), each from an odd local offset to an odd remote one.
  const uint64_t seed = 31337;
  const size_t len = (1536u << 10) + 13;
  std::vector<TransferRequest> reqs;
  std::vector<uint64_t> offs;
  for (size_t i = 0; i < 4; ++i) {
    const size_t at = 5 + i * (len + 100);
    const uint64_t off = (2u << 20) + 3 + i * (len + 4096);
    src.put(at, pattern(len, seed, off));
    reqs.push_back({OpCode::kWrite, src.data() + at, seg, t.base + off, len});
    offs.push_back(off);
  }
  auto st = runBatch(in.engine, seg, reqs, 60000);
  ASSERT_EQ(st.size(), reqs.size());
  for (size_t i = 0; i < st.size(); ++i)
    ASSERT_EQ(st[i].s, TransferState::kCompleted) << "write " << i << ": " << st[i].error.toString();
  // Read each written range back with 4 KiB of the target's own pattern on
  // either side: written bytes, and nothing beyond them.
  for (size_t i = 0; i < offs.size(); ++i) {
    back.clear();
    const uint64_t from = offs[i] - 4096;
    const size_t n = len + 8192;
    auto r = runBatch(in.engine, seg, {{OpCode::kRead, back.data() + 1, seg, t.base + from, n}}, 60000);
    ASSERT_EQ(r[0].s, TransferState::kCompleted) << r[0].error.toString();
    auto got = back.get(1, n);
    EXPECT_EQ(checkPattern(got.data(), 4096, kSeed, from), -1) << "before write " << i;
    EXPECT_EQ(checkPattern(got.data() + 4096, len, seed, offs[i]), -1) << "write " << i;
    EXPECT_EQ(checkPattern(got.data() + 4096 + len, 4096, kSeed, offs[i] + len), -1) << "after write " << i;
  }
  if (ends.local_gpu) {
    EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_from_device_bytes"), 4 * len);
    EXPECT_GT(counter(in.engine, "tcp", "gpu_staging_waits"), 0u) << "the staging slots never ran out";
  } else {
    EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_from_device_bytes"), 0u);
  }
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u);
}

// Scattered runs of odd lengths as one block request each way: tcp groups
// them into frames of many runs (docs/tcp.md "Frames of many runs"), each
// packed into one staging slot by one copyRuns call at this end, and cut
// into the target's smaller slots (64 KiB there against 96 KiB frames
// here) with runs split across them at the other. Every byte is checked,
// and so are the bytes between the runs at the target.
TEST_P(tcp_gpu_ends, scattered_runs_move_both_ways_in_frames_of_many_runs) {
  HAWSER_REQUIRE_GPU(1);
  ASSERT_NO_FATAL_FAILURE(start());
  const bool local_gpu = GetParam().local_gpu;
  Initiator& in = *initiator_;
  const uint64_t base = target_->base;
  // 600 runs: packed here (1 byte apart), in shuffled order 64 bytes apart there.
  static const size_t kLens[] = {1, 4095, 4097, 777, 12000, 33, 65537, 8192};
  const size_t n = 600;
  std::vector<size_t> len(n), at(n), remote(n), order(n);
  size_t local_bytes = 0, bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    len[i] = kLens[i % std::size(kLens)];
    at[i] = local_bytes;
    local_bytes += len[i] + 1;
    bytes += len[i];
    order[i] = i;
  }
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  const uint64_t first = 4096 + 3;  // the runs' span at the target: [first, end)
  uint64_t end = first;
  for (size_t k : order) {
    remote[k] = end;
    end += len[k] + 64;
  }
  Local local(in.engine, local_gpu, local_bytes);
  Local back(in.engine, local_gpu, end);
  ASSERT_TRUE(local.registered().ok() && back.registered().ok());
  std::vector<Block> blocks;
  for (size_t i = 0; i < n; ++i) blocks.push_back({local.data() + at[i], base + remote[i], len[i]});
  auto transfer = [&](OpCode op) {
    BatchID b;
    EXPECT_TRUE(in.engine.allocateBatchID(1, b).ok());
    EXPECT_TRUE(in.engine.submitBlocks(b, op, seg_, blocks).ok());
    EXPECT_TRUE(in.engine.waitTransfer(b, std::chrono::seconds(60)).ok());
    TransferStatus st;
    EXPECT_TRUE(in.engine.getTransferStatus(b, 0, st).ok());
    EXPECT_TRUE(in.engine.freeBatchID(b).ok());
    return st;
  };

  // Reads: each run lands from its place at the target.
  local.clear();
  TransferStatus r = transfer(OpCode::kRead);
  ASSERT_EQ(r.s, TransferState::kCompleted) << r.error.toString();
  EXPECT_EQ(r.transferred_bytes, bytes);
  auto got = local.get(0, local_bytes);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(checkPattern(got.data() + at[i], len[i], kSeed, remote[i]), -1) << "run " << i;
  const uint64_t frames = counter(in.engine, "tcp", "run_frames"), framed = counter(in.engine, "tcp", "framed_runs");
  EXPECT_GT(frames, 0u) << "no frame of many runs was sent";
  EXPECT_GE(framed, 4 * frames) << "fewer than 4 runs per frame";
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_to_device_bytes"), local_gpu ? bytes : 0);
  // One copy per request (a frame: one copyRuns for all its runs), never one per run.
  const uint64_t alone = counter(in.engine, "tcp", "slices_completed") - framed;
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_copies"), local_gpu ? frames + alone : 0);
  // The same copies as windows, with the runs they carried (gpu_copy_*).
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_copy_windows"), local_gpu ? frames + alone : 0);
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_copy_runs"), local_gpu ? framed + alone : 0);

  // Writes: each run lands at its place; nothing between them changes.
  const uint64_t seed = 4242;
  local.put(0, pattern(local_bytes, seed, 0));
  TransferStatus w = transfer(OpCode::kWrite);
  ASSERT_EQ(w.s, TransferState::kCompleted) << w.error.toString();
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staged_from_device_bytes"), local_gpu ? bytes : 0);
  EXPECT_GT(counter(in.engine, "tcp", "run_frames"), frames);
  back.clear();
  auto rb = runBatch(in.engine, seg_, {{OpCode::kRead, back.data(), seg_, base, end}}, 60000);
  ASSERT_EQ(rb[0].s, TransferState::kCompleted) << rb[0].error.toString();
  auto there = back.get(0, end);
  EXPECT_EQ(checkPattern(there.data(), first, kSeed, 0), -1) << "before the runs";
  for (size_t k : order) {
    ASSERT_EQ(checkPattern(there.data() + remote[k], len[k], seed, at[k]), -1) << "run " << k;
    ASSERT_EQ(checkPattern(there.data() + remote[k] + len[k], 64, kSeed, remote[k] + len[k]), -1) << "after run " << k;
  }
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u);
}

INSTANTIATE_TEST_SUITE_P(ends, tcp_gpu_ends,
                         ::testing::Values(Ends{true, true, "gpu_to_gpu"}, Ends{true, false, "gpu_to_host"},
                                           Ends{false, true, "host_to_gpu"}),
                         [](const auto& i) { return std::string(i.param.name); });

// Tasks to a peer that dies mid-transfer fail as the tcp suite's dead peer
// does, every staging slot comes back, and the engine moves data again.
TEST(tcp_gpu, peer_killed_mid_gpu_transfer_fails_the_tasks_and_frees_every_staging_slot) {
  HAWSER_REQUIRE_GPU(1);
  const size_t chunk = 8u << 20;
  Target t(true, 4 * chunk);
  ASSERT_TRUE(t.ok()) << "hawser serve did not start";
  Initiator in;
  ASSERT_TRUE(in.status.ok()) << in.status.toString();
  SegmentID seg;
  ASSERT_TRUE(in.open(t, seg).ok());
  Local local(in.engine, true, 4 * chunk);
  ASSERT_TRUE(local.registered().ok());
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 4; ++i) {
    reqs.push_back({OpCode::kRead, local.data() + i * chunk, seg, t.base + i * chunk, chunk});
    reqs.push_back({OpCode::kWrite, local.data() + i * chunk, seg, t.base + ((i + 1) % 4) * chunk, chunk});
  }
  BatchID b;
  const int rounds = 32;  // far more than gets through before the kill
  ASSERT_TRUE(in.engine.allocateBatchID(reqs.size() * rounds, b).ok());
  for (int r = 0; r < rounds; ++r) ASSERT_TRUE(in.engine.submitTransfer(b, reqs).ok());
  TransferStatus progress;
  ASSERT_TRUE(eventually([&] {
    return in.engine.getBatchTransferStatus(b, progress).ok() && progress.transferred_bytes > 0;
  })) << "the target served no byte of the batch";
  ASSERT_EQ(progress.s, TransferState::kPending) << "the batch ended before the peer could be killed";
  t.child.kill(SIGKILL);
  t.child.wait();
  Status w = in.engine.waitTransfer(b, std::chrono::seconds(30));
  ASSERT_TRUE(w.ok()) << "tasks still unfinished 30 s after the peer died: " << w.toString();
  size_t failed = 0;
  for (size_t i = 0; i < reqs.size() * rounds; ++i) {
    TransferStatus st;
    ASSERT_TRUE(in.engine.getTransferStatus(b, i, st).ok());
    ASSERT_TRUE(isTerminal(st.s)) << i;
    if (st.s != TransferState::kFailed) continue;
    ++failed;
    EXPECT_EQ(st.error.code(), Code::kUnavailable) << st.error.toString();
  }
  EXPECT_GT(failed, 0u);
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u) << "staging slots still held";
  EXPECT_TRUE(in.engine.freeBatchID(b).ok());

  // A live peer (host memory this time): the same engine and GPU buffer move data again.
  Target again(false);
  ASSERT_TRUE(again.ok()) << "second hawser serve did not start";
  SegmentID seg2;
  ASSERT_TRUE(in.open(again, seg2).ok());
  local.clear();
  auto st = runBatch(in.engine, seg2, {{OpCode::kRead, local.data() + 3, seg2, again.base + 11, chunk}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  auto got = local.get(3, chunk);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, 11), -1);
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u);
}

// Canceling a batch of GPU slices mid-transfer: the queued ones end
// CANCELED, every staging slot comes back, and no copy of the batch touches
// the GPU buffer once the tasks are terminal.
TEST(tcp_gpu, cancel_mid_gpu_transfer_frees_every_staging_slot_and_no_copy_lands_later) {
  HAWSER_REQUIRE_GPU(1);
  const size_t chunk = 8u << 20;
  Target t(true, 4 * chunk);
  ASSERT_TRUE(t.ok()) << "hawser serve did not start";
  Initiator in;
  ASSERT_TRUE(in.status.ok()) << in.status.toString();
  SegmentID seg;
  ASSERT_TRUE(in.open(t, seg).ok());
  Local local(in.engine, true, 5 * chunk);  // 4 chunks the batch reads into, 1 for the check after
  ASSERT_TRUE(local.registered().ok());
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 4; ++i)
    reqs.push_back({OpCode::kRead, local.data() + i * chunk, seg, t.base + i * chunk, chunk});
  const int rounds = 32;
  BatchID b;
  ASSERT_TRUE(in.engine.allocateBatchID(reqs.size() * rounds, b).ok());
  for (int r = 0; r < rounds; ++r) ASSERT_TRUE(in.engine.submitTransfer(b, reqs).ok());
  TransferStatus progress;
  ASSERT_TRUE(eventually([&] {
    return in.engine.getBatchTransferStatus(b, progress).ok() && progress.transferred_bytes > 0;
  })) << "the target served no byte of the batch";
  ASSERT_EQ(progress.s, TransferState::kPending) << "the batch ended before it could be canceled";
  ASSERT_TRUE(in.engine.cancelTransfer(b).ok());
  ASSERT_TRUE(in.engine.waitTransfer(b, std::chrono::seconds(60)).ok());
  size_t canceled = 0;
  for (size_t i = 0; i < reqs.size() * rounds; ++i) {
    TransferStatus st;
    ASSERT_TRUE(in.engine.getTransferStatus(b, i, st).ok());
    ASSERT_TRUE(isTerminal(st.s)) << i;
    canceled += st.s == TransferState::kCanceled;
  }
  EXPECT_GT(canceled, 0u);
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u) << "staging slots still held";
  EXPECT_TRUE(in.engine.freeBatchID(b).ok());
  // A pattern put into the batch's buffer now must survive a fresh transfer
  // (no copy of the canceled batch is left to overwrite it).
  local.put(0, pattern(4 * chunk, 777, 0));
  auto st = runBatch(in.engine, seg, {{OpCode::kRead, local.data() + 4 * chunk, seg, t.base + 5, chunk}}, 60000);
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  auto fresh = local.get(4 * chunk, chunk);
  EXPECT_EQ(checkPattern(fresh.data(), fresh.size(), kSeed, 5), -1);
  auto kept = local.get(0, 4 * chunk);
  EXPECT_EQ(checkPattern(kept.data(), kept.size(), 777, 0), -1) << "a copy of the canceled batch landed late";
  EXPECT_EQ(counter(in.engine, "tcp", "gpu_staging_inflight"), 0u);
}

}  // namespace
}  // namespace hawser::test
