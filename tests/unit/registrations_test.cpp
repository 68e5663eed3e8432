// What a transport learned when memory was registered (its Registration:
// MR keys, an export) travels with the request: the engine finds a
// request's region once, at submit or when a block plan is checked, and
// hands it with that transport's registration to prepare() with each task
// and to prepareRuns() with each window of runs; a registration torn down
// by unregister is never handed out again, and one a task in flight holds
// lives until the task is freed. The file transport (no fake: the
// transport itself) moves a request by the registration it brings and
// refuses one unregister tore down.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/engine_pair.h"
#include "common/lone_file.h"
#include "metadata/descriptor.h"
#include "transport/file/file_transport.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr size_t KiB = 1024;

uint64_t addrOf(const void* p) { return reinterpret_cast<uint64_t>(p); }

// What the fake transport's prepare() was handed, by local address of each slice.
class Seen {
 public:
  explicit Seen(FakeTransport& t) {
    t.setVerdict([this](const FakeTransport::Slice& s) {
      std::lock_guard lk(mu_);
      at_[s.local] = s.region;
      return TransferState::kCompleted;
    });
  }
  LocalRegion at(uint64_t local) {
    std::lock_guard lk(mu_);
    auto it = at_.find(local);
    EXPECT_NE(it, at_.end()) << "no slice at " << local;
    return it == at_.end() ? LocalRegion{} : it->second;
  }
  size_t size() {
    std::lock_guard lk(mu_);
    return at_.size();
  }
  void clear() {
    std::lock_guard lk(mu_);
    at_.clear();
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, LocalRegion> at_;
};

const Registration* registrationOf(FakeTransport& t, const void* region) {
  auto r = t.registeredAt(addrOf(region));
  EXPECT_NE(r, nullptr) << "the fake transport registered nothing at " << region;
  return r.get();
}

TransferStatus waitTask(TransferEngine& e, BatchID b, size_t task) {
  EXPECT_TRUE(e.waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  EXPECT_TRUE(e.getTransferStatus(b, task, st).ok());
  return st;
}

// 8 blocks of 4 KiB, alternately in the pair's local memory and in
// `second`, none contiguous with another: 8 runs, each in its own region.
std::vector<Block> alternating(EnginePair& p, Buffer& second) {
  std::vector<Block> blocks;
  for (size_t i = 0; i < 8; ++i)
    blocks.push_back({(i % 2 ? second.p : p.local(0)) + i * 4 * KiB, p.remote(i * 8 * KiB), 4 * KiB});
  return blocks;
}

// Moves `blocks` as one block request of a batch of its own.
void moveBlocks(EnginePair& p, OpCode op, const std::vector<Block>& blocks) {
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(1, b).ok());
  ASSERT_TRUE(p.init.submitBlocks(b, op, p.seg, blocks).ok());
  TransferStatus st = waitTask(p.init, b, 0);
  ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
}

}  // namespace

TEST(Registrations, each_task_brings_its_regions_registration_to_prepare) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  Buffer second(64 * KiB);
  ASSERT_TRUE(p.init.registerLocalMemory(second.p, second.n, "cpu:0", false).ok());
  const Registration* first_reg = registrationOf(*p.fake_init, p.local_mem.p);
  const Registration* second_reg = registrationOf(*p.fake_init, second.p);
  ASSERT_NE(first_reg, second_reg);
  Seen seen(*p.fake_init);
  fillPattern(p.target_mem.p, p.target_mem.n, 3);
  auto st = runBatch(p.init, p.seg,
                     {{OpCode::kRead, p.local(0), p.seg, p.remote(0), 4 * KiB},
                      {OpCode::kRead, second.p + 8 * KiB, p.seg, p.remote(16 * KiB), 4 * KiB},
                      {OpCode::kRead, p.local(32 * KiB), p.seg, p.remote(64 * KiB), 4 * KiB}});
  for (auto& s : st) ASSERT_EQ(s.s, TransferState::kCompleted) << s.error.toString();
  EXPECT_EQ(checkPattern(second.p + 8 * KiB, 4 * KiB, 3, 16 * KiB), -1);
  for (uint64_t a : {addrOf(p.local(0)), addrOf(p.local(32 * KiB))}) {
    const LocalRegion r = seen.at(a);
    EXPECT_EQ(r.registration, first_reg);
    EXPECT_EQ(r.addr, addrOf(p.local_mem.p));
    EXPECT_EQ(r.length, p.local_mem.n);
    EXPECT_EQ(r.gpu, -1);
  }
  const LocalRegion r = seen.at(addrOf(second.p + 8 * KiB));
  EXPECT_EQ(r.registration, second_reg);
  EXPECT_EQ(r.addr, addrOf(second.p));
  EXPECT_EQ(r.length, second.n);
}

