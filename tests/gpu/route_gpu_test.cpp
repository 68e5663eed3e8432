// Routes of GPU memory (docs/routes.md): CUDA virtual memory made with the
// POSIX fd handle type (as PyTorch's expandable segments allocate it) goes
// over nvlink, shared by file descriptor. A remote GPU buffer with neither a
// legacy IPC handle nor that handle type is declined by nvlink per buffer
// (no_ipc_handle); the request then falls back to tcp, counted and logged
// once, or, under a contract that requires zero_copy, is refused at submit
// naming nvlink and why. A block request is routed by every remote buffer
// its blocks lie in.
#include <gtest/gtest.h>

#include "common/log_capture.h"
#include "common/util.h"
#include "gpu_env.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; ++p) ++n;
  return n;
}

bool installed(TransferEngine& e, const std::string& name) {
  for (auto& n : e.transports())
    if (n == name) return true;
  return false;
}

class GpuRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    HAWSER_REQUIRE_GPU(1);
    remote_ = std::make_unique<MappedBuffer>(0, 1, true, fdShareable());
    if (!remote_->reason().empty()) GTEST_SKIP() << remote_->reason();
    local_ = std::make_unique<DeviceBuffer>(0, remote_->size());
  }
  // Two engines of this process: `target` exposes the mapped (VMM) buffer.
  void start(TransferEngine& target, TransferEngine& init, const std::map<std::string, std::string>& extra = {}) {
    EngineOptions o;
    o.config = gpuConfig();
    ASSERT_TRUE(target.init("p2p", "route-gpu-target", "127.0.0.1", 0, o).ok());
    for (auto& [k, v] : extra) o.config[k] = v;
    ASSERT_TRUE(init.init("p2p", "route-gpu-init", "127.0.0.1", 0, o).ok());
    if (!installed(init, "nvlink")) GTEST_SKIP() << "nvlink is not installed";
    ASSERT_TRUE(target.registerLocalMemory(remote_->data(), remote_->size(), "cuda:0", true).ok());
    ASSERT_TRUE(init.registerLocalMemory(local_->data(), local_->size(), "cuda:0", false).ok());
    ASSERT_TRUE(init.openSegment(target.segmentName(), seg_).ok());
  }
  // Local GPU memory filled with pattern `seed`.
  void fillLocal(uint64_t seed) const {
    std::vector<char> data(remote_->size());
    fillPattern(data.data(), data.size(), seed);
    local_->upload(data);
  }
  // The remote buffer's allocation requests the POSIX fd handle type.
  virtual bool fdShareable() const { return false; }
  std::unique_ptr<MappedBuffer> remote_;
  std::unique_ptr<DeviceBuffer> local_;
  SegmentID seg_ = kInvalidSegment;
};

class GpuRoutesFd : public GpuRoutes {
 protected:
  bool fdShareable() const override { return true; }
};

TEST_F(GpuRoutesFd, vmm_memory_shareable_by_fd_goes_over_nvlink_with_no_fallback_even_under_zero_copy) {
  TransferEngine target, init;
  ASSERT_NO_FATAL_FAILURE(start(target, init, {{"route.require", "zero_copy"}}));
  if (IsSkipped()) return;
  fillLocal(92);
  const uint64_t remote = reinterpret_cast<uint64_t>(remote_->data());
  auto st = runBatch(init, seg_, {{OpCode::kWrite, local_->data(), seg_, remote, 65536},
                                  {OpCode::kWrite, local_->data() + 65536, seg_, remote + 65536, 65536}});
  for (auto& s : st) ASSERT_EQ(s.s, TransferState::kCompleted) << s.error.toString();
  std::vector<char> got = remote_->download(0, 131072);
  EXPECT_EQ(checkPattern(got.data(), got.size(), 92, 0), -1);
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), -1);
  uint64_t exported = 0;
  for (auto& t : target.stats().transports)
    if (t.transport == "nvlink")
      for (auto& [k, v] : t.counters)
        if (k == "vmm_exported") exported = v;
  EXPECT_EQ(exported, 1u) << "the range was not exported by fd";
}

