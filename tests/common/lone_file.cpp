// See lone_file.h.
#include "common/lone_file.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/task.h"
#include "common/util.h"
#include "transport/file/file_transport.h"

namespace hawser::test {

namespace {

constexpr auto kWait = std::chrono::seconds(60);

// Told when the one task ends.
struct Owner final : TaskOwner {
  void taskFinished(size_t) override {
    std::lock_guard lk(mu);
    done = true;
    cv.notify_all();
  }
  bool wait() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, kWait, [&] { return done; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

// A window's runs and how they ended.
struct Runs final : RunSource, RunSink {
  std::span<const RunRef> runs() override { return refs; }
  void runsEnded(size_t n, size_t completed, uint64_t, TransferState state, const Status& error) override {
    std::lock_guard lk(mu);
    ended += n;
    if (completed < n && first_error.ok())
      first_error = error.ok() ? Status(Code::kInternal, fmt::format("runs ended {}", stateName(state))) : error;
    cv.notify_all();
  }
  bool wait() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, kWait, [&] { return ended == refs.size(); });
  }
  std::vector<RunRef> refs;
  std::mutex mu;
  std::condition_variable cv;
  size_t ended = 0;
  Status first_error;
};

}  // namespace

LoneFile::LoneFile(const std::string& path, const std::map<std::string, std::string>& config)
    : t_(std::make_unique<file::FileTransport>()) {
  for (const auto& [k, v] : config) cfg_.set(k, v);
  TransportContext ctx;
  ctx.config = &cfg_;
  ctx.registry = &registry_;
  ctx.server_name = "lone-file";
  if (!(status = t_->install(ctx)).ok()) return;
  seg_ = std::make_shared<SegmentDesc>();
  if (!(status = t_->resolveSegment("file://" + path, *seg_)).ok()) return;
  status = t_->openPeer(*seg_, peer_);
}

LoneFile::~LoneFile() { t_->shutdown(); }

Status LoneFile::registerRegion(void* p, size_t n, const std::string& location, LocalRegion& out) {
  Region r;
  r.addr = reinterpret_cast<uint64_t>(p);
  r.length = n;
  r.location = location;
  r.remote_accessible = false;
  r.gpu = gpuOrdinalOf(location);
  r.seq = ++seq_;
  nlohmann::json attrs;
  std::shared_ptr<const Registration> reg;
  Status s = t_->registerRegion(r, attrs, reg);
  if (!s.ok()) return s;
  auto regs = std::make_shared<Registrations>();
  if (reg) regs->emplace_back(t_.get(), std::move(reg));
  out = LocalRegion{};
  out.addr = r.addr;
  out.length = r.length;
  out.gpu = r.gpu;
  out.seq = r.seq;
  out.registrations = std::move(regs);
  out.pick(t_.get());
  return Status::OK();
}

Status LoneFile::move(OpCode op, void* local, uint64_t offset, uint64_t len, const LocalRegion& region) {
  std::unique_ptr<SubBatch> sb;
  Status s = t_->newSubBatch(1, sb);
  if (!s.ok()) return s;
  Owner owner;
  Task task;
  task.attach(&owner);
  task.reset(TransferRequest{op, local, 0, offset, len}, 0, seg_, peer_, -1);
  task.setRegion(&region);
  Task* tasks[] = {&task};
  std::unique_ptr<PreparedWork> work;
  if (!(s = sb->prepare(tasks, work)).ok()) return s;
  task.markSubmitted();
  sb->post(std::move(work));
  if (!owner.wait()) return {Code::kTimeout, "the task did not end"};
  if (!eventually([&] { return sb->idle(); }, kWait)) return {Code::kTimeout, "the sub-batch never became idle"};
  const TransferStatus st = task.status();
  if (st.s == TransferState::kCompleted) return Status::OK();
  return st.error.ok() ? Status(Code::kInternal, fmt::format("the task ended {}", stateName(st.s))) : st.error;
}

Status LoneFile::moveRuns(OpCode op, std::vector<RunRef> runs, std::span<const LocalRegion> regions) {
  std::unique_ptr<SubBatch> sb;
  Status s = t_->newSubBatch(runs.size(), sb);
  if (!s.ok()) return s;
  Runs rs;
  rs.refs = std::move(runs);
  RunWindow w;
  w.op = op;
  w.peer = peer_.get();
  w.segment = seg_.get();
  w.count = rs.refs.size();
  w.source = &rs;
  w.regions = regions;
  w.sink = &rs;
  std::unique_ptr<PreparedWork> work;
  if (!(s = sb->prepareRuns(w, work)).ok()) return s;
  sb->post(std::move(work));
  if (!rs.wait()) return {Code::kTimeout, "the runs did not end"};
  if (!eventually([&] { return sb->idle(); }, kWait)) return {Code::kTimeout, "the sub-batch never became idle"};
  std::lock_guard lk(rs.mu);
  return rs.first_error;
}

}  // namespace hawser::test