TEST(Registrations, block_request_runs_bring_the_registration_of_their_own_region) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  Buffer second(64 * KiB);
  ASSERT_TRUE(p.init.registerLocalMemory(second.p, second.n, "cpu:0", false).ok());
  Seen seen(*p.fake_init);
  // Runs alternating between the two regions: one task, a child task per run.
  const std::vector<Block> blocks = alternating(p, second);
  moveBlocks(p, OpCode::kWrite, blocks);
  ASSERT_EQ(seen.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(seen.at(addrOf(blocks[i].local)).registration,
              registrationOf(*p.fake_init, i % 2 ? second.p : p.local_mem.p))
        << "block " << i;
}

TEST(Registrations, a_plan_posted_after_its_memory_was_registered_again_brings_the_new_registration) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  Buffer extra(256 * KiB);
  ASSERT_TRUE(p.init.registerLocalMemory(extra.p, extra.n, "cpu:0", false).ok());
  Seen seen(*p.fake_init);
  fillPattern(p.target_mem.p, p.target_mem.n, 7);
  PlanID plan;
  ASSERT_TRUE(p.init.prepareStrided(OpCode::kRead, p.seg, {extra.p, p.remote(0), 4 * KiB, 8 * KiB, 4 * KiB, 16}, plan)
                  .ok());
  auto post = [&] {
    seen.clear();
    std::memset(extra.p, 0, extra.n);
    BatchID b;
    EXPECT_TRUE(p.init.allocateBatchID(1, b).ok());
    Status s = p.init.postPlan(b, plan);
    EXPECT_TRUE(s.ok()) << s.toString();
    TransferStatus st = waitTask(p.init, b, 0);
    EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    EXPECT_TRUE(p.init.freeBatchID(b).ok());
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(checkPattern(extra.p + i * 8 * KiB, 4 * KiB, 7, i * 4 * KiB), -1);
  };
  post();
  auto old = p.fake_init->registeredAt(addrOf(extra.p));
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(seen.at(addrOf(extra.p)).registration, old.get());
  // Unregistered (the transport tears its registration down) and registered again.
  ASSERT_TRUE(p.init.unregisterLocalMemory(extra.p).ok());
  EXPECT_TRUE(old->torn_down.load());
  ASSERT_TRUE(p.init.registerLocalMemory(extra.p, extra.n, "cpu:0", false).ok());
  auto now = p.fake_init->registeredAt(addrOf(extra.p));
  ASSERT_NE(now, nullptr);
  ASSERT_NE(now, old);
  post();
  ASSERT_EQ(seen.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    const LocalRegion r = seen.at(addrOf(extra.p + i * 8 * KiB));
    EXPECT_EQ(r.registration, now.get()) << "run " << i << " brought a registration torn down by unregister";
  }
  post();  // the refreshed plan is kept: the same registration again
  EXPECT_EQ(seen.at(addrOf(extra.p + 8 * KiB)).registration, now.get());
  ASSERT_TRUE(p.init.releasePlan(plan).ok());
}

TEST(Registrations, a_task_in_flight_keeps_its_registration_after_unregister_until_it_is_freed) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  Buffer extra(64 * KiB);
  ASSERT_TRUE(p.init.registerLocalMemory(extra.p, extra.n, "cpu:0", false).ok());
  std::weak_ptr<const FakeTransport::Registered> held = p.fake_init->registeredAt(addrOf(extra.p));
  ASSERT_FALSE(held.expired());
  fillPattern(extra.p, 8 * KiB, 21);
  p.fake_init->hold(true);
  BatchID b;
  ASSERT_TRUE(p.init.allocateBatchID(2, b).ok());
  ASSERT_TRUE(p.init.submitTransfer(b, {{OpCode::kWrite, extra.p, p.seg, p.remote(0), 8 * KiB}}).ok());
  // Unregister returns while the task is in flight (the caller's to
  // avoid); the transport has torn its registration down, and the task
  // still holds the object, so nothing it points to is freed under it.
  ASSERT_TRUE(p.init.unregisterLocalMemory(extra.p).ok());
  {
    auto r = held.lock();
    ASSERT_NE(r, nullptr) << "the registration was freed under a task in flight";
    EXPECT_TRUE(r->torn_down.load());
  }
  // A torn-down registration is never handed out again.
  Status s = p.init.submitTransfer(b, {{OpCode::kWrite, extra.p, p.seg, p.remote(0), 8 * KiB}});
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  p.fake_init->hold(false);
  TransferStatus st = waitTask(p.init, b, 0);
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(checkPattern(p.target_mem.p, 8 * KiB, 21), -1);
  EXPECT_FALSE(held.expired());  // its task is still in the batch
  ASSERT_TRUE(p.init.freeBatchID(b).ok());
  EXPECT_TRUE(held.expired()) << "the registration outlived the last task that held it";
}

