// The file transport's sub-batch verbs: prepare, post, cancel, idle, free.
// See file_sub_batch.h.
#include "transport/file/file_sub_batch.h"

#include <algorithm>

#include <fmt/format.h>

#include "transport/file/cufile_engine.h"
#include "transport/file/file_plan.h"
#include "transport/file/file_transport.h"

namespace hawser::file {

FileSubBatch::FileSubBatch(FileTransport* owner) : owner_(owner), slices_(std::make_unique<BatchSlices>()) {
  open_.direct = owner_->settings_.direct;
  open_.engine_for = [owner](bool direct) { return owner->engineFor(direct); };
  owner_->inflight_->add(slices_.get());
}

FileSubBatch::~FileSubBatch() { owner_->inflight_->retire(std::move(slices_)); }

Status FileSubBatch::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->down_.load()) return {Code::kUnavailable, "file transport is not running"};
  const uint64_t max_io_size = owner_->settings_.max_io_size;
  auto work = std::make_unique<FileWork>();
  work->tasks.reserve(tasks.size());
  std::vector<FileSpan> spans;
  std::vector<Piece> pieces;
  bool staged = false;
  for (Task* task : tasks) {
    auto* peer = static_cast<FilePeer*>(task->peer());
    if (!peer)
      return {Code::kInternal, fmt::format("file transport got task {} without a file segment handle", task->id())};
    const TransferRequest& r = task->request();
    const bool write = r.opcode == OpCode::kWrite;
    Status s = coverRange(peer->lengths(), r.target_offset, r.length, spans);
    if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", peer->segment(), s.message())};
    // GPU memory: cuFile or staging, decided per descriptor (file_gpu.cpp).
    int device = -1;
    const bool gpu = owner_->gpuMemory(r.source, r.length, device);
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
    CutTask& ct = work->tasks.emplace_back();
    ct.task = task;
    for (const FileSpan& span : spans) {
      std::shared_ptr<OpenFile> f, plain;
      s = peer->acquire(span.file, write ? OpenMode::kWrite : OpenMode::kRead, open_, f);
      if (!s.ok()) return s;
      Route route = Route::kHost, plain_route = Route::kHost;
      if (!(s = routeOf(f, route)).ok()) return s;
      uint64_t walign = 1, max_io = max_io_size;
      if (write && f->direct) {
        walign = std::max(f->off_align, kPage);
        max_io = alignUp(max_io_size, walign);
      }
      pieces.clear();
      cutSpan(span, max_io, walign, pieces);
      for (const Piece& p : pieces) {
        Slice sl;
        sl.write = write;
        sl.user = static_cast<char*>(r.source) + p.req_off;
        sl.len = p.len;
        sl.off = p.file_off;
        sl.io_off = p.file_off;
        sl.io_len = p.len;
        sl.device = device;
        const auto addr = reinterpret_cast<uint64_t>(sl.user);
        if (p.buffered) {
          // An unaligned write head/tail: through the page cache (for GPU
          // memory, by cuFile on that descriptor, or staged).
          if (!plain) {
            s = peer->acquire(span.file, OpenMode::kWriteBuffered, open_, plain);
            if (!s.ok()) return s;
            if (!(s = routeOf(plain, plain_route)).ok()) return s;
          }
          sl.file = plain;
          sl.buffered = true;
          sl.route = plain_route;
        } else {
          sl.file = f;
          sl.route = route;
          if (!f->direct) {
            sl.buffered = true;
          } else if (route == Route::kCufile) {
            // The library takes any address, offset and length.
          } else if (write) {
            // Host: offset and length are aligned by the cut; staging slots are aligned.
            sl.bounce = route == Route::kHost && addr % f->mem_align != 0;
          } else if ((route == Route::kHost && addr % f->mem_align != 0) || p.file_off % f->off_align != 0 ||
                     p.len % f->off_align != 0) {
            // Host: through a bounce buffer; staged: the slot takes the aligned superset.
            sl.bounce = route == Route::kHost;
            sl.io_off = alignDown(p.file_off, f->off_align);
            sl.io_len = alignUp(p.file_off + p.len, f->off_align) - sl.io_off;
          }
        }
        if (sl.route == Route::kCufile) {
          sl.engine = cf;
          sl.token = sl.file->cufile_token;
        } else {
          sl.engine = sl.file->engine;
          sl.token = sl.file->token;
        }
        if (sl.route == Route::kStaged) {
          staged = true;
          if (sl.io_len > owner_->stagingSlotSize())
            return {Code::kInvalidArgument,
                    fmt::format("segment '{}': a staged slice of {} bytes of '{}' exceeds a staging slot ({} "
                                "bytes; the file's O_DIRECT alignment is {})",
                                peer->segment(), sl.io_len, sl.file->path, owner_->stagingSlotSize(), f->off_align)};
        }
        ct.slices.push_back(std::move(sl));
      }
    }
    work->slices += ct.slices.size();
  }
  if (staged) {
    Status s = owner_->ensureStaging();
    if (!s.ok()) return s;
  }
  // Everything validated: nothing is posted until post().
  for (auto& ct : work->tasks) ct.task->setSliceCount(static_cast<uint32_t>(ct.slices.size()));
  out = std::move(work);
  return Status::OK();
}

void FileSubBatch::post(std::unique_ptr<PreparedWork> work) {
  owner_->inflight_->post(*slices_, static_cast<FileWork&>(*work).tasks);
}

void FileSubBatch::cancel() { owner_->inflight_->cancel(*slices_, "cancelTransfer"); }

bool FileSubBatch::idle() const { return owner_->inflight_->idle(*slices_); }

}  // namespace hawser::file
