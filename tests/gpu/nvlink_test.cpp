// The nvlink transport's own behaviours (the shared suite is
// nvlink_suite_test.cpp): GPU 0 -> GPU 1 across processes, an owner in this
// very process, striping, host memory never taking nvlink, one handle per
// allocation, handles closed once the owner withdraws a region, install
// without a driver, and what doctor and bench say of it.
#include <signal.h>

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/util.h"
#include "engine/access.h"
#include "gpu/gpu_env.h"
#include "hawser/engine.h"
#include "metadata/descriptor.h"
#include "transport/nvlink/nvlink_testing.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 777;

std::vector<std::string> gpuEnv() { return {"HAWSER_GPU_CUDA_DRIVER=" + testCudaDriverPath()}; }
std::string gpuEnvPrefix() { return "HAWSER_GPU_CUDA_DRIVER='" + testCudaDriverPath() + "' "; }

EngineOptions gpuOptions(std::map<std::string, std::string> extra = {}) {
  EngineOptions o;
  o.config = gpuConfig();
  for (auto& [k, v] : extra) o.config[k] = v;
  return o;
}

// `hawser serve` with its memory on a GPU, filled with pattern(kSeed).
struct Served {
  bool start(const std::string& location, size_t bytes) {
    if (!child.start({"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(bytes), "--fill-seed",
                      std::to_string(kSeed), "--location", location},
                     gpuEnv()))
      return false;
    return servedSegment(child, segment, base);
  }
  Child child;
  std::string segment;
  uint64_t base = 0;
};

nlohmann::json lastJsonLine(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  auto begin = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1, end + 1), nullptr, false);
}

