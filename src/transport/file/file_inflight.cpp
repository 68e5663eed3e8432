// Slices in flight: cookies, completions, cancel, quarantine, watchdog.
// See file_inflight.h.
#include "transport/file/file_inflight.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/file/file_coalesce.h"
#include "transport/file/file_handles.h"
#include "transport/file/file_counters.h"
#include "transport/file/gpu_staging.h"

namespace hawser::file {

namespace {
const char* opName(bool write) { return write ? "write" : "read"; }
}  // namespace

// ---- cookies -------------------------------------------------------------------

uint64_t CookieTable::add(FileIo* io) {
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(slots_.size());
    slots_.push_back(nullptr);
    gens_.push_back(0);
  }
  slots_[idx] = io;
  gens_[idx] = (gens_[idx] + 1) & 0x3fffffff;
  // One-based: cookie 0 never names an I/O.
  return (static_cast<uint64_t>(gens_[idx]) << 32) | (static_cast<uint64_t>(idx) + 1);
}

void CookieTable::remove(uint64_t cookie) {
  uint32_t idx = static_cast<uint32_t>(cookie & 0xffffffffu) - 1;
  slots_[idx] = nullptr;
  free_.push_back(idx);
}

FileIo* CookieTable::find(uint64_t cookie) const {
  uint64_t low = cookie & 0xffffffffu;
  if (low == 0 || low > slots_.size()) return nullptr;
  uint32_t idx = static_cast<uint32_t>(low - 1);
  if (gens_[idx] != static_cast<uint32_t>(cookie >> 32)) return nullptr;
  return slots_[idx];
}

// ---- what to do once the lock is released ----------------------------------------

struct Inflight::Outbox {
  struct EngineWork {
    IoEngine* engine;
    std::vector<IoOp> ops;
    std::vector<uint64_t> cancels;
  };
  struct Copy {
    char* dst;
    const char* src;
    uint64_t len;
  };
  struct GpuCopy {
    int device;
    bool to_gpu;
    std::vector<gpu::CopyRun> runs;
    uint64_t cookie;
  };
  struct Report {
    Task* task;
    TransferState state;
    uint64_t bytes;
    Status error;
  };
  // A run whose last slice ended.
  struct RunEnd {
    RunSink* sink;
    TransferState state;
    uint64_t bytes;
    Status error;
  };
  std::vector<EngineWork> engines;  // one or two
  std::vector<Copy> copy_in;        // user -> bounce, before the write is posted
  std::vector<GpuCopy> gpu_copies;  // staging slot <-> GPU, one batched copy per I/O, on a copy lane
  std::vector<Report> reports;
  std::vector<RunEnd> run_ends;
  std::vector<std::unique_ptr<BatchSlices>> destroy;

  EngineWork& of(IoEngine* e) {
    for (auto& w : engines)
      if (w.engine == e) return w;
    return engines.emplace_back(EngineWork{e, {}, {}});
  }
  bool empty() const {
    return engines.empty() && reports.empty() && run_ends.empty() && destroy.empty() && gpu_copies.empty();
  }
};

// ---- lifecycle -------------------------------------------------------------------

Inflight::~Inflight() {
  stopWatchdog();
  std::vector<std::unique_ptr<BatchSlices>> held;
  {
    std::lock_guard lk(mu_);
    held.swap(quarantine_);
    if (leaked_) {
      pool_.leak();
      for (auto& sb : held) (void)sb.release();
      return;
    }
    pool_.releaseAll();
  }
  held.clear();  // outside the lock: closing descriptors talks to the engines
}

void Inflight::configure(IoEngine* uring, std::chrono::milliseconds grace, size_t bounce_size,
                         size_t bounce_buffers) {
  uring_ = uring;
  grace_ = grace;
  // Bounce buffers are not registered with io_uring: they are taken under the
  // lock, and a registration is a round trip to the ring's thread, which may
  // itself be waiting for that lock.
  pool_.configure(bounce_size, bounce_buffers);
}

void Inflight::setStaging(GpuStaging* staging) {
  std::lock_guard lk(mu_);
  staging_ = staging;
}

void Inflight::setCufileMode(bool gds) {
  std::lock_guard lk(mu_);
  cufile_gds_ = gds;
}

