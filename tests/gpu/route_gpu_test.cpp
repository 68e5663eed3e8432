// Routes of GPU memory (docs/routes.md): CUDA virtual memory made with the
// POSIX fd handle type (as PyTorch's expandable segments allocate it) goes
// over nvlink, shared by file descriptor. A remote GPU buffer with neither a
// legacy IPC handle nor that handle type is declined by nvlink per buffer
// (no_ipc_handle); the request then falls back to tcp, counted and logged
// once, or, under a contract that requires zero_copy, is refused at submit
// naming nvlink and why.
#include <gtest/gtest.h>

#include "common/log_capture.h"
#include "common/util.h"
#include "gpu_env.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

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
  std::vector<char> data(remote_->size());
  fillPattern(data.data(), data.size(), 92);
  local_->upload(data);
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
  std::vector<char> data(remote_->size());
  fillPattern(data.data(), data.size(), 91);
  local_->upload(data);
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
  const std::string text = log.text();
  size_t lines = 0;
  for (size_t p = 0; (p = text.find("requests go over tcp, not nvlink: no_ipc_handle", p)) != std::string::npos; ++p)
    ++lines;
  EXPECT_EQ(lines, 1u) << text;
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

}  // namespace
}  // namespace hawser::test
