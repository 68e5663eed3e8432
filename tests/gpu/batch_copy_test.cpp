// A window of GPU runs copied with one launch (gpu/batch_copy.h,
// CopyStream::copyRuns): every mechanism moves exactly the runs' bytes for
// any length and alignment, the kernel and the batched copy take one driver
// call per window, the CTA bound holds, auto picks by run size, and a failed
// launch is an error of exactly that window. Against the stand-in driver in
// CI (gpu_sim.*), against the real one on a GPU host (gpu.*).

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/config.h"
#include "common/util.h"
#include "gpu/batch_copy.h"
#include "gpu/copy_kernel.h"
#include "gpu/copy_stream.h"
#include "gpu/gpu_env.h"

namespace hawser::test {
namespace {

using gpu::CopyMechanism;
using gpu::CopyReport;
using gpu::CopyRun;
using gpu::CopySettings;

bool simulated() {
  const char* sim = getenv("HAWSER_TEST_CUDA_DRIVER");
  return sim && *sim;
}

std::unique_ptr<gpu::CopyStream> openStream(CopySettings s, int device = 0) {
  std::unique_ptr<gpu::CopyStream> out;
  Status st = gpu::CopyStream::open(device, out, s);
  EXPECT_TRUE(st.ok()) << st.toString();
  return out;
}

CopySettings settingsFor(CopyMechanism m, uint32_t max_ctas = 32) {
  CopySettings s;
  s.mechanism = m;
  s.max_ctas = max_ctas;
  return s;
}

// Runs of awkward lengths and alignments, their destinations apart.
std::vector<CopyRun> awkwardRuns(uint64_t dst, uint64_t src) {
  const uint64_t lens[] = {1, 3, 15, 16, 17, 31, 100, 4095, 4096, 4097, 65535, 65536, 65537, 200003, 1};
  const uint64_t skews[] = {0, 1, 2, 3, 4, 7, 8, 9, 15, 0, 5, 12, 0, 3, 6};
  std::vector<CopyRun> runs;
  uint64_t d = 0, s = 0;
  for (size_t i = 0; i < std::size(lens); ++i) {
    // Source and destination with different misalignments (16, 8, 4, 1-byte paths).
    runs.push_back(CopyRun{dst + d + skews[i], src + s + (skews[i] * 3) % 16, lens[i]});
    d += lens[i] + 64;
    s += lens[i] + 48;
  }
  // Reverse pairs: destinations not in increasing order.
  std::swap(runs[2], runs[9]);
  return runs;
}

// The device buffer `dst` holds src's bytes at every run and `fill` elsewhere.
void expectExactly(const std::vector<char>& dst, uint64_t dst_base, const std::vector<char>& src, uint64_t src_base,
                   const std::vector<CopyRun>& runs, char fill) {
  std::vector<char> want(dst.size(), fill);
  for (const CopyRun& r : runs) memcpy(want.data() + (r.dst - dst_base), src.data() + (r.src - src_base), r.len);
  ASSERT_EQ(want.size(), dst.size());
  if (std::memcmp(want.data(), dst.data(), want.size()) == 0) return;  // (the loop below is slow at -O0)
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += want[i] != dst[i];
  EXPECT_EQ(bad, 0u) << "bytes that differ from what the runs should have left";
}

class BatchCopy : public ::testing::TestWithParam<CopyMechanism> {};

TEST_P(BatchCopy, moves_exactly_the_runs_bytes_for_any_length_and_alignment) {
  HAWSER_REQUIRE_GPU(1);
  const CopyMechanism m = GetParam();
  if (m == CopyMechanism::kCopyEngine && !gpu::CudaDriver::get()->api().MemcpyBatchAsync)
    GTEST_SKIP() << "this CUDA driver has no cuMemcpyBatchAsync (CUDA 13)";
  DeviceBuffer src(0, 1 << 20), dst(0, 1 << 20);
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 31);
  src.upload(pattern);
  dst.fill(0x5a);
  auto s = openStream(settingsFor(m));
  const auto d0 = reinterpret_cast<uint64_t>(dst.data()), s0 = reinterpret_cast<uint64_t>(src.data());
  const std::vector<CopyRun> runs = awkwardRuns(d0, s0);
  uint64_t ticket = 0;
  CopyReport rep;
  Status st = s->copyRuns(runs, ticket, &rep);
  ASSERT_TRUE(st.ok()) << st.toString();
  ASSERT_TRUE(s->wait(ticket).ok());
  EXPECT_EQ(rep.used, m) << rep.fallback;
  EXPECT_EQ(rep.runs, runs.size());
  uint64_t bytes = 0;
  for (auto& r : runs) bytes += r.len;
  EXPECT_EQ(rep.bytes, bytes);
  EXPECT_EQ(rep.launches, m == CopyMechanism::kPerRun ? runs.size() : 1u);
  expectExactly(dst.download(), d0, pattern, s0, runs, 0x5a);
}

TEST_P(BatchCopy, gathers_from_page_locked_host_memory_and_scatters_back) {
  HAWSER_REQUIRE_GPU(1);
  const CopyMechanism m = GetParam();
  if (m == CopyMechanism::kCopyEngine && !gpu::CudaDriver::get()->api().MemcpyBatchAsync)
    GTEST_SKIP() << "this CUDA driver has no cuMemcpyBatchAsync (CUDA 13)";
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  ASSERT_TRUE(d->bindDevice(0).ok());
  const size_t n = 1 << 20;
  void* host = nullptr;
  ASSERT_EQ(d->api().MemHostAlloc(&host, n, 0), gpu::cu::kSuccess);
  auto* h = static_cast<char*>(host);
  fillPattern(h, n, 8);
  DeviceBuffer dev(0, n);
  dev.fill(0);
  // A staging slot's bytes (host, packed) to scattered GPU blocks, as tcp and
  // file staging do, then gathered back into a zeroed slot.
  const uint64_t block = 4096 + 17;
  std::vector<CopyRun> scatter, gather;
  for (uint64_t i = 0; i < 100; ++i) {
    const uint64_t at = ((i * 37) % 100) * (block + 100);
    scatter.push_back(CopyRun{reinterpret_cast<uint64_t>(dev.data()) + at, reinterpret_cast<uint64_t>(h) + i * block,
                              block});
    gather.push_back(CopyRun{reinterpret_cast<uint64_t>(h) + n / 2 + i * block,
                             reinterpret_cast<uint64_t>(dev.data()) + at, block});
  }
  auto s = openStream(settingsFor(m));
  uint64_t t1 = 0, t2 = 0;
  ASSERT_TRUE(s->copyRuns(scatter, t1).ok());
  ASSERT_TRUE(s->copyRuns(gather, t2).ok());
  ASSERT_TRUE(s->wait(t2).ok());
  EXPECT_EQ(memcmp(h, h + n / 2, 100 * block), 0) << "the gathered bytes are the scattered ones";
  std::vector<char> want(n);
  fillPattern(want.data(), n, 8);
  EXPECT_EQ(memcmp(h, want.data(), 100 * block), 0) << "the source slot is untouched";
  d->api().MemFreeHost(host);
}

INSTANTIATE_TEST_SUITE_P(mechanisms, BatchCopy,
                         ::testing::Values(CopyMechanism::kKernel, CopyMechanism::kCopyEngine, CopyMechanism::kPerRun),
                         [](const auto& info) { return std::string(gpu::copyMechanismName(info.param)); });

TEST(batch_copy, a_window_of_a_thousand_small_runs_is_one_launch_within_the_cta_bound) {
  HAWSER_REQUIRE_GPU(1);
  DeviceBuffer src(0, 8 << 20), dst(0, 8 << 20);
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 4);
  src.upload(pattern);
  dst.fill(0);
  // 1000 blocks of 4 KiB, destinations in a shuffled order.
  std::vector<uint64_t> slot(1000);
  for (uint64_t i = 0; i < slot.size(); ++i) slot[i] = i;
  std::shuffle(slot.begin(), slot.end(), std::mt19937(3));
  std::vector<CopyRun> runs;
  for (uint64_t i = 0; i < slot.size(); ++i)
    runs.push_back(CopyRun{reinterpret_cast<uint64_t>(dst.data()) + slot[i] * 8192,
                           reinterpret_cast<uint64_t>(src.data()) + i * 4096, 4096});
  for (uint32_t ctas : {8u, 0u}) {
    dst.fill(0);
    auto s = openStream(settingsFor(CopyMechanism::kAuto, ctas));
    const long long launches = fakeCudaCalls("launch"), copies = fakeCudaCalls("memcpy_async");
    uint64_t ticket = 0;
    CopyReport rep;
    ASSERT_TRUE(s->copyRuns(runs, ticket, &rep).ok());
    ASSERT_TRUE(s->wait(ticket).ok());
    EXPECT_EQ(rep.used, CopyMechanism::kKernel) << "auto: 4 KiB runs go to the kernel";
    EXPECT_EQ(rep.launches, 1u);
    // 1000 pieces, a warp each, 16 warps a CTA: 63 CTAs with no bound.
    EXPECT_EQ(rep.ctas, ctas ? ctas : 63u);
    if (simulated()) {
      EXPECT_EQ(fakeCudaCalls("launch") - launches, 1) << "one cuLaunchKernel for the window";
      EXPECT_EQ(fakeCudaCalls("memcpy_async") - copies, 1) << "one copy: the run list, none per run";
    }
    expectExactly(dst.download(), reinterpret_cast<uint64_t>(dst.data()), pattern,
                  reinterpret_cast<uint64_t>(src.data()), runs, 0);
  }
}