void Inflight::startWatchdog() {
  watchdog_ = std::thread([this] { watchdog(); });
}

void Inflight::stopWatchdog() {
  {
    std::lock_guard lk(mu_);
    wd_stop_ = true;
  }
  wd_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void Inflight::leak() {
  std::lock_guard lk(mu_);
  leaked_ = true;
}

// ---- sub-batches -------------------------------------------------------------------

void Inflight::add(BatchSlices* sb) {
  std::lock_guard lk(mu_);
  live_.insert(sb);
}

void Inflight::post(BatchSlices& sb, PreparedIos& work) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    const size_t task0 = sb.tasks.size(), slice0 = sb.slices.size();
    const size_t units = work.sink ? work.runs : work.tasks.size();
    for (size_t u = 0; u < units; ++u) {
      TaskRec& rec = sb.tasks.emplace_back();
      if (work.sink) {
        rec.sink = work.sink;
        rec.left = work.unit_slices[u];
      } else {
        rec.task = work.tasks[u];
      }
      rec.sb = &sb;
    }
    for (Slice& sl : work.slices) {
      Slice& s = sb.slices.emplace_back(sl);
      s.rec = &sb.tasks[task0 + s.task];
      s.next = s.rec->first;
      s.rec->first = &s;
    }
    for (FileIo& w : work.ios) {
      FileIo* io = &sb.ios.emplace_back(std::move(w));
      io->sb = &sb;
      io->first += slice0;
      for (uint32_t i = 0; i < io->count; ++i) slice(io, i).io = io;
      sb.active++;
      total_active_++;
      issue(io, ob);
    }
  }
  flush(ob);
}

void Inflight::cancel(BatchSlices& sb, const char* why) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (auto& io : sb.ios) cancelIo(&io, ob, why);
  }
  flush(ob);
}

bool Inflight::idle(const BatchSlices& sb) const {
  std::lock_guard lk(mu_);
  return sb.active == 0;
}

void Inflight::retire(std::unique_ptr<BatchSlices> sb) {
  std::unique_lock lk(mu_);
  live_.erase(sb.get());
  if (sb->active > 0) {
    HLOG_WARN("file: sub-batch freed with {} I/O(s) still in the kernel: quarantined until they end", sb->active);
    quarantine_.push_back(std::move(sb));
    return;
  }
  lk.unlock();
  sb.reset();  // drops its file references (closing descriptors no longer cached)
}

void Inflight::cancelAll(const char* why) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (BatchSlices* sb : live_)
      for (auto& io : sb->ios) cancelIo(&io, ob, why);
    for (auto& sb : quarantine_)
      for (auto& io : sb->ios) cancelIo(&io, ob, why);
  }
  flush(ob);
}

void Inflight::waitDrained(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  // Cancelled I/O ends quickly; one past its grace is quarantined by the
  // watchdog but still counts as active until the kernel lets it go.
  drained_cv_.wait_for(lk, timeout, [&] { return total_active_ == 0; });
}

// ---- I/Os (under mu_) ----------------------------------------------------------------

bool Inflight::takeBounce(FileIo* io, Outbox& ob) {
  io->bb = pool_.acquire(io->io_len);
  if (!io->bb.p) return false;
  if (io->write)
    for (uint32_t i = 0; i < io->count; ++i) {
      const Slice& s = slice(io, i);
      ob.copy_in.push_back({io->bb.p + (s.off - io->io_off), s.user, s.len});
    }
  return true;
}

