// RDMA and GPU memory: registration picks a dma-buf of the allocation by
// itself once the kind is known, and GPU <-> GPU transfers run over the
// software verbs provider where it can reach the memory (the stand-in
// driver's dma-bufs are mappable; a real GPU's need a real NIC).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"

#if HAWSER_TEST_RDMA
#include "softverbs/soft_env.h"
#endif

namespace hawser::test {
namespace {

TEST(rdma_gpu, device_memory_is_exported_as_a_dmabuf_of_its_allocation) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  DeviceBuffer buf(0, 64 << 20);
  int fd = -1;
  uint64_t offset = 0;
  Status s = d->dmabuf(buf.data() + 8192, 1 << 20, fd, offset);
  if (s.code() == Code::kNotSupported) GTEST_SKIP() << "this driver exports no dma-buf: " << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(offset, 8192u) << "offset of the range inside the exported allocation";
  ::close(fd);
  // A range running past its allocation is refused.
  s = d->dmabuf(buf.data() + (64 << 20) - 4096, 1 << 20, fd, offset);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.message();
}

TEST(rdma_gpu, dmabuf_export_works_from_a_thread_that_never_touched_cuda) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  DeviceBuffer buf(0, 8 << 20);
  Status s;
  int fd = -1;
  uint64_t offset = 0;
  // A registration may come from any application thread: no current context.
  std::thread([&] { s = d->dmabuf(buf.data() + 4096, 1 << 20, fd, offset); }).join();
  if (s.code() == Code::kNotSupported) GTEST_SKIP() << "this driver exports no dma-buf: " << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(offset, 4096u);
  ::close(fd);
}

#if HAWSER_TEST_RDMA
uint64_t counter(const TransferEngine& e, const std::string& transport, const std::string& key) {
  for (auto& t : e.stats().transports)
    if (t.transport == transport)
      for (auto& [k, v] : t.counters)
        if (k == key) return v;
  return 0;
}

TEST(rdma_gpu, gpu_to_gpu_over_rdma_registers_through_dmabuf_and_moves_every_byte) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  const int last = d->deviceCount() - 1;
  DeviceBuffer src(last, 4 << 20), dst(0, 4 << 20);
  {
    // The soft provider copies with process_vm_*: it needs the dma-buf's
    // pages mapped in the host. A real GPU's dma-buf is not (a NIC reaches
    // it over PCIe instead).
    int fd = -1;
    uint64_t off = 0;
    if (!d->dmabuf(src.data(), src.size(), fd, off).ok()) GTEST_SKIP() << "no dma-buf export on this driver";
    void* m = mmap(nullptr, src.size(), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) GTEST_SKIP() << "this GPU's dma-buf cannot be mapped by the host: the software verbs "
                                         "provider cannot reach it (a real RDMA NIC can)";
    munmap(m, src.size());
  }
  SoftVerbsEnv env("sv0");
  EngineOptions o;
  o.config = gpuConfig();
  o.config["transport"] = "rdma";
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "rdma-gpu-target", "127.0.0.1", 0, o).ok());
  ASSERT_TRUE(init.init("p2p", "rdma-gpu-init", "127.0.0.1", 0, o).ok());
  const uint64_t before = counter(init, "rdma", "gpu_dmabuf_regs");
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 41);
  src.upload(pattern);
  dst.fill(0);
  ASSERT_TRUE(target.registerLocalMemory(src.data(), src.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(dst.data(), dst.size()).ok());
  EXPECT_EQ(counter(init, "rdma", "gpu_dmabuf_regs"), before + 2) << "both GPU regions through a dma-buf";
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  // Unaligned offsets and lengths, several slices.
  const uint64_t off = 4099, len = (3 << 20) + 777;
  std::vector<TransferStatus> st;
  Status s = init.transferSync({{OpCode::kRead, dst.data() + 13, seg, reinterpret_cast<uint64_t>(src.data()) + off, len}},
                               std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> got = dst.download(13, len);
  EXPECT_EQ(checkPattern(got.data(), got.size(), 41, off), -1);
  EXPECT_EQ(std::vector<char>(dst.download(0, 13)), std::vector<char>(13, 0)) << "bytes before the range untouched";
  // And back: GPU -> GPU write.
  std::vector<char> back(len);
  fillPattern(back.data(), back.size(), 77);
  dst.upload(back, 13);
  s = init.transferSync({{OpCode::kWrite, dst.data() + 13, seg, reinterpret_cast<uint64_t>(src.data()) + 5, len}},
                        std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> wrote = src.download(5, len);
  EXPECT_EQ(checkPattern(wrote.data(), wrote.size(), 77), -1);
  (void)init.unregisterLocalMemory(dst.data());
  (void)target.unregisterLocalMemory(src.data());
}
#else
TEST(rdma_gpu, gpu_to_gpu_over_rdma_registers_through_dmabuf_and_moves_every_byte) {
  GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)";
}
#endif

}  // namespace
}  // namespace hawser::test