TEST(nvlink, gpu0_to_gpu1_across_processes_moves_every_byte_through_peer_copies) {
  HAWSER_REQUIRE_GPU(2);
  Served t;
  ASSERT_TRUE(t.start("cuda:0", 64 << 20));
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "nvlink-gpu1", "127.0.0.1", 0, gpuOptions()).ok());
  DeviceBuffer local(1, 16 << 20), back(1, 16 << 20);
  ASSERT_TRUE(e.registerLocalMemory(local.data(), local.size()).ok());
  ASSERT_TRUE(e.registerLocalMemory(back.data(), back.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment(t.segment, seg).ok());
  RouteExplanation route;
  ASSERT_TRUE(e.explainRoute(seg, "cuda:1", route).ok());
  EXPECT_EQ(route.transport, "nvlink") << route.why;

  // GPU 0 of the target -> GPU 1 here, unaligned, several stripes.
  const uint64_t off = 4099, len = (10u << 20) + 777;
  local.fill(0);
  std::vector<TransferStatus> st;
  Status s = e.transferSync({{OpCode::kRead, local.data() + 13, seg, t.base + off, len}}, std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> got = local.download(13, len);
  EXPECT_EQ(checkPattern(got.data(), got.size(), kSeed, off), -1);
  EXPECT_EQ(local.download(0, 13), std::vector<char>(13, 0)) << "bytes before the range untouched";
  // GPU 1 -> GPU 0 and back again.
  std::vector<char> pattern(len);
  fillPattern(pattern.data(), len, 5);
  local.upload(pattern, 13);
  s = e.transferSync({{OpCode::kWrite, local.data() + 13, seg, t.base + 8192, len}}, std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  s = e.transferSync({{OpCode::kRead, back.data(), seg, t.base + 8192, len}}, std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> wrote = back.download(0, len);
  EXPECT_EQ(checkPattern(wrote.data(), wrote.size(), 5), -1);

  EXPECT_GT(counter(e, "nvlink", "peer_copies"), 0u) << "GPU 1 <-> GPU 0 goes through peer copies";
  EXPECT_EQ(counter(e, "nvlink", "handles_opened"), 1u) << "one allocation, opened once, whatever the number of copies";
  EXPECT_EQ(counter(e, "nvlink", "slices_failed"), 0u);
  (void)e.unregisterLocalMemory(local.data());
  (void)e.unregisterLocalMemory(back.data());
}

TEST(nvlink, an_owner_in_this_process_is_addressed_directly_and_large_tasks_are_striped) {
  HAWSER_REQUIRE_GPU(1);
  const int last = gpu::CudaDriver::get()->deviceCount() - 1;
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "nvlink-self-t", "127.0.0.1", 0, gpuOptions()).ok());
  ASSERT_TRUE(init.init("p2p", "nvlink-self-i", "127.0.0.1", 0, gpuOptions({{"nvlink.stripe_size", "1M"}})).ok());
  DeviceBuffer src(0, 12 << 20), dst(last, 12 << 20);
  std::vector<char> pattern(src.size());
  fillPattern(pattern.data(), pattern.size(), 9);
  src.upload(pattern);
  dst.fill(0);
  ASSERT_TRUE(target.registerLocalMemory(src.data(), src.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(dst.data(), dst.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  const uint64_t len = (10u << 20) + 5;
  const uint64_t before = counter(init, "nvlink", "slices_completed");
  Status s = init.transferSync({{OpCode::kRead, dst.data(), seg, reinterpret_cast<uint64_t>(src.data()) + 3, len}},
                               std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<char> got = dst.download(0, len);
  EXPECT_EQ(checkPattern(got.data(), len, 9, 3), -1);
  EXPECT_EQ(counter(init, "nvlink", "slices_completed") - before, 11u) << "10 MiB + 5 in stripes of 1 MiB";
  EXPECT_EQ(counter(init, "nvlink", "handles_opened"), 0u) << "an owner in this process needs no IPC handle";
  (void)init.unregisterLocalMemory(dst.data());
  (void)target.unregisterLocalMemory(src.data());
}

TEST(nvlink, host_memory_at_either_end_never_takes_nvlink) {
  HAWSER_REQUIRE_GPU(1);
  // Before the engines: a target thread may still be inside the sendmsg of a
  // response the initiator already has when the test ends.
  Buffer host_remote(1 << 20), host_local(1 << 20);
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "nvlink-host-t", "127.0.0.1", 0, gpuOptions()).ok());
  ASSERT_TRUE(init.init("p2p", "nvlink-host-i", "127.0.0.1", 0, gpuOptions()).ok());
  DeviceBuffer gpu_remote(0, 1 << 20), gpu_local(0, 1 << 20);
  ASSERT_TRUE(target.registerLocalMemory(host_remote.p, host_remote.n).ok());
  ASSERT_TRUE(target.registerLocalMemory(gpu_remote.data(), gpu_remote.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(host_local.p, host_local.n).ok());
  ASSERT_TRUE(init.registerLocalMemory(gpu_local.data(), gpu_local.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  const auto hr = reinterpret_cast<uint64_t>(host_remote.p), gr = reinterpret_cast<uint64_t>(gpu_remote.data());
  struct Case {
    char* local;
    uint64_t remote;
    const char* why;
  } cases[] = {{gpu_local.data(), hr, "nvlink: does not move remote host memory"},
               {host_local.p, gr, "nvlink: does not move local host memory"},
               {host_local.p, hr, "nvlink: does not move local host memory"}};
  for (auto& c : cases) {
    const uint64_t moved = counter(init, "nvlink", "slices_completed") + counter(init, "nvlink", "slices_failed");
    Status submit;
    auto st = runBatch(init, seg, {{OpCode::kRead, c.local, seg, c.remote, 4096}}, 10000, &submit);
    if (!submit.ok()) {
      EXPECT_NE(submit.message().find(c.why), std::string::npos) << submit.toString();
    }
    EXPECT_EQ(counter(init, "nvlink", "slices_completed") + counter(init, "nvlink", "slices_failed"), moved) << c.why;
  }
  RouteExplanation r;
  ASSERT_TRUE(init.explainRoute(seg, "cpu:0", r).ok());
  EXPECT_NE(r.transport, "nvlink") << r.why;
  ASSERT_TRUE(init.explainRoute(seg, "cuda:0", r).ok());
  EXPECT_EQ(r.transport, "nvlink") << r.why;
}

TEST(nvlink, regions_sharing_an_allocation_publish_one_handle_with_their_offsets) {
  HAWSER_REQUIRE_GPU(1);
  TransferEngine owner;
  ASSERT_TRUE(owner.init("p2p", "nvlink-share", "127.0.0.1", 0, gpuOptions()).ok());
  DeviceBuffer g(0, 4 << 20);  // one allocation, as a caching allocator hands out pieces of one
  ASSERT_TRUE(owner.registerLocalMemory(g.data() + 4096, 1 << 20).ok());
  ASSERT_TRUE(owner.registerLocalMemory(g.data() + (2 << 20), 1 << 20).ok());
  SegmentDesc d = detail::EngineAccess::of(owner).localDescriptor();
  ASSERT_EQ(d.buffers.size(), 2u);
  const auto& a = d.buffers[0].attrs["nvlink"];
  const auto& b = d.buffers[1].attrs["nvlink"];
  ASSERT_TRUE(a.is_object() && b.is_object()) << d.buffers[0].attrs.dump();
  EXPECT_EQ(a["handle"], b["handle"]);
  EXPECT_EQ(a["base"].get<uint64_t>(), reinterpret_cast<uint64_t>(g.data()));
  EXPECT_EQ(a["base"], b["base"]);
  EXPECT_EQ(a["offset"].get<uint64_t>(), 4096u);
  EXPECT_EQ(b["offset"].get<uint64_t>(), 2u << 20);
  EXPECT_EQ(counter(owner, "nvlink", "exported_regions"), 2u);
  EXPECT_EQ(counter(owner, "nvlink", "exported_allocations"), 1u);
  ASSERT_TRUE(owner.unregisterLocalMemory(g.data() + 4096).ok());
  EXPECT_EQ(counter(owner, "nvlink", "exported_allocations"), 1u);
  ASSERT_TRUE(owner.unregisterLocalMemory(g.data() + (2 << 20)).ok());
  EXPECT_EQ(counter(owner, "nvlink", "exported_regions"), 0u);
  EXPECT_EQ(counter(owner, "nvlink", "exported_allocations"), 0u);
}

TEST(nvlink, a_withdrawn_region_is_refused_and_its_handle_closed_once_the_descriptor_drops_it) {
  HAWSER_REQUIRE_GPU(1);
  Served t;
  ASSERT_TRUE(t.start("cuda:0", 16 << 20));
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "nvlink-withdraw", "127.0.0.1", 0, gpuOptions()).ok());
  DeviceBuffer local(0, 1 << 20);
  ASSERT_TRUE(e.registerLocalMemory(local.data(), local.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment(t.segment, seg).ok());
  Status s = e.transferSync({{OpCode::kRead, local.data(), seg, t.base, 65536}}, std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(counter(e, "nvlink", "handles_opened"), 1u);
  const int mapped = openedIpcHandles();
  if (mapped >= 0) {
    EXPECT_EQ(mapped, 1);
  }

  t.child.kill(SIGUSR1);
  ASSERT_FALSE(t.child.waitFor("withdrawn").empty());
  // Until the change notice arrives a request fails in flight (the owner's
  // table says withdrawn); then the engine refuses it at submit.
  ASSERT_TRUE(eventually([&] {
    Status submit;
    auto st = runBatch(e, seg, {{OpCode::kRead, local.data(), seg, t.base, 4096}}, 10000, &submit);
    if (submit.ok()) {
      EXPECT_EQ(st[0].error.code(), Code::kOutOfRange) << st[0].error.toString();
    }
    return submit.code() == Code::kOutOfRange;
  })) << "the refreshed descriptor still lists the withdrawn region";
  EXPECT_TRUE(eventually([&] { return counter(e, "nvlink", "handles_closed") == counter(e, "nvlink", "handles_opened"); }))
      << "the handle of a region no descriptor lists stays open";
  if (mapped >= 0) {
    EXPECT_TRUE(eventually([] { return openedIpcHandles() == 0; })) << openedIpcHandles();
  }
}

// A stream worker parks before it checks the registration of the copy at
// `g_park_at`, until released.
std::mutex g_park_mu;
std::condition_variable g_park_cv;
uint64_t g_park_at = 0;
bool g_parked = false, g_released = false;

void parkBeforeCheck(uint64_t remote) {
  std::unique_lock lk(g_park_mu);
  if (remote != g_park_at || g_parked) return;
  g_parked = true;
  g_park_cv.notify_all();
  g_park_cv.wait_for(lk, std::chrono::seconds(60), [] { return g_released; });
}

// Issue 30: every stripe of a task checks the registration the task was made
// for. The owner unregistering and registering the same range again between
// two stripes fails the task (kOutOfRange naming the withdrawn range):
// reads never hand over bytes of two registrations, writes never land in
// the new one.
TEST(nvlink, a_task_fails_when_the_owner_registers_its_range_again_between_two_stripes) {
  HAWSER_REQUIRE_GPU(1);
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "nvlink-rereg-t", "127.0.0.1", 0, gpuOptions()).ok());
  // Two streams: a task's two stripes go to two stream workers (a group
  // each), each of which checks the task's registration before its copy.
  // Issued by the stream threads (not the submitting one, which the seam
  // would park inside submitTransfer).
  ASSERT_TRUE(init.init("p2p", "nvlink-rereg-i", "127.0.0.1", 0,
                        gpuOptions({{"nvlink.stripe_size", "1M"},
                                    {"nvlink.streams", "2"},
                                    {"nvlink.issue_inline", "false"}}))
                  .ok());
  DeviceBuffer mem(0, 4 << 20), local(0, 2 << 20);
  ASSERT_TRUE(target.registerLocalMemory(mem.data(), mem.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(local.data(), local.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  const uint64_t base = reinterpret_cast<uint64_t>(mem.data());
  nvlink::testing::before_check.store(parkBeforeCheck);
  for (OpCode op : {OpCode::kRead, OpCode::kWrite}) {
    SCOPED_TRACE(op == OpCode::kRead ? "read" : "write");
    std::vector<char> old_bytes(mem.size()), new_bytes(mem.size()), mine(local.size());
    fillPattern(old_bytes.data(), old_bytes.size(), 21);
    fillPattern(new_bytes.data(), new_bytes.size(), 22);
    fillPattern(mine.data(), mine.size(), 23);
    mem.upload(old_bytes);
    local.upload(mine);
    {
      std::lock_guard lk(g_park_mu);
      g_park_at = base + (1 << 20);  // the second stripe
      g_parked = g_released = false;
    }
    BatchID b = 0;
    ASSERT_TRUE(init.allocateBatchID(1, b).ok());
    ASSERT_TRUE(init.submitTransfer(b, {{op, local.data(), seg, base, 2 << 20}}).ok());
    {
      std::unique_lock lk(g_park_mu);
      ASSERT_TRUE(g_park_cv.wait_for(lk, std::chrono::seconds(30), [] { return g_parked; }));
    }
    // The first stripe has landed ...
    ASSERT_TRUE(eventually([&] {
      TransferStatus st;
      return init.getTransferStatus(b, 0, st).ok() && st.transferred_bytes == (1u << 20);
    }));
    // ... then the owner registers the range again, with new contents.
    ASSERT_TRUE(target.unregisterLocalMemory(mem.data()).ok());
    mem.upload(new_bytes);
    ASSERT_TRUE(target.registerLocalMemory(mem.data(), mem.size()).ok());
    {
      std::lock_guard lk(g_park_mu);
      g_released = true;
      g_park_cv.notify_all();
    }
    ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(30)).ok());
    TransferStatus st;
    ASSERT_TRUE(init.getTransferStatus(b, 0, st).ok());
    ASSERT_TRUE(init.freeBatchID(b).ok());
    ASSERT_EQ(st.s, TransferState::kFailed) << "the task used two registrations of one range";
    EXPECT_EQ(st.error.code(), Code::kOutOfRange) << st.error.toString();
    EXPECT_NE(st.error.message().find("was withdrawn by its owner (unregistered): registration"), std::string::npos)
        << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, 1u << 20) << "the first stripe, from the first registration";
    if (op == OpCode::kWrite) {
      std::vector<char> now = mem.download(0, mem.size());
      EXPECT_EQ(std::memcmp(now.data(), new_bytes.data(), now.size()), 0) << "a stripe landed in the new registration";
    }
    // A task made for the new registration (once the initiator's descriptor
    // caught up with it: the owner's change notice) completes.
    EXPECT_TRUE(eventually([&] {
      return init.transferSync({{OpCode::kRead, local.data(), seg, base, 4096}}, std::chrono::seconds(10)).ok();
    }));
  }
  nvlink::testing::before_check.store(nullptr);
  (void)init.unregisterLocalMemory(local.data());
  (void)target.unregisterLocalMemory(mem.data());
}

// Issue 30: the owner's unregisterLocalMemory does not return while a copy
// a peer issued with the range is still running (the peer announced it in
// the owner's table: nvlink_readers.h): a write in flight lands whole before
// it returns and nothing lands after; a read in flight takes the bytes of
// the registration it was made for. The copy is held on the GPU by the
// stand-in driver.
TEST(nvlink, unregister_returns_only_after_the_copies_in_flight_with_the_range_ended) {
  HAWSER_REQUIRE_GPU(1);
  auto hold = fakeHook<void (*)(int)>("hawserFakeCudaHoldStreams");
  if (!hold) GTEST_SKIP() << "needs the stand-in driver's hawserFakeCudaHoldStreams to hold a copy in flight";
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "nvlink-fence-t", "127.0.0.1", 0, gpuOptions()).ok());
  ASSERT_TRUE(init.init("p2p", "nvlink-fence-i", "127.0.0.1", 0,
                        gpuOptions({{"nvlink.streams", "1"}, {"nvlink.stream_depth", "1"}}))
                  .ok());
  constexpr size_t kTask = 1 << 20;
  DeviceBuffer mem(0, 2 * kTask), local(0, kTask);
  ASSERT_TRUE(target.registerLocalMemory(mem.data(), mem.size()).ok());
  ASSERT_TRUE(init.registerLocalMemory(local.data(), local.size()).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  const uint64_t base = reinterpret_cast<uint64_t>(mem.data());
  for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
    SCOPED_TRACE(op == OpCode::kRead ? "read" : "write");
    std::vector<char> theirs(mem.size()), mine(local.size());
    fillPattern(theirs.data(), theirs.size(), 41);
    fillPattern(mine.data(), mine.size(), 42);
    mem.upload(theirs);
    local.upload(mine);
    const uint64_t windows = counter(init, "nvlink", "gpu_copy_windows"), waited = counter(target, "nvlink", "withdrawals_waited");
    BatchID b = 0;
    ASSERT_TRUE(init.allocateBatchID(1, b).ok());
    std::vector<char> at_return;  // the range as unregister returned it to the application
    std::atomic<bool> returned{false};
    std::thread unreg;
    {
      Held held(hold);
      ASSERT_TRUE(init.submitTransfer(b, {{op, local.data(), seg, base, kTask}}).ok());
      // Its copy is issued (and held on the GPU).
      ASSERT_TRUE(eventually([&] { return counter(init, "nvlink", "gpu_copy_windows") > windows; }));
      unreg = std::thread([&] {
        EXPECT_TRUE(target.unregisterLocalMemory(mem.data()).ok());
        returned = true;
        at_return = mem.download();
      });
      // unregister waits for the copy (counted), or — were it not to — returns.
      EXPECT_TRUE(eventually([&] { return returned.load() || counter(target, "nvlink", "withdrawals_waited") > waited; }));
      EXPECT_FALSE(returned.load()) << "unregisterLocalMemory returned while a copy with the range was in flight";
    }  // the GPU runs the copy
    unreg.join();
    EXPECT_EQ(counter(target, "nvlink", "withdrawals_waited"), waited + 1);
    ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(30)).ok());
    TransferStatus st;
    ASSERT_TRUE(init.getTransferStatus(b, 0, st).ok());
    ASSERT_TRUE(init.freeBatchID(b).ok());
    // Issued before the withdrawal: it completes, from and into the registration it was made for.
    EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    if (op == OpCode::kWrite) {
      ASSERT_EQ(at_return.size(), mem.size());
      EXPECT_EQ(checkPattern(at_return.data(), kTask, 42), -1) << "the write in flight had not landed whole";
      EXPECT_EQ(checkPattern(at_return.data() + kTask, kTask, 41, kTask), -1);
      EXPECT_EQ(std::memcmp(mem.download().data(), at_return.data(), at_return.size()), 0)
          << "bytes landed after unregister returned";
    } else {
      EXPECT_EQ(checkPattern(local.download().data(), kTask, 41), -1) << "the read took other bytes";
    }
    // Registered again; tasks made for the new registration complete.
    ASSERT_TRUE(target.registerLocalMemory(mem.data(), mem.size()).ok());
    EXPECT_TRUE(eventually([&] {
      return init.transferSync({{OpCode::kRead, local.data(), seg, base, 4096}}, std::chrono::seconds(10)).ok();
    }));
  }
  (void)init.unregisterLocalMemory(local.data());
  (void)target.unregisterLocalMemory(mem.data());
}