// Posts the I/O's (remaining) bytes, or parks it until a bounce buffer or a
// staging slot frees. A staged write first copies its slices from the GPU
// into the slot (kCopying, one batched copy); the write follows when that
// copy is done.
void Inflight::issue(FileIo* io, Outbox& ob) {
  if (io->bounce && !io->bb.p && !takeBounce(io, ob)) {
    io->state = SState::kWaitBounce;
    waiters_.push_back(io);
    return;
  }
  if (io->route == Route::kStaged) {
    if (io->slot < 0) {
      io->slot = staging_->tryAcquire();
      if (io->slot < 0) {
        io->state = SState::kWaitBounce;
        slot_waiters_.push_back(io);
        return;
      }
    }
    if (io->write && !io->staged_in) {
      io->staged_in = true;
      countIssue(io);
      if (!io->cookie) io->cookie = cookies_.add(io);
      io->state = SState::kCopying;
      char* slot = staging_->slot(io->slot);
      auto& c = ob.gpu_copies.emplace_back(Outbox::GpuCopy{io->device, false, {}, io->cookie});
      c.runs.reserve(io->count);
      for (uint32_t i = 0; i < io->count; ++i) {
        const Slice& s = slice(io, i);
        c.runs.push_back({reinterpret_cast<uint64_t>(slot + (s.off - io->io_off)), reinterpret_cast<uint64_t>(s.user),
                          s.len});
      }
      return;
    }
  }
  countIssue(io);
  if (!io->cookie) io->cookie = cookies_.add(io);
  io->state = SState::kInFlight;
  IoOp op;
  op.cookie = io->cookie;
  op.fd = io->file->fd;
  op.file_token = io->token;
  op.write = io->write;
  op.len = io->io_len - io->progress;
  op.offset = io->io_off + io->progress;
  if (!io->iov.empty()) {
    const std::vector<iovec>* v = &io->iov;
    if (io->progress > 0) {
      iovecsAfter(io->iov, io->progress, io->iov_rest);
      v = &io->iov_rest;
    }
    op.iov = v->data();
    op.iov_count = static_cast<uint32_t>(v->size());
  } else {
    char* base = io->route == Route::kStaged ? staging_->slot(io->slot)
                 : io->bounce                ? io->bb.p
                                             : slice(io, 0).user;
    op.buf = base + io->progress;
    // What the engine set up for that memory: the staging slots', or the
    // registration's the I/O was prepared with (a bounce buffer has none).
    op.memory = io->route == Route::kStaged ? staging_->memory() : io->bounce ? nullptr : io->memory;
  }
  op.device = io->device;
  ob.of(io->engine).ops.push_back(op);
  FileCounters& c = *counters_;
  (io->route == Route::kCufile ? c.cufile_ops : io->engine == uring_ ? c.uring_ops : c.posix_ops)++;
}

// Slices per path, once per I/O, when it (or its staging copy) first starts;
// and how many I/Os carried more than one slice.
void Inflight::countIssue(FileIo* io) {
  if (io->counted) return;
  io->counted = true;
  FileCounters& c = *counters_;
  switch (io->route) {
    case Route::kHost:
      (io->bounce ? c.bounce_slices : io->buffered ? c.buffered_slices : c.direct_slices) += io->count;
      break;
    case Route::kCufile:
      (cufile_gds_ ? c.gpu_gds_slices : c.gpu_compat_slices) += io->count;
      break;
    case Route::kStaged:
      (io->engine == uring_ ? c.gpu_staged_uring_slices : c.gpu_staged_posix_slices) += io->count;
      break;
  }
  if (io->count > 1) {
    c.coalesced_ios++;
    c.coalesced_runs += io->count;
  }
  if (!io->iov.empty()) c.vectored_ios++;
}

// Bytes per path: those of completed slices only.
void Inflight::countDone(const FileIo* io) {
  FileCounters& c = *counters_;
  const uint64_t bytes = io->bytes;
  switch (io->route) {
    case Route::kHost:
      (io->bounce ? c.bounce_bytes : io->buffered ? c.buffered_bytes : c.direct_bytes) += bytes;
      break;
    case Route::kCufile:
      (cufile_gds_ ? c.gpu_gds_bytes : c.gpu_compat_bytes) += bytes;
      break;
    case Route::kStaged:
      (io->engine == uring_ ? c.gpu_staged_uring_bytes : c.gpu_staged_posix_bytes) += bytes;
      break;
  }
}

