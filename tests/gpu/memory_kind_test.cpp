// Registration finds the kind of memory it is given (issue: memory kinds
// found, not guessed): device memory is published as cuda:N whatever the
// caller wrote as "*", and a location that contradicts the driver is
// refused naming both.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "gpu/memory_probe.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

struct Engines {
  Engines() {
    EngineOptions o;
    o.config = gpuConfig();
    EXPECT_TRUE(target.init("p2p", "gpu-target", "127.0.0.1", 0, o).ok());
    EXPECT_TRUE(peer.init("p2p", "gpu-peer", "127.0.0.1", 0, o).ok());
  }
  std::vector<SegmentBuffer> published() {
    SegmentID seg = kInvalidSegment;
    EXPECT_TRUE(peer.openSegment(target.segmentName(), seg).ok());
    std::vector<SegmentBuffer> out;
    EXPECT_TRUE(peer.segmentBuffers(seg, out).ok());
    return out;
  }
  TransferEngine target, peer;
};

TEST(memory_kind, device_memory_given_as_star_is_published_as_its_gpu) {
  HAWSER_REQUIRE_GPU(1);
  const int last = gpu::CudaDriver::get()->deviceCount() - 1;
  DeviceBuffer d0(0, 1 << 20), dn(last, 1 << 20);
  Engines e;
  ASSERT_TRUE(e.target.registerLocalMemory(d0.data(), d0.size(), "*").ok());
  ASSERT_TRUE(e.target.registerLocalMemory(dn.data() + 4096, 8192).ok());  // default location: detect
  auto bufs = e.published();
  ASSERT_EQ(bufs.size(), 2u);
  std::map<uint64_t, std::string> where;
  for (auto& b : bufs) where[b.addr] = b.location;
  EXPECT_EQ(where[reinterpret_cast<uint64_t>(d0.data())], "cuda:0");
  EXPECT_EQ(where[reinterpret_cast<uint64_t>(dn.data() + 4096)], "cuda:" + std::to_string(last));
}

TEST(memory_kind, host_memory_given_as_star_is_published_as_its_numa_node) {
  HAWSER_REQUIRE_GPU(1);
  Buffer host(1 << 20);
  Engines e;
  ASSERT_TRUE(e.target.registerLocalMemory(host.p, host.n, "*").ok());
  auto bufs = e.published();
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_TRUE(bufs[0].location.starts_with("cpu:")) << bufs[0].location;
  EXPECT_EQ(bufs[0].location, gpu::probeMemory(host.p).location());
}

TEST(memory_kind, device_memory_given_as_cpu_is_refused_naming_both) {
  HAWSER_REQUIRE_GPU(1);
  DeviceBuffer d(0, 1 << 20);
  Engines e;
  Status s = e.target.registerLocalMemory(d.data(), d.size(), "cpu:0");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cpu:0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  // Nothing half-registered.
  EXPECT_EQ(e.target.checkRegistered(d.data(), 1).code(), Code::kNotRegistered);
}

TEST(memory_kind, host_memory_given_as_cuda_is_refused_naming_both) {
  HAWSER_REQUIRE_GPU(1);
  Buffer host(1 << 20);
  Engines e;
  Status s = e.target.registerLocalMemory(host.p, host.n, "cuda:0");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cpu:"), std::string::npos) << s.message();
}

TEST(memory_kind, device_memory_given_as_another_gpu_is_refused) {
  HAWSER_REQUIRE_GPU(1);
  const int n = gpu::CudaDriver::get()->deviceCount();
  DeviceBuffer d(0, 1 << 20);
  Engines e;
  Status s = e.target.registerLocalMemory(d.data(), d.size(), "cuda:" + std::to_string(n));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
}

TEST(memory_kind, a_malformed_location_is_refused) {
  Buffer host(4096);
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "kinds", "127.0.0.1", 0).ok());
  for (const char* bad : {"gpu:0", "cuda:", "cuda:x", "cpu:-1", "cuda:0x"}) {
    Status s = e.registerLocalMemory(host.p, host.n, bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }
  Status s = e.registerLocalMemory(host.p, host.n, "cuda:1x");
  EXPECT_EQ(s.message(), "buffers[0]: location 'cuda:1x' is neither '*', 'cpu:N' nor 'cuda:N'");
}

TEST(memory_kind, host_memory_given_as_a_numa_node_is_taken_as_given) {
  Buffer a(4096), b(4096);
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "kinds-node", "127.0.0.1", 0).ok());
  ASSERT_TRUE(e.registerLocalMemory(a.p, a.n, "cpu:0").ok());
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:12").ok());
  EXPECT_TRUE(e.checkRegistered(b.p, b.n).ok());
}

}  // namespace
}  // namespace hawser::test