TEST(nvlink, without_a_cuda_driver_it_is_not_installed_and_doctor_says_why) {
  std::string out;
  int rc = sh("HAWSER_GPU_CUDA_DRIVER=/nonexistent/libcuda.so.1 " + hawserBin() + " doctor --json", &out);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = lastJsonLine(out);
  ASSERT_TRUE(j.is_object()) << out;
  bool found = false;
  for (auto& t : j["transports"]) {
    if (t["name"] != "nvlink") continue;
    found = true;
    EXPECT_FALSE(t["installed"].get<bool>());
    EXPECT_NE(t["reason"].get<std::string>().find("CUDA driver"), std::string::npos) << t.dump();
    EXPECT_EQ(t["cost_rank"].get<int>(), 10);
  }
  EXPECT_TRUE(found) << "doctor lists no nvlink transport: " << out;
}

TEST(nvlink, doctor_says_gpu_memory_to_a_gpu_peer_takes_nvlink_and_why) {
  HAWSER_REQUIRE_GPU(1);
  Served t;
  ASSERT_TRUE(t.start("cuda:0", 16 << 20));
  std::string out;
  int rc = sh(gpuEnvPrefix() + hawserBin() + " doctor --json --peer " + t.segment, &out);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = lastJsonLine(out);
  ASSERT_TRUE(j.is_object()) << out;
  auto& routes = j["peer"]["routes"];
  EXPECT_EQ(routes["cuda:0"]["transport"], "nvlink") << routes.dump();
  EXPECT_NE(routes["cuda:0"]["why"].get<std::string>().find("nvlink (rank 10)"), std::string::npos) << routes.dump();
  EXPECT_NE(routes["cuda:0"]["why"].get<std::string>().find("GPU memory"), std::string::npos) << routes.dump();
  EXPECT_NE(routes["cpu:0"]["transport"], "nvlink") << routes.dump();
  EXPECT_NE(routes["cpu:0"]["why"].get<std::string>().find("nvlink: does not move local host memory"),
            std::string::npos)
      << routes.dump();
}