void Inflight::report(FileIo* io, TransferState st, const Status& err, Outbox& ob) {
  if (io->reported) return;
  io->reported = true;
  if (st == TransferState::kCompleted) countDone(io);
  for (uint32_t i = 0; i < io->count; ++i) {
    const Slice& s = slice(io, i);
    TaskRec* rec = s.rec;
    if (rec->task) {
      ob.reports.push_back({rec->task, st, st == TransferState::kCompleted ? s.len : 0, err});
      continue;
    }
    // A run: its outcome once its last slice has ended.
    if (st == TransferState::kCompleted) {
      rec->bytes += s.len;
    } else if (failureRank(st) > rec->worst) {
      rec->worst = failureRank(st);
      rec->error = err;
    }
    if (--rec->left > 0) continue;
    if (rec->worst == 0)
      ob.run_ends.push_back({rec->sink, TransferState::kCompleted, rec->bytes, Status::OK()});
    else
      ob.run_ends.push_back({rec->sink, stateOfRank(rec->worst), 0, rec->error});
  }
}

void Inflight::fail(FileIo* io, Status err, Outbox& ob) {
  report(io, TransferState::kFailed, err, ob);
  finishIo(io, ob);
  // Every task it carried has failed; their other I/Os stop where they
  // carry nothing for a task still alive (others run on: their tasks'
  // slices complete or fail on their own).
  std::vector<TaskRec*> newly;
  for (uint32_t i = 0; i < io->count; ++i) {
    TaskRec* rec = slice(io, i).rec;
    if (!rec->failed) {
      rec->failed = true;
      newly.push_back(rec);
    }
  }
  for (TaskRec* rec : newly)
    for (Slice* s = rec->first; s; s = s->next) {
      FileIo* other = s->io;
      if (other == io || other->state == SState::kDone || other->reported) continue;
      bool alive = false;
      for (uint32_t i = 0; i < other->count && !alive; ++i) alive = !slice(other, i).rec->failed;
      if (!alive) cancelIo(other, ob, "another slice of the task failed");
    }
}

// Asks an I/O to stop. Not yet posted: CANCELED now. In the kernel: a cancel
// request; it ends with its completion, or at its deadline (quarantine).
void Inflight::cancelIo(FileIo* io, Outbox& ob, const char* why) {
  if (io->reported || io->state == SState::kDone) return;
  for (uint32_t i = 0; i < io->count; ++i) slice(io, i).rec->failed = true;
  auto canceled = [&] {
    return Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled: {}", opName(io->write),
                                              io->file ? io->file->path : "?", io->data_off, io->data_len, why));
  };
  switch (io->state) {
    case SState::kPrepared:
    case SState::kWaitBounce:
      waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), io), waiters_.end());
      slot_waiters_.erase(std::remove(slot_waiters_.begin(), slot_waiters_.end(), io), slot_waiters_.end());
      report(io, TransferState::kCanceled, canceled(), ob);
      finishIo(io, ob);
      break;
    case SState::kInFlight:
      if (!io->cancel_requested) {
        io->cancel_requested = true;
        io->deadline = Clock::now() + grace_;
        cancelling_.push_back(io);
        ob.of(io->engine).cancels.push_back(io->cookie);
        counters_->cancel_requests++;
        wd_cv_.notify_all();
      }
      break;
    case SState::kCopying:
      // A GPU copy cannot be stopped; it is short. A staged write then ends
      // CANCELED instead of being written (onCopyDone).
      io->cancel_requested = true;
      break;
    case SState::kDone:
      break;
  }
  if (total_active_ == 0) drained_cv_.notify_all();
}

// The I/O has ended for good (or never started): release what it held.
void Inflight::finishIo(FileIo* io, Outbox& ob) {
  if (io->cookie) cookies_.remove(io->cookie);
  io->cookie = 0;
  pool_.release(io->bb);
  if (io->slot >= 0) {
    staging_->release(io->slot);
    io->slot = -1;
  }
  io->file.reset();
  io->iov = {};
  io->iov_rest = {};
  io->state = SState::kDone;
  BatchSlices* sb = io->sb;
  sb->active--;
  total_active_--;
  if (io->cancel_requested)
    cancelling_.erase(std::remove(cancelling_.begin(), cancelling_.end(), io), cancelling_.end());
  // A freed bounce buffer goes to the oldest waiter.
  while (!waiters_.empty()) {
    FileIo* w = waiters_.front();
    if (!takeBounce(w, ob)) break;
    waiters_.pop_front();
    issue(w, ob);
  }
  // So does a freed staging slot.
  while (!slot_waiters_.empty()) {
    long slot = staging_->tryAcquire();
    if (slot < 0) break;
    FileIo* w = slot_waiters_.front();
    slot_waiters_.pop_front();
    w->slot = slot;
    issue(w, ob);
  }
  if (sb->active == 0) {
    // A sub-batch freed while it had quarantined I/O can go now.
    for (auto it = quarantine_.begin(); it != quarantine_.end(); ++it) {
      if (it->get() == sb) {
        HLOG_INFO("file: quarantined sub-batch released: its last I/O has ended");
        ob.destroy.push_back(std::move(*it));
        quarantine_.erase(it);
        break;
      }
    }
  }
  if (total_active_ == 0) drained_cv_.notify_all();
}

