// The file transport's sub-batch verbs: prepare (tasks) and prepareRuns (a
// block request's window of runs), both through makeIos; post, cancel, idle,
// free. See file_sub_batch.h.
#include "transport/file/file_sub_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "transport/file/cufile_engine.h"
#include "transport/file/file_coalesce.h"
#include "transport/file/file_plan.h"
#include "transport/file/file_registration.h"
#include "transport/file/file_transport.h"

namespace hawser::file {

FileSubBatch::FileSubBatch(FileTransport* owner) : owner_(owner), slices_(std::make_unique<BatchSlices>()) {
  open_.direct = owner_->settings_.direct;
  open_.engine_for = [owner](bool direct) { return owner->engineFor(direct); };
  owner_->inflight_->add(slices_.get());
}

FileSubBatch::~FileSubBatch() { owner_->inflight_->retire(std::move(slices_)); }

// The parts of a window that go to one file in one direction from one kind
// of memory (host, or one GPU): they may share I/Os.
struct FileSubBatch::Group {
  FilePeer* peer = nullptr;
  uint32_t file = 0;
  bool write = false;
  int device = -1;  // GPU of the memory, -1: host
  std::vector<RunPart> parts;
};

// What one window's units (tasks, or runs) ask, grouped, and where each
// unit's registration is: the task's region, or the run's region of the window.
struct FileSubBatch::Parts {
  std::vector<Group> groups;
  std::vector<FileSpan> spans;  // scratch
  size_t hint = 0;              // the group the last part went to
  std::span<Task* const> tasks;
  std::span<const RunRef> runs;
  std::span<const LocalRegion> regions;

  // Checked by prepare/prepareRuns before the unit's parts were added.
  const FileRegistration& registrationOf(uint32_t unit) const {
    const LocalRegion& r = tasks.empty() ? regions[runs[unit].region] : tasks[unit]->region();
    return *static_cast<const FileRegistration*>(r.registration);
  }
};

namespace {

// The file transport's registration of `r`, or why it cannot be used: none
// (not registered with this transport), or torn down by unregisterMemory
// after the request was checked.
Status usable(const LocalRegion& r, const FileRegistration*& out) {
  out = static_cast<const FileRegistration*>(r.registration);
  if (out && !out->deregistered.load(std::memory_order_acquire)) return Status::OK();
  return {Code::kNotRegistered, out ? fmt::format("local region [{:#x}, +{}) was unregistered since the request was "
                                                  "checked",
                                                  r.addr, r.length)
                                    : fmt::format("local region [{:#x}, +{}) has no registration of the file "
                                                  "transport",
                                                  r.addr, r.length)};
}

}  // namespace

Status FileSubBatch::addParts(Parts& p, FilePeer* peer, bool write, uint64_t offset, uint64_t length, uint64_t mem,
                              int device, uint32_t unit) {
  Status s = coverRange(peer->lengths(), offset, length, p.spans);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", peer->segment(), s.message())};
  for (const FileSpan& span : p.spans) {
    auto same = [&](const Group& g) {
      return g.peer == peer && g.file == span.file && g.write == write && g.device == device;
    };
    if (p.hint >= p.groups.size() || !same(p.groups[p.hint])) {
      p.hint = std::find_if(p.groups.begin(), p.groups.end(), same) - p.groups.begin();
      if (p.hint == p.groups.size()) p.groups.push_back(Group{peer, span.file, write, device, {}});
    }
    p.groups[p.hint].parts.push_back(RunPart{span.file_off, span.len, mem + span.req_off, unit});
  }
  return Status::OK();
}

Status FileSubBatch::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->down_.load()) return {Code::kUnavailable, "file transport is not running"};
  auto work = std::make_unique<FileWork>();
  PreparedIos& pw = work->ios;
  pw.tasks.assign(tasks.begin(), tasks.end());
  Parts parts;
  parts.tasks = tasks;
  for (uint32_t t = 0; t < tasks.size(); ++t) {
    Task* task = tasks[t];
    auto* peer = static_cast<FilePeer*>(task->peer());
    if (!peer)
      return {Code::kInternal, fmt::format("file transport got task {} without a file segment handle", task->id())};
    const TransferRequest& r = task->request();
    // The local region and what registering it set up came with the task.
    const FileRegistration* reg = nullptr;
    Status s = usable(task->region(), reg);
    if (!s.ok()) return {s.code(), fmt::format("requests[{}]: {}", task->id(), s.message())};
    s = addParts(parts, peer, r.opcode == OpCode::kWrite, r.target_offset, r.length,
                 reinterpret_cast<uint64_t>(r.source), reg->gpu, t);
    if (!s.ok()) return s;
  }
  Status s = makeIos(parts, pw);
  if (!s.ok()) return s;
  // Everything validated: nothing is posted until post().
  work->slices = pw.slices.size();
  for (size_t t = 0; t < pw.tasks.size(); ++t) pw.tasks[t]->setSliceCount(pw.unit_slices[t]);
  out = std::move(work);
  return Status::OK();
}