// ---- windows of runs ------------------------------------------------------------

namespace {

// A transport that moves block requests as windows of runs (caps
// run_windows), with memcpy on a worker thread, keeping what each window's
// regions brought.
class WindowTransport : public Transport {
 public:
  struct Registered : Registration {};
  ~WindowTransport() override { shutdown(); }
  const char* name() const override { return "windows"; }
  TransportCaps caps() const override { return {.memory_segments = true, .cost_rank = 0, .run_windows = true}; }
  Status install(const TransportContext&) override {
    worker_ = std::thread([this] { loop(); });
    return Status::OK();
  }
  void shutdown() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  Status registerRegion(const Region& r, nlohmann::json&, std::shared_ptr<const Registration>& out) override {
    auto reg = std::make_shared<Registered>();
    std::lock_guard lk(mu_);
    registered_[r.addr] = reg;
    out = std::move(reg);
    return Status::OK();
  }
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override {
    if (seg.kind != SegmentDesc::Kind::kMemory) return {Code::kNotSupported, "not a memory segment"};
    out = std::make_shared<PeerHandle>();
    return Status::OK();
  }
  Status newSubBatch(size_t, std::unique_ptr<SubBatch>& out) override;

  const Registration* registeredAt(const void* p) {
    std::lock_guard lk(mu_);
    auto it = registered_.find(addrOf(p));
    return it == registered_.end() ? nullptr : it->second.get();
  }
  // The registration each run's region brought, by the run's local address.
  std::map<uint64_t, const Registration*> seen() {
    std::lock_guard lk(mu_);
    return seen_;
  }

 private:
  struct Work : PreparedWork {
    RunWindow w;
  };
  struct Sub : SubBatch {
    explicit Sub(WindowTransport* o) : owner(o) {}
    Status prepare(std::span<Task* const>, std::unique_ptr<PreparedWork>&) override {
      return {Code::kNotSupported, "windows of runs only"};
    }
    Status prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) override {
      {
        std::lock_guard lk(owner->mu_);
        for (const RunRef& r : w.runs()) owner->seen_[r.local] = w.regions[r.region].registration;
      }
      auto work = std::make_unique<Work>();
      work->w = w;
      work->slices = w.count;
      out = std::move(work);
      return Status::OK();
    }
    void post(std::unique_ptr<PreparedWork> work) override {
      inflight++;
      {
        std::lock_guard lk(owner->mu_);
        owner->queue_.emplace_back(this, static_cast<Work&>(*work).w);
      }
      owner->cv_.notify_all();
    }
    void cancel() override {}
    bool idle() const override { return inflight.load() == 0; }
    WindowTransport* owner;
    std::atomic<int> inflight{0};
  };
  void loop() {
    std::unique_lock lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [sub, w] = queue_.front();
      queue_.pop_front();
      lk.unlock();
      uint64_t bytes = 0;
      for (const RunRef& r : w.runs()) {
        auto* local = reinterpret_cast<char*>(r.local);
        auto* remote = reinterpret_cast<char*>(r.remote);
        if (w.op == OpCode::kRead) std::memcpy(local, remote, r.length);
        else std::memcpy(remote, local, r.length);
        bytes += r.length;
      }
      sub->inflight--;
      w.sink->runsEnded(w.count, w.count, bytes, TransferState::kCompleted, Status::OK());
      lk.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Sub*, RunWindow>> queue_;
  bool stop_ = false;
  std::thread worker_;
  std::map<uint64_t, std::shared_ptr<Registered>> registered_;
  std::map<uint64_t, const Registration*> seen_;
};

Status WindowTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<Sub>(this);
  return Status::OK();
}

}  // namespace

