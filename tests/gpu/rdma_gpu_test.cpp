// RDMA and GPU memory: registration picks a dma-buf of the allocation by
// itself once the kind is known, and GPU <-> GPU transfers run over the
// software verbs provider where it can reach the memory (the stand-in
// driver's dma-bufs are mappable; a real GPU's need a real NIC).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"

#if HAWSER_TEST_RDMA
#include <infiniband/verbs.h>

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

TEST(rdma_gpu, mapped_memory_over_two_allocations_is_exported_as_one_dmabuf_from_a_thread_without_a_context) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  MappedBuffer buf(0, 2);
  if (!buf.reason().empty()) GTEST_SKIP() << buf.reason();
  ASSERT_NE(buf.data(), nullptr);
  Status s;
  gpu::PointerInfo info;
  uint64_t base = 0;
  size_t size = 0;
  int fd = -1;
  uint64_t offset = 0;
  // Everything from a thread that never touched CUDA.
  std::thread([&] {
    info = d->pointer(buf.data() + 4096);
    s = d->allocation(buf.data() + 4096, base, size);
  }).join();
  EXPECT_TRUE(info.device);
  EXPECT_TRUE(info.mapped) << "cuMemMap memory is not a legacy (cuMemAlloc) allocation";
  ASSERT_TRUE(s.ok()) << s.message();
  // The driver names one mapping, not the reservation nor the whole range.
  EXPECT_EQ(base, reinterpret_cast<uint64_t>(buf.data()));
  EXPECT_EQ(size, buf.granularity());
  std::thread([&] { s = d->dmabuf(buf.data() + 4096, buf.size() - 8192, fd, offset); }).join();
  if (s.code() == Code::kNotSupported) GTEST_SKIP() << "this driver exports no dma-buf: " << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(offset, 4096u) << "offset inside the export, which starts at the first mapping";
  EXPECT_EQ(::lseek(fd, 0, SEEK_END), static_cast<off_t>(buf.size())) << "the export covers both mappings";
  ::close(fd);
  // Past the last mapping is the reservation's unmapped tail: refused.
  std::thread([&] { s = d->dmabuf(buf.data() + buf.size() - 4096, 8192, fd, offset); }).join();
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.message();
}

