// CUDA virtual memory over nvlink (issue 29): memory made with cuMemCreate
// (POSIX fd handle type) and mapped with cuMemMap, as PyTorch's expandable
// segments allocate it, has no legacy IPC handle. Its owner exports each
// physical allocation as a file descriptor and passes them over its local
// socket; the peer imports and maps them in a range of its own. Here the
// owner is `hawser serve --gpu-memory vmm` (2 MiB physical allocations
// mapped back to back): every byte crosses allocation boundaries both ways,
// unregistering releases the peer's mappings, doctor names the mechanism,
// and an owner in another pid namespace is served (VMM memory) or declined
// per buffer with the reason (legacy handles). As gpu_sim.* against the
// stand-in driver (whose fds are memfds another process maps); as gpu.* on
// a GPU host (HAWSER_TEST_REQUIRE_GPU=1 there: a skip fails).
#include <dirent.h>
#include <signal.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/util.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 2929;
constexpr size_t kChunk = 2 << 20;     // the owner's physical allocations
constexpr size_t kBytes = 4 * kChunk;  // four of them, one range

std::vector<std::string> gpuEnv() { return {"HAWSER_GPU_CUDA_DRIVER=" + testCudaDriverPath()}; }
std::string gpuEnvPrefix() { return "HAWSER_GPU_CUDA_DRIVER='" + testCudaDriverPath() + "' "; }

EngineOptions gpuOptions() {
  EngineOptions o;
  o.config = gpuConfig();
  return o;
}

// A GPU test that finds no GPU: skipped, or failed where the GPU machine
// asks for one (HAWSER_TEST_REQUIRE_GPU=1).
#define VMM_REQUIRE_GPU()                                                                              \
  do {                                                                                                 \
    const char* req_ = getenv("HAWSER_TEST_REQUIRE_GPU");                                              \
    if (req_ && std::string(req_) == "1" && !::hawser::test::testCudaDriver())                         \
      FAIL() << "HAWSER_TEST_REQUIRE_GPU=1 but no GPU: " << ::hawser::gpu::CudaDriver::reason();       \
    HAWSER_REQUIRE_GPU(1);                                                                             \
  } while (0)

int openFds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

// Address ranges the stand-in driver has reserved in this process (-1 with
// the real driver, which cannot tell).
int reservations() {
  auto f = fakeHook<int (*)()>("hawserFakeCudaReservations");
  return f ? f() : -1;
}

// `hawser serve` exposing kBytes of GPU memory (`gpu_memory`: vmm or
// device) filled with pattern(kSeed), optionally behind `wrap` (unshare).
struct Owner {
  bool start(const std::string& gpu_memory, const std::vector<std::string>& wrap = {},
             const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = wrap;
    argv.insert(argv.end(), {hawserBin(), "serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(kBytes),
                             "--fill-seed", std::to_string(kSeed), "--location", "cuda:0", "--gpu-memory", gpu_memory,
                             "--vmm-chunk", std::to_string(kChunk)});
    std::vector<std::string> all = gpuEnv();
    all.insert(all.end(), env.begin(), env.end());
    return child.exec(argv, all) && servedSegment(child, segment, base, 30000);
  }
  Child child;
  std::string segment;
  uint64_t base = 0;
};

// Why this machine cannot run a process in a pid namespace of its own ("" when it can).
// With its own /proc too (--mount-proc), as a container has: the CUDA driver's
// cuInit fails (CUresult 304) in a pid namespace that sees its parent's /proc
// (the H200, run 18).
std::string unshareUnavailable() {
  std::string out;
  if (sh("unshare --pid --fork --kill-child --mount-proc true 2>&1", &out) != 0)
    return "unshare --pid --fork --mount-proc is not allowed here (needs CAP_SYS_ADMIN or user namespaces): " + out;
  return "";
}

class NvlinkVmm : public ::testing::Test {
 protected:
  void SetUp() override {
    VMM_REQUIRE_GPU();
    ASSERT_TRUE(e_.init("p2p", "nvlink-vmm", "127.0.0.1", 0, gpuOptions()).ok());
    local_ = std::make_unique<DeviceBuffer>(0, kBytes);
    ASSERT_TRUE(e_.registerLocalMemory(local_->data(), local_->size(), "cuda:0", false).ok());
  }
  // Reads [off, off + len) of the owner's memory into local_ at `off` and
  // checks every byte against pattern(kSeed).
  void readAndCheck(const Owner& o, SegmentID seg, size_t off, size_t len) {
    Status s = e_.transferSync({{OpCode::kRead, local_->data() + off, seg, o.base + off, len}}, std::chrono::seconds(60));
    ASSERT_TRUE(s.ok()) << s.toString();
    std::vector<char> got = local_->download(off, len);
    EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, off), -1) << "a byte differs at that offset";
  }
  TransferEngine e_;
  std::unique_ptr<DeviceBuffer> local_;
};