TEST(Registrations, windows_of_runs_bring_each_regions_registration) {
  EnginePair p(1 << 20, 1 << 20, false);
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  Buffer second(64 * KiB);
  ASSERT_TRUE(p.init.registerLocalMemory(second.p, second.n, "cpu:0", false).ok());
  // Installed after both regions were registered: it registers them then.
  auto t = std::make_unique<WindowTransport>();
  WindowTransport* windows = t.get();
  ASSERT_TRUE(detail::EngineAccess::of(p.init).installTransport(std::move(t)).ok());
  ASSERT_TRUE(p.init.closeSegment(p.seg).ok());
  ASSERT_TRUE(p.init.openSegment(p.target.segmentName(), p.seg).ok());
  RouteExplanation why;
  ASSERT_TRUE(p.init.explainRoute(p.seg, "cpu:0", why).ok());
  ASSERT_EQ(why.transport, "windows") << why.why;
  const Registration* first_reg = windows->registeredAt(p.local_mem.p);
  const Registration* second_reg = windows->registeredAt(second.p);
  ASSERT_NE(first_reg, nullptr);
  ASSERT_NE(second_reg, nullptr);
  fillPattern(p.target_mem.p, p.target_mem.n, 9);
  const std::vector<Block> blocks = alternating(p, second);
  moveBlocks(p, OpCode::kRead, blocks);
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(checkPattern(blocks[i].local, 4 * KiB, 9, i * 8 * KiB), -1) << "block " << i;
  auto seen = windows->seen();
  ASSERT_EQ(seen.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(seen[addrOf(blocks[i].local)], i % 2 ? second_reg : first_reg) << "block " << i;
}

// ---- the file transport ------------------------------------------------------------

// The file transport moves a request by what its registration says (the
// region's GPU, io_uring's fixed buffers of it), never by what it would
// find at the address now. A region unregistered and registered again at
// the same address is another registration: a task or window that still
// brings the one unregister tore down is refused, and moves nothing.
TEST(Registrations, the_file_transport_moves_a_request_by_its_registration_and_refuses_one_torn_down) {
  TempDir dir;
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 1 << 20, 5));
  const bool uring = uringUnavailableReason().empty();
  LoneFile f(path, {{"file.engine", uring ? "uring" : "posix"}});
  ASSERT_TRUE(f.status.ok()) << f.status.toString();
  Buffer mem(256 * KiB);
  LocalRegion first, second;
  ASSERT_TRUE(f.registerRegion(mem.p, mem.n, "cpu:0", first).ok());
  ASSERT_NE(first.registration, nullptr) << "the file transport returned no registration";
  Status s = f.move(OpCode::kRead, mem.p, 0, 64 * KiB, first);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(mem.p, 64 * KiB, 5, 0), -1);

  // Torn down, and the same memory registered again.
  ASSERT_TRUE(f.unregister(mem.p, mem.n).ok());
  ASSERT_TRUE(f.registerRegion(mem.p, mem.n, "cpu:0", second).ok());
  ASSERT_NE(second.registration, first.registration);
  std::memset(mem.p, 0, mem.n);
  s = f.move(OpCode::kRead, mem.p, 64 * KiB, 64 * KiB, first);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  EXPECT_NE(s.message().find("unregistered since the request was checked"), std::string::npos) << s.message();
  // A window whose second run brings the old registration: refused whole.
  const LocalRegion mixed[] = {second, first};
  s = f.moveRuns(OpCode::kRead, {{addrOf(mem.p), 0, 4 * KiB, -1, 0}, {addrOf(mem.p) + 8 * KiB, 8 * KiB, 4 * KiB, -1, 1}},
                 mixed);
  EXPECT_EQ(s.code(), Code::kNotRegistered) << s.toString();
  EXPECT_NE(s.message().find("run 1: "), std::string::npos) << s.message();
  EXPECT_EQ(std::count(mem.p, mem.p + mem.n, 0), static_cast<long>(mem.n)) << "a refused request moved bytes";

  // The new registration moves them, as a task and as a window.
  ASSERT_TRUE((s = f.move(OpCode::kRead, mem.p, 64 * KiB, 64 * KiB, second)).ok()) << s.toString();
  EXPECT_EQ(checkPattern(mem.p, 64 * KiB, 5, 64 * KiB), -1);
  const LocalRegion now[] = {second};
  s = f.moveRuns(OpCode::kRead,
                 {{addrOf(mem.p) + 128 * KiB, 0, 4 * KiB, -1, 0}, {addrOf(mem.p) + 136 * KiB, 8 * KiB, 4 * KiB, -1, 0}},
                 now);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(mem.p + 128 * KiB, 4 * KiB, 5, 0), -1);
  EXPECT_EQ(checkPattern(mem.p + 136 * KiB, 4 * KiB, 5, 8 * KiB), -1);
  // io_uring's fixed buffers of the region come with the registration: once
  // the piece the first read asked for is registered (in the background),
  // reads that bring it use it.
  if (uring) {
    const uint64_t before = file::fileStatsOf(f.transport().stats()).fixed_buffer_ops;
    EXPECT_TRUE(eventually([&] {
      return f.move(OpCode::kRead, mem.p, 0, 64 * KiB, second).ok() &&
             file::fileStatsOf(f.transport().stats()).fixed_buffer_ops > before;
    })) << "no read used the registration's fixed buffer";
  }
  ASSERT_TRUE(f.unregister(mem.p, mem.n).ok());
}