TEST_F(GpuRoutes, gpu_memory_without_an_ipc_handle_falls_back_from_nvlink_counted_and_logged_once) {
  LogCapture log;
  TransferEngine target, init;
  ASSERT_NO_FATAL_FAILURE(start(target, init));
  if (IsSkipped()) return;
  fillLocal(91);
  const uint64_t remote = reinterpret_cast<uint64_t>(remote_->data());
  for (int round = 0; round < 2; ++round) {
    auto st = runBatch(init, seg_, {{OpCode::kWrite, local_->data(), seg_, remote, 65536},
                                    {OpCode::kWrite, local_->data() + 65536, seg_, remote + 65536, 65536}});
    for (auto& s : st) ASSERT_EQ(s.s, TransferState::kCompleted) << s.error.toString();
  }
  std::vector<char> got = remote_->download(0, 131072);
  EXPECT_EQ(checkPattern(got.data(), got.size(), 91, 0), -1);
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), 4);
  // A block request to that buffer falls back the same way (counted once).
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(1, b).ok());
  std::vector<Block> blocks = {{local_->data() + 131072, remote + 131072, 4096},
                               {local_->data() + 262144, remote + 200704, 4096}};
  ASSERT_TRUE(init.submitBlocks(b, OpCode::kWrite, seg_, blocks).ok());
  ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus bs;
  ASSERT_TRUE(init.getTransferStatus(b, 0, bs).ok());
  EXPECT_EQ(bs.s, TransferState::kCompleted) << bs.error.toString();
  ASSERT_TRUE(freeWhenIdle(init, b).ok());
  got = remote_->download(200704, 4096);
  EXPECT_EQ(checkPattern(got.data(), got.size(), 91, 262144), -1);
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), 5);
  EXPECT_EQ(countOf(log.text(), "requests go over tcp, not nvlink: no_ipc_handle"), 1u) << log.text();
}

TEST_F(GpuRoutes, requiring_zero_copy_refuses_it_at_submit_naming_nvlink_and_the_missing_handle) {
  TransferEngine target, init;
  ASSERT_NO_FATAL_FAILURE(start(target, init, {{"route.require", "zero_copy"}}));
  if (IsSkipped()) return;
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(1, b).ok());
  Status s = init.submitTransfer(
      b, {{OpCode::kWrite, local_->data(), seg_, reinterpret_cast<uint64_t>(remote_->data()), 4096}});
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  const std::string prefix = "requests[0]: segment '" + target.segmentName() +
                             "': the route contract (require zero_copy, from config route.transports/route.require) "
                             "forbids the route this request would take, tcp; the expected route, nvlink, is "
                             "unavailable: no_ipc_handle: buffer 0 of segment '" + target.segmentName() +
                             "' cannot go over nvlink: its owner could not export it: ";
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), -1);
  ASSERT_TRUE(init.freeBatchID(b).ok());
}

// A block request routed by every remote buffer of its blocks, not by its
// first block's: the target exposes an exported buffer (cudaMalloc'd) and
// one without an IPC handle (CUDA virtual memory).
class GpuBlockRoutes : public GpuRoutes {
 protected:
  void SetUp() override {
    GpuRoutes::SetUp();
    if (IsSkipped()) return;
    exported_ = std::make_unique<DeviceBuffer>(0, remote_->size());
  }
  void start(TransferEngine& target, TransferEngine& init, const std::map<std::string, std::string>& extra = {}) {
    ASSERT_NO_FATAL_FAILURE(GpuRoutes::start(target, init, extra));
    if (IsSkipped()) return;
    ASSERT_TRUE(target.registerLocalMemory(exported_->data(), exported_->size(), "cuda:0", true).ok());
  }
  // The index of the buffer without a handle in the target's descriptor (buffers sorted by address).
  int vmmIndex() const { return remote_->data() > exported_->data() ? 1 : 0; }
  std::unique_ptr<DeviceBuffer> exported_;
};