TEST(nvlink, diagnosis_records_every_gpu_with_its_ordinal_and_pci_bus_id) {
  HAWSER_REQUIRE_GPU(1);
  const gpu::CudaDriver* d = testCudaDriver();
  // The bus id the driver reports for each ordinal, as nvlink records it (lower case).
  std::vector<std::string> buses;
  for (int i = 0; i < d->deviceCount(); ++i) {
    gpu::cu::Device dev = 0;
    char bus[64] = {0};
    ASSERT_EQ(d->api().DeviceGet(&dev, i), gpu::cu::kSuccess);
    ASSERT_EQ(d->api().DeviceGetPCIBusId(bus, sizeof(bus), dev), gpu::cu::kSuccess);
    std::string b = bus;
    for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    buses.push_back(b);
  }
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "gpus", "127.0.0.1", 0, gpuOptions()).ok());
  const TransportDiagnosis* nv = nullptr;
  const std::vector<TransportDiagnosis> diags = e.diagnose();
  for (auto& t : diags)
    if (t.transport == "nvlink") nv = &t;
  ASSERT_NE(nv, nullptr);
  ASSERT_TRUE(nv->installed) << nv->reason;
  ASSERT_EQ(nv->devices.size(), buses.size());
  for (size_t i = 0; i < buses.size(); ++i) {
    const DeviceRecord& r = nv->devices[i];
    EXPECT_EQ(r.kind, DeviceRecord::Kind::kGpu);
    EXPECT_EQ(r.name, fmt::format("cuda:{}", i));
    EXPECT_EQ(r.index, static_cast<int>(i));
    EXPECT_EQ(r.pci_bus_id, buses[i]);
    EXPECT_FALSE(r.pci_bus_id.empty());
    EXPECT_EQ(r.numa_node, d->numaNode(static_cast<int>(i)));
    EXPECT_TRUE(r.used);
    EXPECT_EQ(r.reason, "");
  }
  if (simulatedCuda()) {
    EXPECT_EQ(nv->devices[0].pci_bus_id, "0000:fa:00.0");  // the stand-in's numbering
  }
  // `hawser doctor --json` carries the same records.
  std::string out;
  ASSERT_EQ(sh(gpuEnvPrefix() + hawserBin() + " doctor --json", &out), 0) << out;
  nlohmann::json j = lastJsonLine(out);
  ASSERT_TRUE(j.is_object()) << out;
  bool found = false;
  for (auto& t : j["transports"]) {
    if (t["name"] != "nvlink") continue;
    found = true;
    ASSERT_EQ(t["devices"].size(), buses.size()) << t.dump();
    for (size_t i = 0; i < buses.size(); ++i) {
      EXPECT_EQ(t["devices"][i]["kind"], "gpu") << t.dump();
      EXPECT_EQ(t["devices"][i]["index"], static_cast<int>(i)) << t.dump();
      EXPECT_EQ(t["devices"][i]["pci_bus_id"], buses[i]) << t.dump();
      EXPECT_EQ(t["devices"][i]["used"], true) << t.dump();
    }
  }
  EXPECT_TRUE(found) << "doctor lists no nvlink transport: " << out;
}

