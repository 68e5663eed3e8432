// The file transport's sub-batch verbs: prepare (tasks) and prepareRuns (a
// block request's window of runs), both through makeIos; post, cancel, idle,
// free. See file_sub_batch.h.
#include "transport/file/file_sub_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "transport/file/cufile_engine.h"
#include "transport/file/file_coalesce.h"
#include "transport/file/file_plan.h"
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

// What one window's units (tasks, or runs) ask, grouped.
struct FileSubBatch::Parts {
  std::vector<Group> groups;
  std::vector<FileSpan> spans;  // scratch
  size_t hint = 0;              // the group the last part went to
};

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
  for (uint32_t t = 0; t < tasks.size(); ++t) {
    Task* task = tasks[t];
    auto* peer = static_cast<FilePeer*>(task->peer());
    if (!peer)
      return {Code::kInternal, fmt::format("file transport got task {} without a file segment handle", task->id())};
    const TransferRequest& r = task->request();
    int device = -1;
    if (!owner_->gpuMemory(r.source, r.length, device)) device = -1;
    Status s = addParts(parts, peer, r.opcode == OpCode::kWrite, r.target_offset, r.length,
                        reinterpret_cast<uint64_t>(r.source), device, t);
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
  const bool write = w.op == OpCode::kWrite;
  for (uint32_t i = 0; i < runs.size(); ++i) {
    const RunRef& r = runs[i];
    // The GPU of the run's memory was found when the request was checked
    // (asked here only if the window came without its regions).
    int device = -1;
    if (r.region < w.regions.size())
      device = w.regions[r.region].gpu;
    else if (!owner_->gpuMemory(reinterpret_cast<void*>(r.local), r.length, device))
      device = -1;
    Status s = addParts(parts, peer, write, r.remote, r.length, r.local, device, i);
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
    CufileEngine* cf = gpu ? owner_->cufileEngine() : nullptr;
    auto routeOf = [&](const std::shared_ptr<OpenFile>& file, Route& rt) -> Status {
      if (!gpu) {
        rt = Route::kHost;
        return Status::OK();
      }
      Status rs = owner_->gpuRoute(*file, cf, rt);
      if (!rs.ok()) return {rs.code(), fmt::format("segment '{}': {}", peer->segment(), rs.message())};
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
      if (io.route == Route::kCufile) {
        io.engine = cf;
        io.token = io.file->cufile_token;
      } else {
        io.engine = io.file->engine;
        io.token = io.file->token;
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