TEST_F(GpuBlockRoutes, a_block_request_with_a_later_block_in_a_buffer_without_an_ipc_handle_falls_back_as_a_whole) {
  LogCapture log;
  TransferEngine target, init;
  ASSERT_NO_FATAL_FAILURE(start(target, init));
  if (IsSkipped()) return;
  fillLocal(57);
  const uint64_t vmm = reinterpret_cast<uint64_t>(remote_->data());
  const uint64_t exp = reinterpret_cast<uint64_t>(exported_->data());
  // The first block's buffer is exported (nvlink would take it), the second's
  // is not; then the other way round. Both go over tcp, each counted once.
  const std::vector<std::vector<Block>> requests = {
      {{local_->data(), exp, 4096}, {local_->data() + 8192, vmm + 8192, 4096}},
      {{local_->data() + 16384, vmm + 16384, 4096}, {local_->data() + 32768, exp + 32768, 4096}}};
  for (const auto& blocks : requests) {
    BatchID b;
    ASSERT_TRUE(init.allocateBatchID(1, b).ok());
    Status s = init.submitBlocks(b, OpCode::kWrite, seg_, blocks);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(20)).ok());
    TransferStatus st;
    ASSERT_TRUE(init.getTransferStatus(b, 0, st).ok());
    EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    ASSERT_TRUE(freeWhenIdle(init, b).ok());
  }
  for (const auto& blocks : requests)
    for (const Block& blk : blocks) {
      const bool in_vmm = blk.remote >= vmm && blk.remote < vmm + remote_->size();
      std::vector<char> got = in_vmm ? remote_->download(blk.remote - vmm, blk.length)
                                     : exported_->download(blk.remote - exp, blk.length);
      const size_t from = static_cast<char*>(blk.local) - local_->data();
      EXPECT_EQ(checkPattern(got.data(), got.size(), 57, from), -1) << "block at remote " << blk.remote;
    }
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), 2);
  EXPECT_EQ(countOf(log.text(), "requests go over tcp, not nvlink: no_ipc_handle: buffer " +
                                    std::to_string(vmmIndex()) + " of segment '" + target.segmentName() +
                                    "' cannot go over nvlink"),
            1u)
      << log.text();
  // Blocks in the exported buffer alone still take nvlink (nothing counted).
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(init.submitBlocks(b, OpCode::kWrite, seg_, std::vector<Block>{{local_->data(), exp + 65536, 4096}}).ok());
  ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(freeWhenIdle(init, b).ok());
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), 2);
}

TEST_F(GpuBlockRoutes, requiring_zero_copy_refuses_a_block_request_naming_its_buffer_without_an_ipc_handle) {
  TransferEngine target, init;
  ASSERT_NO_FATAL_FAILURE(start(target, init));
  if (IsSkipped()) return;
  const uint64_t vmm = reinterpret_cast<uint64_t>(remote_->data());
  const uint64_t exp = reinterpret_cast<uint64_t>(exported_->data());
  const uint64_t local[2] = {reinterpret_cast<uint64_t>(local_->data()),
                             reinterpret_cast<uint64_t>(local_->data() + 8192)};
  const uint64_t remote[2] = {exp, vmm + 8192};
  BlockArrays blocks{local, remote, nullptr, 4096, 2};
  ASSERT_TRUE(parseRouteContract("", "zero_copy", blocks.route).ok());
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(1, b).ok());
  const std::string prefix = "blocks[1]: segment '" + target.segmentName() +
                             "': the route contract (require zero_copy, from the request) forbids the route this "
                             "request would take, tcp; the expected route, nvlink, is unavailable: no_ipc_handle: "
                             "buffer " + std::to_string(vmmIndex()) + " of segment '" + target.segmentName() +
                             "' cannot go over nvlink: its owner could not export it: ";
  Status s = init.submitBlocks(b, OpCode::kWrite, seg_, blocks);
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  PlanID plan = 0;
  s = init.prepareBlocks(OpCode::kWrite, seg_, blocks, plan);
  EXPECT_EQ(s.code(), Code::kNoTransport) << s.toString();
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.message();
  EXPECT_EQ(routeFallbacks(init, "nvlink", "tcp", "no_ipc_handle"), -1);
  // The exported buffer's blocks alone meet the contract.
  const uint64_t exported_only[2] = {exp, exp + 8192};
  blocks.remote = exported_only;
  s = init.submitBlocks(b, OpCode::kWrite, seg_, blocks);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(freeWhenIdle(init, b).ok());
}

}  // namespace
}  // namespace hawser::test