#if HAWSER_TEST_RDMA
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
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 41);
  src.upload(pattern);
  dst.fill(0);
  ASSERT_TRUE(target.registerLocalMemory(src.data(), src.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(dst.data(), dst.size()).ok());
  // Each engine counts its own registration (rdma counters are per transport).
  EXPECT_EQ(counter(target, "rdma", "gpu_dmabuf_regs"), 1u) << "the target's GPU region through a dma-buf";
  EXPECT_EQ(counter(init, "rdma", "gpu_dmabuf_regs"), 1u) << "the initiator's GPU region through a dma-buf";
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
// The provider's record of its ibv_reg_dmabuf_mr calls (softverbs.h).
std::vector<hawser_softverbs_dmabuf_call> dmabufCalls() {
  void* h = dlopen(softVerbsLib(), RTLD_NOW | RTLD_NOLOAD);
  auto fn = h ? reinterpret_cast<hawser_softverbs_dmabuf_calls_fn>(dlsym(h, "hawser_softverbs_dmabuf_calls")) : nullptr;
  EXPECT_NE(fn, nullptr) << "the software verbs provider is not loaded";
  std::vector<hawser_softverbs_dmabuf_call> out;
  if (fn) {
    out.resize(static_cast<size_t>(fn(nullptr, 0)));
    fn(out.data(), static_cast<int>(out.size()));
  }
  if (h) dlclose(h);
  return out;
}

// No NIC on a GPU machine: the check stops at ibv_reg_dmabuf_mr, whose
// arguments the software provider records. Registration runs on a thread
// that never used CUDA, for cuMemAlloc memory and for mapped memory.
TEST(rdma_gpu, registration_from_a_thread_without_a_context_reaches_ibv_reg_dmabuf_mr_with_fd_offset_and_iova) {
  HAWSER_REQUIRE_GPU(1);
  DeviceBuffer plain(0, 4 << 20);
  MappedBuffer mapped(0, 2);
  if (!mapped.reason().empty()) GTEST_SKIP() << mapped.reason();
  SoftVerbsEnv env("sv0");
  EngineOptions o;
  o.config = gpuConfig();
  o.config["transport"] = "rdma";
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "rdma-gpu-reg", "127.0.0.1", 0, o).ok());
  struct Case {
    const char* what;
    char* addr;
    size_t len;
    uint64_t offset;    // of addr in the exported dma-buf
    uint64_t exported;  // the dma-buf's size
  };
  const Case cases[] = {
      {"cuMemAlloc", plain.data() + 8192, 1 << 20, 8192, 4 << 20},
      {"cuMemMap over two allocations", mapped.data() + 4096, mapped.size() - 4096, 4096, mapped.size()},
  };
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  for (const Case& c : cases) {
    const size_t before = dmabufCalls().size();
    Status s;
    std::thread([&] { s = e.registerLocalMemory(c.addr, c.len, "cuda:0", true); }).join();
    auto calls = dmabufCalls();
    ASSERT_EQ(calls.size(), before + 1) << c.what << ": ibv_reg_dmabuf_mr was not called: " << s.toString();
    const hawser_softverbs_dmabuf_call& r = calls.back();
    std::printf("[ reg_dmabuf ] %s: fd %d (%s, open %d, size %lld) offset %llu length %llu iova %#llx access %#x "
                "mapped-by-provider %d -> registration %s\n",
                c.what, r.fd, r.fd_target, r.fd_open, static_cast<long long>(r.fd_size),
                static_cast<unsigned long long>(r.offset), static_cast<unsigned long long>(r.length),
                static_cast<unsigned long long>(r.iova), r.access, r.mapped, s.toString().c_str());
    EXPECT_TRUE(r.fd_open) << c.what;
    EXPECT_EQ(r.fd_size, static_cast<int64_t>(c.exported)) << c.what;
    EXPECT_EQ(r.offset, c.offset) << c.what;
    EXPECT_EQ(r.length, c.len) << c.what;
    EXPECT_EQ(r.iova, reinterpret_cast<uint64_t>(c.addr)) << c.what << ": the iova is the buffer's address";
    EXPECT_EQ(r.access & access, access) << c.what;
    // The stand-in driver's dma-bufs are memfds the provider maps (then the
    // registration holds); a real GPU's are not mappable by the host, and
    // the provider's plain ibv_reg_mr cannot pin device memory either.
    if (r.mapped) {
      EXPECT_TRUE(s.ok()) << c.what << ": " << s.toString();
      if (s.ok()) {
        EXPECT_TRUE(e.unregisterLocalMemory(c.addr).ok());
      }
    } else {
      EXPECT_EQ(s.code(), Code::kIoError) << c.what << ": " << s.toString();
    }
  }
}

TEST(rdma_gpu, mapped_gpu_memory_moves_over_rdma_byte_exact) {
  HAWSER_REQUIRE_GPU(1);
  MappedBuffer src(0, 2), dst(0, 2);
  if (!src.reason().empty()) GTEST_SKIP() << src.reason();
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  {
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
  ASSERT_TRUE(target.init("p2p", "rdma-vmm-target", "127.0.0.1", 0, o).ok());
  ASSERT_TRUE(init.init("p2p", "rdma-vmm-init", "127.0.0.1", 0, o).ok());
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 43);
  src.upload(pattern);
  Status a, b;
  std::thread([&] {
    a = target.registerLocalMemory(src.data(), src.size());
    b = init.registerLocalMemory(dst.data(), dst.size());
  }).join();
  ASSERT_TRUE(a.ok()) << a.toString();
  ASSERT_TRUE(b.ok()) << b.toString();
  EXPECT_EQ(counter(target, "rdma", "gpu_dmabuf_regs"), 1u);
  EXPECT_EQ(counter(init, "rdma", "gpu_dmabuf_regs"), 1u);
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  // Across the boundary of the two allocations, at unaligned ends.
  const uint64_t off = src.granularity() - 12345, len = 3 * 65536 + 77;
  std::vector<TransferStatus> st;
  Status s = init.transferSync({{OpCode::kRead, dst.data() + 5, seg, reinterpret_cast<uint64_t>(src.data()) + off, len}},
                               std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> got = dst.download(5, len);
  EXPECT_EQ(checkPattern(got.data(), got.size(), 43, off), -1);
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