Status FileSubBatch::prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->down_.load()) return {Code::kUnavailable, "file transport is not running"};
  auto* peer = static_cast<FilePeer*>(w.peer);
  if (!peer || !w.sink) return {Code::kInternal, "file transport got a window of runs without a file segment handle"};
  auto work = std::make_unique<FileWork>();
  PreparedIos& pw = work->ios;
  const std::span<const RunRef> runs = w.runs();
  pw.sink = w.sink;
  pw.runs = runs.size();
  Parts parts;
  parts.runs = runs;
  parts.regions = w.regions;
  const bool write = w.op == OpCode::kWrite;
  // Each run's region came with the window, with what registering it set
  // up: checked once per change of region (runs mostly follow each other
  // in one), never looked up.
  uint32_t last = UINT32_MAX;
  const FileRegistration* reg = nullptr;
  for (uint32_t i = 0; i < runs.size(); ++i) {
    const RunRef& r = runs[i];
    if (r.region != last) {
      if (r.region >= w.regions.size())
        return {Code::kInternal, fmt::format("blocks: run {} names local region {} of a window of {}", i, r.region,
                                             w.regions.size())};
      Status s = usable(w.regions[r.region], reg);
      if (!s.ok()) return {s.code(), fmt::format("blocks: run {}: {}", i, s.message())};
      last = r.region;
    }
    Status s = addParts(parts, peer, write, r.remote, r.length, r.local, reg->gpu, i);
    if (!s.ok()) return {s.code(), fmt::format("blocks: run {}: {}", i, s.message())};
  }
  Status s = makeIos(parts, pw);
  if (!s.ok()) return s;
  work->slices = pw.slices.size();
  out = std::move(work);
  return Status::OK();
}