TEST(batch_copy, auto_sends_large_runs_to_the_copy_engines_and_a_window_beyond_a_list_takes_several_launches) {
  HAWSER_REQUIRE_GPU(1);
  DeviceBuffer src(0, 64 << 20), dst(0, 64 << 20);
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 12);
  src.upload(pattern);
  dst.fill(0);
  auto s = openStream(settingsFor(CopyMechanism::kAuto));
  const auto d0 = reinterpret_cast<uint64_t>(dst.data()), s0 = reinterpret_cast<uint64_t>(src.data());
  // Four runs of 4 MiB: per-run copies on the copy engines.
  std::vector<CopyRun> big;
  for (uint64_t i = 0; i < 4; ++i) big.push_back(CopyRun{d0 + (3 - i) * (4 << 20), s0 + i * (4 << 20), 4 << 20});
  uint64_t ticket = 0;
  CopyReport rep;
  ASSERT_TRUE(s->copyRuns(big, ticket, &rep).ok());
  ASSERT_TRUE(s->wait(ticket).ok());
  EXPECT_EQ(rep.used, CopyMechanism::kPerRun);
  EXPECT_EQ(rep.launches, 4u);
  EXPECT_EQ(rep.ctas, 0u) << "no SM used";
  expectExactly(dst.download(), d0, pattern, s0, big, 0);
  // The kernel forced on 20,000 runs of 2 KiB: more pieces than one run list
  // holds (8192), so three launches, the copies exact.
  dst.fill(0);
  auto k = openStream(settingsFor(CopyMechanism::kKernel, 0));
  std::vector<CopyRun> many;
  for (uint64_t i = 0; i < 20000; ++i) many.push_back(CopyRun{d0 + i * 3072, s0 + i * 2048, 2048});
  ASSERT_TRUE(k->copyRuns(many, ticket, &rep).ok());
  ASSERT_TRUE(k->wait(ticket).ok());
  EXPECT_EQ(rep.used, CopyMechanism::kKernel);
  EXPECT_EQ(rep.launches, 3u);
  expectExactly(dst.download(), d0, pattern, s0, many, 0);
}

