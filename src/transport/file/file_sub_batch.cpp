// The file transport's sub-batch verbs: prepare, post, cancel, idle, free.
// See file_sub_batch.h.
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

namespace {

// The parts of a window that go to one file in one direction from one kind
// of memory (host, or one GPU): they may share I/Os.
struct Group {
  FilePeer* peer = nullptr;
  uint32_t file = 0;
  bool write = false;
  int device = -1;  // GPU of the memory, -1: host
  std::vector<RunPart> parts;
};

}  // namespace

Status FileSubBatch::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->down_.load()) return {Code::kUnavailable, "file transport is not running"};
  const FileSettings& st = owner_->settings_;
  auto work = std::make_unique<FileWork>();
  PreparedIos& pw = work->ios;
  pw.tasks.reserve(tasks.size());
  // Each task's parts, grouped.
  std::vector<Group> groups;
  std::vector<FileSpan> spans;
  size_t hint = 0;
  for (Task* task : tasks) {
    auto* peer = static_cast<FilePeer*>(task->peer());
    if (!peer)
      return {Code::kInternal, fmt::format("file transport got task {} without a file segment handle", task->id())};
    const TransferRequest& r = task->request();
    Status s = coverRange(peer->lengths(), r.target_offset, r.length, spans);
    if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", peer->segment(), s.message())};
    int device = -1;
    if (!owner_->gpuMemory(r.source, r.length, device)) device = -1;
    const bool write = r.opcode == OpCode::kWrite;
    const auto t = static_cast<uint32_t>(pw.tasks.size());
    pw.tasks.push_back(task);
    for (const FileSpan& span : spans) {
      auto same = [&](const Group& g) {
        return g.peer == peer && g.file == span.file && g.write == write && g.device == device;
      };
      if (hint >= groups.size() || !same(groups[hint])) {
        hint = std::find_if(groups.begin(), groups.end(), same) - groups.begin();
        if (hint == groups.size()) groups.push_back(Group{peer, span.file, write, device, {}});
      }
      groups[hint].parts.push_back(
          RunPart{span.file_off, span.len, reinterpret_cast<uint64_t>(r.source) + span.req_off, t});
    }
  }
  // Each group: its descriptor(s) and route, then its I/Os.
  std::vector<uint32_t> slices_of(pw.tasks.size(), 0);
  std::vector<Extent> extents;
  std::vector<Member> members;
  bool staged = false;
  for (Group& g : groups) {
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
        slices_of[m.index]++;
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
  // Everything validated: nothing is posted until post().
  work->slices = pw.slices.size();
  for (size_t t = 0; t < pw.tasks.size(); ++t) pw.tasks[t]->setSliceCount(slices_of[t]);
  out = std::move(work);
  return Status::OK();
}

void FileSubBatch::post(std::unique_ptr<PreparedWork> work) {
  owner_->inflight_->post(*slices_, static_cast<FileWork&>(*work).ios);
}

void FileSubBatch::cancel() { owner_->inflight_->cancel(*slices_, "cancelTransfer"); }

bool FileSubBatch::idle() const { return owner_->inflight_->idle(*slices_); }

}  // namespace hawser::file