Status FileSubBatch::makeIos(Parts& parts, PreparedIos& pw) {
  const FileSettings& st = owner_->settings_;
  pw.unit_slices.assign(pw.sink ? pw.runs : pw.tasks.size(), 0);
  std::vector<Extent> extents;
  std::vector<Member> members;
  bool staged = false;
  for (Group& g : parts.groups) {
    FilePeer* peer = g.peer;
    const bool gpu = g.device >= 0;
    // GPUDirect as selection saw it (this submit's): what this I/O finds
    // out against it (the library's open, cuFile refusing the file) is a
    // fallback the engine could not count at submit.
    bool gds_expected = gpu && owner_->gds_state_.load() && !owner_->variantDeclines(*peer).declined();
    CufileEngine* cf = gpu ? owner_->cufileEngine() : nullptr;
    auto routeOf = [&](const std::shared_ptr<OpenFile>& file, Route& rt) -> Status {
      if (!gpu) {
        rt = Route::kHost;
        return Status::OK();
      }
      Status rs = owner_->gpuRoute(*peer, *file, cf, rt);
      if (!rs.ok()) return {rs.code(), fmt::format("segment '{}': {}", peer->segment(), rs.message())};
      if (gds_expected)
        if (RouteDecline now = owner_->variantDeclines(*peer); now.declined()) {
          owner_->gdsFellBack(*peer, now);
          gds_expected = false;
        }
      return Status::OK();
    };
    std::shared_ptr<OpenFile> f, plain;
    Status s = peer->acquire(g.file, g.write ? OpenMode::kWrite : OpenMode::kRead, open_, f);
    if (!s.ok()) return s;
    Route route = Route::kHost, plain_route = Route::kHost;
    if (!(s = routeOf(f, route)).ok()) return s;
    CoalesceRule rule;
    rule.max_io = st.max_io_size;
    if (g.write && f->direct) {
      rule.write_align = std::max(f->off_align, kPage);
      rule.max_io = alignUp(st.max_io_size, rule.write_align);
    }
    // cuFile takes one buffer per entry: its I/Os carry one slice each.
    rule.join = st.coalesce && route != Route::kCufile;
    rule.max_gap = g.write ? 0 : st.coalesce_gap;
    extents.clear();
    members.clear();
    coalesce(g.parts, rule, extents, members);
    for (const Extent& e : extents) {
      const std::span<const Member> ms(members.data() + e.first, e.count);
      FileIo& io = pw.ios.emplace_back();
      io.write = g.write;
      io.device = g.device;
      io.first = pw.slices.size();
      io.count = e.count;
      io.data_off = io.io_off = e.file_off;
      io.data_len = io.io_len = e.len;
      for (const Member& m : ms) {
        pw.slices.push_back(Slice{nullptr, nullptr, nullptr, reinterpret_cast<char*>(m.mem), m.file_off, m.len, m.index});
        pw.unit_slices[m.index]++;
        io.bytes += m.len;
      }
      const size_t iovs = iovecsNeeded(ms);
      bool vectored = iovs > 1;  // one buffer needs no iovec
      if (e.buffered) {
        // An unaligned write head/tail: through the page cache (for GPU
        // memory, by cuFile on that descriptor, or staged).
        if (!plain) {
          s = peer->acquire(g.file, OpenMode::kWriteBuffered, open_, plain);
          if (!s.ok()) return s;
          if (!(s = routeOf(plain, plain_route)).ok()) return s;
        }
        io.file = plain;
        io.buffered = true;
        io.route = plain_route;
      } else {
        io.file = f;
        io.route = route;
        io.buffered = !f->direct;
      }
      if (io.route != Route::kHost) {
        vectored = false;  // GPU memory: cuFile (one slice) or the staging slot
        if (io.route == Route::kStaged && !io.write && !io.buffered) {
          // The slot takes the aligned superset.
          io.io_off = alignDown(e.file_off, f->off_align);
          io.io_len = alignUp(e.file_off + e.len, f->off_align) - io.io_off;
        }
      } else if (iovs > kMaxIovecs ||
                 (!io.buffered && !directAligned(ms, io.file->mem_align, io.file->off_align))) {
        // Through a bounce buffer: reads round out to the alignment (a write
        // is aligned by the cut; page-cache I/O needs none).
        vectored = false;
        io.bounce = true;
        const uint64_t a = io.buffered ? 1 : io.file->off_align;
        io.io_off = alignDown(e.file_off, a);
        io.io_len = alignUp(e.file_off + e.len, a) - io.io_off;
      }
      if (vectored) buildIovecs(ms, owner_->discard_, io.iov);
      // One buffer straight from the slice's memory: what the engine set
      // up for it comes with the registration (io_uring's fixed buffers,
      // cuFile's buffer registration).
      const FileRegistration& reg = parts.registrationOf(ms.front().index);
      if (io.route == Route::kCufile) {
        io.engine = cf;
        io.token = io.file->cufile_token;
        io.memory = reg.cufile.load(std::memory_order_acquire);
      } else {
        io.engine = io.file->engine;
        io.token = io.file->token;
        if (io.route == Route::kHost && !vectored && !io.bounce) io.memory = reg.fixed.get();
      }
      if (io.route == Route::kStaged) {
        staged = true;
        if (io.io_len > owner_->stagingSlotSize())
          return {Code::kInvalidArgument,
                  fmt::format("segment '{}': a staged I/O of {} bytes of '{}' exceeds a staging slot ({} bytes; the "
                              "file's O_DIRECT alignment is {})",
                              peer->segment(), io.io_len, io.file->path, owner_->stagingSlotSize(), f->off_align)};
      }
    }
  }
  if (staged) {
    Status s = owner_->ensureStaging();
    if (!s.ok()) return s;
  }
  return Status::OK();
}

void FileSubBatch::post(std::unique_ptr<PreparedWork> work) {
  owner_->inflight_->post(*slices_, static_cast<FileWork&>(*work).ios);
}

void FileSubBatch::cancel() { owner_->inflight_->cancel(*slices_, "cancelTransfer"); }

bool FileSubBatch::idle() const { return owner_->inflight_->idle(*slices_); }

}  // namespace hawser::file