TEST(batch_copy, a_failed_launch_is_an_error_of_that_window_only) {
  HAWSER_REQUIRE_GPU(1);
  auto fail = fakeHook<void (*)(long, int, int)>("hawserFakeCudaFailLaunch");
  if (!fail) GTEST_SKIP() << "needs the stand-in driver's hawserFakeCudaFailLaunch (a real GPU cannot be made to fail)";
  DeviceBuffer src(0, 1 << 20), dst(0, 1 << 20);
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 2);
  src.upload(pattern);
  const auto d0 = reinterpret_cast<uint64_t>(dst.data()), s0 = reinterpret_cast<uint64_t>(src.data());
  std::vector<CopyRun> a, b;
  for (uint64_t i = 0; i < 64; ++i) a.push_back(CopyRun{d0 + i * 8192, s0 + i * 4096, 4096});
  for (uint64_t i = 0; i < 64; ++i) b.push_back(CopyRun{d0 + i * 8192 + 4096, s0 + (64 + i) * 4096, 4096});
  // Refused at the call: that window's copyRuns fails, the next one copies.
  dst.fill(0);
  auto s = openStream(settingsFor(CopyMechanism::kKernel));
  fail(0, 701, 0);  // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
  uint64_t ta = 0, tb = 0;
  Status st = s->copyRuns(a, ta);
  EXPECT_EQ(st.code(), Code::kIoError) << st.toString();
  EXPECT_NE(st.message().find("launching the copy kernel on GPU 0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("CUresult 701"), std::string::npos) << st.message();
  ASSERT_TRUE(s->copyRuns(b, tb).ok());
  ASSERT_TRUE(s->wait(tb).ok());
  expectExactly(dst.download(), d0, pattern, s0, b, 0);
  // A fault on the GPU: the window's ticket reports it (and the stream stays
  // failed, as a real context does).
  auto f = openStream(settingsFor(CopyMechanism::kKernel));
  fail(0, 700, 1);  // CUDA_ERROR_ILLEGAL_ADDRESS
  ASSERT_TRUE(f->copyRuns(a, ta).ok());
  st = f->wait(ta);
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_NE(st.message().find("CUresult 700"), std::string::npos) << st.message();
  fail(-1, 0, 0);
}

TEST(batch_copy, mechanisms_have_names_and_settings_come_from_the_config) {
  for (auto m : {CopyMechanism::kAuto, CopyMechanism::kKernel, CopyMechanism::kCopyEngine, CopyMechanism::kPerRun}) {
    CopyMechanism back;
    ASSERT_TRUE(gpu::parseCopyMechanism(gpu::copyMechanismName(m), back));
    EXPECT_EQ(back, m);
  }
  CopyMechanism x;
  EXPECT_FALSE(gpu::parseCopyMechanism("fast", x));
  Config c;
  c.set("gpu.copy_mechanism", "copy_engine");
  c.set("gpu.copy_max_ctas", "8");
  c.set("gpu.copy_kernel_below", "64K");
  CopySettings s;
  ASSERT_TRUE(CopySettings::fromConfig(c, s).ok());
  EXPECT_EQ(s.mechanism, CopyMechanism::kCopyEngine);
  EXPECT_EQ(s.max_ctas, 8u);
  EXPECT_EQ(s.kernel_below, 64u << 10);
  c.set("gpu.copy_mechanism", "fast");
  Status st = CopySettings::fromConfig(c, s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("gpu.copy_mechanism"), std::string::npos) << st.message();
  // The PTX the library embeds declares the entry it launches.
  EXPECT_NE(std::string(gpu::kCopyKernelPtx).find(std::string(".entry ") + gpu::kCopyKernelEntry + "("),
            std::string::npos);
}

}  // namespace
}  // namespace hawser::test