void Inflight::handle(const IoCompletion& c, Outbox& ob) {
  FileIo* io = cookies_.find(c.cookie);
  if (!io || io->state != SState::kInFlight) {
    HLOG_WARN("file: completion for unknown cookie {:#x} (result {}) ignored", c.cookie, c.result);
    return;
  }
  const int64_t res = c.result;
  // Bytes of the I/O that must be done for its slices to be complete: a
  // bounce (or staged) read may run past end of file in its alignment padding.
  const uint64_t data_end = io->data_off + io->data_len;
  const uint64_t needed =
      ((io->bounce || io->route == Route::kStaged) && !io->write) ? data_end - io->io_off : io->io_len;
  if (res > 0) io->progress += static_cast<uint64_t>(res);

  if (io->quarantined) {
    HLOG_INFO("file: quarantined {} of '{}' [{}, +{}) has ended (result {}); its memory is released",
              opName(io->write), io->file->path, io->data_off, io->data_len, res);
    counters_->quarantine_released++;
    finishIo(io, ob);
    return;
  }
  if (res > 0 && io->progress < needed && !io->cancel_requested) {
    counters_->short_continuations++;
    issue(io, ob);  // resume the remainder with the same cookie
    return;
  }
  if (io->progress >= needed && io->route == Route::kStaged && !io->write && !io->cancel_requested) {
    // The bytes are in the slot: on to the GPU, every slice in one batched
    // copy; the slices end with that copy.
    io->state = SState::kCopying;
    const char* slot = staging_->slot(io->slot);
    auto& cp = ob.gpu_copies.emplace_back(Outbox::GpuCopy{io->device, true, {}, io->cookie});
    cp.runs.reserve(io->count);
    for (uint32_t i = 0; i < io->count; ++i) {
      const Slice& s = slice(io, i);
      cp.runs.push_back({reinterpret_cast<uint64_t>(s.user), reinterpret_cast<uint64_t>(slot + (s.off - io->io_off)),
                         s.len});
    }
    return;
  }
  // "(N runs)" when the I/O carried several: each of them fails with it.
  const std::string runs = io->count > 1 ? fmt::format(", carrying {} runs", io->count) : "";
  TransferState st;
  Status err;
  if (io->progress >= needed && io->route == Route::kStaged && !io->write) {
    // Read into the slot, but cancelled before its copy to the GPU.
    st = TransferState::kCanceled;
    err = Status(Code::kIoError, fmt::format("read of '{}' [{}, +{}) canceled before its copy to the GPU",
                                             io->file->path, io->data_off, io->data_len));
  } else if (io->progress >= needed) {
    st = TransferState::kCompleted;
    if (io->bounce && !io->write)
      for (uint32_t i = 0; i < io->count; ++i) {
        const Slice& s = slice(io, i);
        std::memcpy(s.user, io->bb.p + (s.off - io->io_off), s.len);
      }
  } else if (res == -ECANCELED || io->cancel_requested) {
    st = TransferState::kCanceled;
    err = Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled after {} bytes", opName(io->write),
                                             io->file->path, io->data_off, io->data_len, io->progress));
  } else if (res < 0) {
    st = TransferState::kFailed;
    err = Status(Code::kIoError, fmt::format("{} of '{}' at offset {} ({} bytes{}): {}", opName(io->write),
                                             io->file->path, io->io_off + io->progress, io->io_len - io->progress,
                                             runs, std::strerror(static_cast<int>(-res))));
  } else {
    st = TransferState::kFailed;
    err = Status(Code::kIoError,
                 fmt::format("short {}: {} of {} bytes at offset {} of '{}'{} (end of file: truncated since it was "
                             "opened?)",
                             opName(io->write), std::min(io->progress, needed), needed, io->io_off, io->file->path,
                             runs));
  }
  if (st == TransferState::kFailed) return fail(io, std::move(err), ob);
  report(io, st, err, ob);
  finishIo(io, ob);
}