TEST_F(NvlinkVmm, memory_of_four_physical_allocations_moves_every_byte_both_ways_over_nvlink) {
  Owner o;
  ASSERT_TRUE(o.start("vmm"));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  // A read spanning all four allocations, at offsets that cut through them.
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, 0, kBytes));
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, kChunk - 4093, 2 * kChunk + 8191));
  EXPECT_EQ(counter(e_, "nvlink", "vmm_imported"), 1u) << "one range imported once, for every request";
  EXPECT_EQ(counter(e_, "nvlink", "handles_opened"), 1u);
  if (int opened = openedIpcHandles(); opened >= 0) {
    EXPECT_EQ(opened, 4) << "one imported allocation per physical allocation of the owner";
  }
  EXPECT_EQ(routeFallbacks(e_, "nvlink", "tcp", "no_ipc_handle"), -1) << "VMM memory took a fallback";
  // Writes across the boundaries, read back through nvlink.
  std::vector<char> data(3 * kChunk);
  fillPattern(data.data(), data.size(), kSeed + 1);
  local_->upload(data);
  const size_t at = kChunk / 2 + 17;
  Status s = e_.transferSync({{OpCode::kWrite, local_->data(), seg, o.base + at, data.size()}}, std::chrono::seconds(60));
  ASSERT_TRUE(s.ok()) << s.toString();
  local_->fill(0);
  s = e_.transferSync({{OpCode::kRead, local_->data(), seg, o.base, kBytes}}, std::chrono::seconds(60));
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> got = local_->download(0, kBytes);
  EXPECT_EQ(checkPattern(got.data(), at, kSeed, 0), -1);
  EXPECT_EQ(checkPattern(got.data() + at, data.size(), kSeed + 1, 0), -1);
  EXPECT_EQ(checkPattern(got.data() + at + data.size(), kBytes - at - data.size(), kSeed, at + data.size()), -1);
  EXPECT_EQ(counter(e_, "nvlink", "bytes"), kBytes + (2 * kChunk + 8191) + data.size() + kBytes);
}

TEST_F(NvlinkVmm, unregistering_at_the_owner_releases_the_peers_mapping_its_addresses_and_fds) {
  const int fds_before = openFds();
  const int reserved_before = reservations();
  Owner o;
  ASSERT_TRUE(o.start("vmm"));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, 0, kBytes));
  if (reserved_before >= 0) {
    EXPECT_EQ(reservations(), reserved_before + 1) << "the imported range's reservation";
  }
  o.child.kill(SIGUSR1);
  ASSERT_FALSE(o.child.waitFor("withdrawn", 20000).empty());
  ASSERT_TRUE(eventually([&] {
    Status submit;
    auto st = runBatch(e_, seg, {{OpCode::kRead, local_->data(), seg, o.base, 4096}}, 10000, &submit);
    if (submit.ok()) {
      EXPECT_EQ(st[0].error.code(), Code::kOutOfRange) << st[0].error.toString();
    }
    return submit.code() == Code::kOutOfRange;
  })) << "the refreshed descriptor still lists the withdrawn range";
  EXPECT_TRUE(eventually(
      [&] { return counter(e_, "nvlink", "handles_closed") == counter(e_, "nvlink", "handles_opened"); }))
      << "the imported range of a region no descriptor lists stays mapped";
  if (openedIpcHandles() >= 0) {
    EXPECT_TRUE(eventually([] { return openedIpcHandles() == 0; })) << openedIpcHandles() << " allocations still held";
    EXPECT_EQ(reservations(), reserved_before) << "the imported range's addresses were not freed";
  }
  // The socket to the owner stays (the segment is open); nothing else is left.
  EXPECT_LE(openFds(), fds_before + 4) << "fds leaked: the allocations' fds are closed once mapped";
}

// doctor --peer's route for local GPU memory to `segment`.
nlohmann::json doctorRoute(const std::string& segment) {
  std::string out;
  EXPECT_EQ(sh(gpuEnvPrefix() + hawserBin() + " doctor --json --peer " + segment + " 2>/dev/null", &out), 0) << out;
  nlohmann::json j = nlohmann::json::parse(lastLine(out), nullptr, false);
  EXPECT_TRUE(j.is_object()) << out;
  return j.is_object() ? j["peer"]["routes"]["cuda:0"] : nlohmann::json{};
}

TEST_F(NvlinkVmm, closing_the_segment_releases_the_imported_range_while_the_owner_lives) {
  const int reserved_before = reservations();
  Owner o;
  ASSERT_TRUE(o.start("vmm"));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, kChunk, kChunk));
  EXPECT_EQ(counter(e_, "nvlink", "handles_opened"), 1u);
  ASSERT_TRUE(e_.closeSegment(seg).ok());
  EXPECT_TRUE(eventually([&] { return counter(e_, "nvlink", "handles_closed") == 1; }))
      << "the imported range of a closed segment stays mapped";
  if (openedIpcHandles() >= 0) {
    EXPECT_TRUE(eventually([] { return openedIpcHandles() == 0; })) << openedIpcHandles() << " allocations still held";
    EXPECT_EQ(reservations(), reserved_before);
  }
}