TEST(nvlink, bench_json_names_nvlink_as_the_transport_that_carried_the_data) {
  HAWSER_REQUIRE_GPU(1);
  const int last = gpu::CudaDriver::get()->deviceCount() - 1;
  Served t;
  ASSERT_TRUE(t.start("cuda:0", 64 << 20));
  std::string out;
  int rc = sh(gpuEnvPrefix() + hawserBin() + " bench --target " + t.segment + " --local-location cuda:" +
                  std::to_string(last) + " --op read --block-size 1M --batch-size 4 --threads 1 --total 32M --json",
              &out);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = lastJsonLine(out);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["transports"], nlohmann::json::array({"nvlink"})) << j.dump();
  EXPECT_TRUE(j["verified"].get<bool>()) << out;
}

// The paged KV layout (tools/bench_kv.h) between GPU memory of two
// processes: one block request through nvlink, every byte verified, and the
// copy mechanism read from nvlink's gpu_copy_* counters: the one
// gpu.copy_mechanism asks for, with the kernel's CTAs.
TEST(nvlink, bench_kv_layout_is_carried_by_nvlink_verified_and_names_the_copy_mechanism) {
  HAWSER_REQUIRE_GPU(1);
  Served t;
  ASSERT_TRUE(t.start("cuda:0", 4 << 20));
  const std::pair<std::string, std::string> runs[] = {{"read", "kernel"}, {"write", "kernel"}, {"read", "per_run"}};
  for (const auto& [op, mechanism] : runs) {
    std::string out;
    int rc = sh(gpuEnvPrefix() + "HAWSER_GPU_COPY_MECHANISM=" + mechanism + " " + hawserBin() + " bench --target " +
                    t.segment +
                    " --local-location cuda:0 --layout kv --layers 2 --kv-blocks 16 --block-size 16K --rounds 2 --op " +
                    op + " --json",
                &out);
    ASSERT_EQ(rc, 0) << out;
    nlohmann::json j = lastJsonLine(out);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_EQ(j["transports"], nlohmann::json::array({"nvlink"})) << j.dump();
    EXPECT_EQ(j["local_location"], "cuda:0") << j.dump();
    EXPECT_EQ(j["chunks"], 64) << j.dump();
    EXPECT_TRUE(j["verified"].get<bool>()) << j.dump();
    EXPECT_EQ(j["verified_transfers"], 9) << j.dump();  // (1 warm-up + 2 rounds) x 3 ways
    EXPECT_EQ(j["copy_mechanism"], mechanism) << j.dump();
    if (mechanism == "kernel") {
      EXPECT_GE(j["copy_ctas_max"].get<int>(), 1) << j.dump();
    }
    EXPECT_GE(j["gpu_copy"]["gpu_copy_windows"].get<int>(), 2) << j.dump();  // a window a round at least
  }
}

}  // namespace
}  // namespace hawser::test