void Inflight::onCopyDone(uint64_t cookie, const Status& result) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    FileIo* io = cookies_.find(cookie);
    if (!io || io->state != SState::kCopying) {
      HLOG_WARN("file: staging copy for unknown cookie {:#x} ignored", cookie);
      return;
    }
    if (!result.ok()) {
      fail(io,
           Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) through staging: {}", opName(io->write),
                                              io->file->path, io->data_off, io->data_len, result.message())),
           ob);
    } else if (!io->write) {
      report(io, TransferState::kCompleted, Status::OK(), ob);
      finishIo(io, ob);
    } else if (io->cancel_requested) {
      report(io, TransferState::kCanceled,
             Status(Code::kIoError, fmt::format("write of '{}' [{}, +{}) canceled before it was written",
                                                io->file->path, io->data_off, io->data_len)),
             ob);
      finishIo(io, ob);
    } else {
      issue(io, ob);  // the slot holds the bytes: write them
    }
  }
  flush(ob);
}

// ---- outside the lock ------------------------------------------------------------

void Inflight::onComplete(std::span<const IoCompletion> cs) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (const auto& c : cs) handle(c, ob);
  }
  flush(ob);
}

void Inflight::flush(Outbox& ob) {
  for (auto& c : ob.copy_in) std::memcpy(c.dst, c.src, c.len);  // host memory only (bounce)
  for (auto& c : ob.gpu_copies) staging_->copy(c.device, c.to_gpu, std::move(c.runs), c.cookie);
  for (auto& w : ob.engines)
    if (!w.ops.empty()) w.engine->submit(w.ops);
  for (auto& w : ob.engines)
    if (!w.cancels.empty()) w.engine->cancel(w.cancels);
  for (auto& r : ob.reports) r.task->completeSlice(r.state, r.bytes, r.error);
  // Runs that ended together with one outcome are told together.
  for (size_t i = 0; i < ob.run_ends.size();) {
    const Outbox::RunEnd& r = ob.run_ends[i];
    size_t n = 1;
    uint64_t bytes = r.bytes;
    while (i + n < ob.run_ends.size() && ob.run_ends[i + n].sink == r.sink && ob.run_ends[i + n].state == r.state &&
           (r.state == TransferState::kCompleted || ob.run_ends[i + n].error.message() == r.error.message()))
      bytes += ob.run_ends[i + n++].bytes;
    r.sink->runsEnded(n, r.state == TransferState::kCompleted ? n : 0, bytes, r.state, r.error);
    i += n;
  }
  ob.destroy.clear();
}

// Reports CANCELED for the slices of I/Os whose cancel did not take effect
// within the grace period, and keeps their memory (quarantine) until the I/O
// ends.
void Inflight::watchdog() {
  std::unique_lock lk(mu_);
  while (!wd_stop_) {
    Outbox ob;
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (FileIo* io : cancelling_) {
      if (io->reported || io->quarantined) continue;
      if (now >= io->deadline) {
        io->quarantined = true;
        counters_->quarantined++;
        HLOG_WARN("file: {} of '{}' [{}, +{}) did not stop within {} ms of its cancel; reported CANCELED and "
                  "quarantined (bounce buffer, descriptor and batch kept) until the kernel ends it",
                  opName(io->write), io->file->path, io->data_off, io->data_len, grace_.count());
        report(io, TransferState::kCanceled,
               Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled; the I/O had not stopped after {} "
                                                  "ms and is quarantined",
                                                  opName(io->write), io->file->path, io->data_off, io->data_len,
                                                  grace_.count())),
               ob);
      } else {
        next = std::min(next, io->deadline);
      }
    }
    if (!ob.empty()) {
      lk.unlock();
      flush(ob);
      lk.lock();
      continue;
    }
    if (next == Clock::time_point::max())
      wd_cv_.wait(lk);
    else
      wd_cv_.wait_until(lk, next);
  }
}

}  // namespace hawser::file