TEST_F(NvlinkVmm, doctor_and_the_route_say_vmm_memory_goes_over_nvlink_by_file_descriptor) {
  Owner o;
  ASSERT_TRUE(o.start("vmm"));
  const nlohmann::json route = doctorRoute(o.segment);
  EXPECT_EQ(route["transport"], "nvlink") << route.dump();
  EXPECT_NE(route["why"].get<std::string>().find("legacy CUDA IPC handles for 0 buffer(s), VMM by file descriptor "
                                                 "for 1; owner reached over its socket @hawser-nvlink-"),
            std::string::npos)
      << route.dump();
}

TEST_F(NvlinkVmm, an_owner_in_another_pid_namespace_serves_vmm_memory_over_nvlink_and_its_death_fails_tasks) {
  const std::string why = unshareUnavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  Owner o;
  ASSERT_TRUE(o.start("vmm", {"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"}));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, 0, kBytes));
  EXPECT_EQ(counter(e_, "nvlink", "vmm_imported"), 1u);
  EXPECT_EQ(routeFallbacks(e_, "nvlink", "tcp", "other_pid_namespace"), -1);
  // Killed: the pidfd it passed over its socket says so; the next request
  // fails, in time, instead of completing or hanging.
  o.child.kill(SIGKILL);
  ASSERT_TRUE(eventually([&] {
    auto st = runBatch(e_, seg, {{OpCode::kRead, local_->data(), seg, o.base, 65536}}, 20000);
    return st.size() == 1 && st[0].s != TransferState::kCompleted;
  })) << "requests to a killed owner in another pid namespace still complete";
  EXPECT_GE(counter(e_, "nvlink", "owner_deaths"), 1u);
}

TEST_F(NvlinkVmm, cudamalloc_memory_of_an_owner_in_another_pid_namespace_is_declined_per_buffer_with_the_reason) {
  const std::string why = unshareUnavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  Owner o;
  ASSERT_TRUE(o.start("device", {"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"}));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  // Legacy CUDA IPC handles do not open across pid namespaces: tcp carries
  // it, counted under that reason.
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, 0, 1 << 20));
  EXPECT_EQ(routeFallbacks(e_, "nvlink", "tcp", "other_pid_namespace"), 1);
  EXPECT_EQ(counter(e_, "nvlink", "handles_opened"), 0u);
}

}  // namespace
}  // namespace hawser::test

namespace hawser::test {
namespace {

// Containers that share a directory, not a network namespace: the owner's
// socket in nvlink.socket_dir is reached from another mount namespace; one
// in a directory only its own mount namespace sees is not (tcp then, and
// doctor says why).
TEST_F(NvlinkVmm, a_socket_directory_both_mount_namespaces_see_serves_vmm_memory_one_they_do_not_gives_the_reason) {
  std::string out;
  if (sh("unshare --pid --mount --fork --kill-child --mount-proc true 2>&1", &out) != 0)
    GTEST_SKIP() << "unshare --pid --mount --fork --mount-proc is not allowed here: " << out;
  TempDir shared;
  Owner o;
  ASSERT_TRUE(o.start("vmm", {"unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc"},
                      {"HAWSER_NVLINK_SOCKET_DIR=" + shared.path}));
  SegmentID seg;
  ASSERT_TRUE(e_.openSegment(o.segment, seg).ok());
  ASSERT_NO_FATAL_FAILURE(readAndCheck(o, seg, 0, kBytes));
  EXPECT_EQ(counter(e_, "nvlink", "vmm_imported"), 1u);
  nlohmann::json route = doctorRoute(o.segment);
  EXPECT_EQ(route["transport"], "nvlink") << route.dump();
  EXPECT_NE(route["why"].get<std::string>().find("owner reached over its socket " + shared.path + "/hawser-nvlink-"),
            std::string::npos)
      << route.dump();

  TempDir hidden;
  Owner h;
  ASSERT_TRUE(h.start("vmm",
                      {"unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "sh", "-c",
                       "mount -t tmpfs hawser-test " + hidden.path + " && exec env HAWSER_NVLINK_SOCKET_DIR=" +
                           hidden.path + " \"$0\" \"$@\""}));
  route = doctorRoute(h.segment);
  EXPECT_NE(route["transport"], "nvlink") << route.dump();
  EXPECT_NE(route["why"].get<std::string>().find("its nvlink.socket_dir is not a directory this process sees"),
            std::string::npos)
      << route.dump();
}

}  // namespace
}  // namespace hawser::test
