// Slices in flight: cookies, completions, cancel, quarantine, watchdog.
// See file_inflight.h.
#include "transport/file/file_inflight.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/file/file_handles.h"
#include "transport/file/file_transport.h"
#include "transport/file/gpu_staging.h"

namespace hawser::file {

namespace {
const char* opName(bool write) { return write ? "write" : "read"; }
}  // namespace

// ---- cookies -------------------------------------------------------------------

uint64_t CookieTable::add(Slice* s) {
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(slots_.size());
    slots_.push_back(nullptr);
    gens_.push_back(0);
  }
  slots_[idx] = s;
  gens_[idx] = (gens_[idx] + 1) & 0x3fffffff;
  // One-based: cookie 0 never names a slice.
  return (static_cast<uint64_t>(gens_[idx]) << 32) | (static_cast<uint64_t>(idx) + 1);
}

void CookieTable::remove(uint64_t cookie) {
  uint32_t idx = static_cast<uint32_t>(cookie & 0xffffffffu) - 1;
  slots_[idx] = nullptr;
  free_.push_back(idx);
}

Slice* CookieTable::find(uint64_t cookie) const {
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
    void* dst;
    const void* src;
    uint64_t len;
    uint64_t cookie;
  };
  struct Report {
    Task* task;
    TransferState state;
    uint64_t bytes;
    Status error;
  };
  std::vector<EngineWork> engines;  // one or two
  std::vector<Copy> copy_in;        // user -> bounce, before the write is posted
  std::vector<GpuCopy> gpu_copies;  // staging slot <-> GPU, on a copy lane
  std::vector<Report> reports;
  std::vector<std::unique_ptr<BatchSlices>> destroy;

  EngineWork& of(IoEngine* e) {
    for (auto& w : engines)
      if (w.engine == e) return w;
    return engines.emplace_back(EngineWork{e, {}, {}});
  }
  bool empty() const { return engines.empty() && reports.empty() && destroy.empty() && gpu_copies.empty(); }
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
  pool_.configure(bounce_size, bounce_buffers, nullptr);
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

void Inflight::post(BatchSlices& sb, std::vector<CutTask>& work) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (auto& ct : work) {
      TaskRec& rec = sb.tasks.emplace_back();
      rec.task = ct.task;
      rec.sb = &sb;
      rec.first = sb.slices.size();
      rec.count = static_cast<uint32_t>(ct.slices.size());
      for (auto& sl : ct.slices) {
        sl.rec = &rec;
        Slice* s = &sb.slices.emplace_back(std::move(sl));
        sb.active++;
        total_active_++;
        issue(s, ob);
      }
    }
  }
  flush(ob);
}

void Inflight::cancel(BatchSlices& sb, const char* why) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    for (auto& s : sb.slices) cancelSlice(&s, ob, why);
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
      for (auto& s : sb->slices) cancelSlice(&s, ob, why);
    for (auto& sb : quarantine_)
      for (auto& s : sb->slices) cancelSlice(&s, ob, why);
  }
  flush(ob);
}

void Inflight::waitDrained(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  // Cancelled I/O ends quickly; a slice past its grace is quarantined by the
  // watchdog but still counts as active until the kernel lets it go.
  drained_cv_.wait_for(lk, timeout, [&] { return total_active_ == 0; });
}

// ---- slices (under mu_) -------------------------------------------------------------

// Posts the slice's (remaining) I/O, or parks it until a bounce buffer or a
// staging slot frees. A staged write first copies its bytes from the GPU into
// the slot (kCopying); the write follows when that copy is done.
void Inflight::issue(Slice* s, Outbox& ob) {
  if (s->bounce && !s->bb.p) {
    s->bb = pool_.acquire(s->io_len);
    if (!s->bb.p) {
      s->state = SState::kWaitBounce;
      waiters_.push_back(s);
      return;
    }
    if (s->write) ob.copy_in.push_back({s->bb.p, s->user, s->len});
  }
  if (s->route == Route::kStaged) {
    if (s->slot < 0) {
      s->slot = staging_->tryAcquire();
      if (s->slot < 0) {
        s->state = SState::kWaitBounce;
        slot_waiters_.push_back(s);
        return;
      }
    }
    if (s->write && !s->staged_in) {
      s->staged_in = true;
      countIssue(s);
      if (!s->cookie) s->cookie = cookies_.add(s);
      s->state = SState::kCopying;
      ob.gpu_copies.push_back({s->device, false, staging_->slot(s->slot), s->user, s->len, s->cookie});
      return;
    }
  }
  countIssue(s);
  if (!s->cookie) s->cookie = cookies_.add(s);
  s->state = SState::kInFlight;
  char* base = s->route == Route::kStaged ? staging_->slot(s->slot) : s->bounce ? s->bb.p : s->user;
  IoOp op;
  op.cookie = s->cookie;
  op.fd = s->file->fd;
  op.file_token = s->token;
  op.write = s->write;
  op.buf = base + s->progress;
  op.len = s->io_len - s->progress;
  op.offset = s->io_off + s->progress;
  ob.of(s->engine).ops.push_back(op);
  auto& c = detail::counters();
  (s->route == Route::kCufile ? c.cufile_ops : s->engine == uring_ ? c.uring_ops : c.posix_ops)++;
}

// Slices per path, once per slice, when its I/O (or its staging copy) first starts.
void Inflight::countIssue(Slice* s) {
  if (s->counted) return;
  s->counted = true;
  auto& c = detail::counters();
  switch (s->route) {
    case Route::kHost:
      (s->bounce ? c.bounce_slices : s->buffered ? c.buffered_slices : c.direct_slices)++;
      break;
    case Route::kCufile:
      (cufile_gds_ ? c.gpu_gds_slices : c.gpu_compat_slices)++;
      break;
    case Route::kStaged:
      (s->engine == uring_ ? c.gpu_staged_uring_slices : c.gpu_staged_posix_slices)++;
      break;
  }
}

// Bytes per path: those of completed slices only.
void Inflight::countDone(const Slice* s) {
  auto& c = detail::counters();
  switch (s->route) {
    case Route::kHost:
      (s->bounce ? c.bounce_bytes : s->buffered ? c.buffered_bytes : c.direct_bytes) += s->len;
      break;
    case Route::kCufile:
      (cufile_gds_ ? c.gpu_gds_bytes : c.gpu_compat_bytes) += s->len;
      break;
    case Route::kStaged:
      (s->engine == uring_ ? c.gpu_staged_uring_bytes : c.gpu_staged_posix_bytes) += s->len;
      break;
  }
}

void Inflight::fail(Slice* s, Status err, Outbox& ob) {
  TaskRec* rec = s->rec;
  report(s, TransferState::kFailed, std::move(err), ob);
  finishIo(s, ob);
  if (!rec->failed) {
    rec->failed = true;
    for (uint32_t i = 0; i < rec->count; ++i)
      cancelSlice(&rec->sb->slices[rec->first + i], ob, "another slice of the task failed");
  }
}

void Inflight::report(Slice* s, TransferState st, Status err, Outbox& ob) {
  if (s->reported) return;
  s->reported = true;
  if (st == TransferState::kCompleted) countDone(s);
  ob.reports.push_back({s->rec->task, st, st == TransferState::kCompleted ? s->len : 0, std::move(err)});
}

// Asks a slice to stop. Not yet posted: CANCELED now. In the kernel: a cancel
// request; it ends with its completion, or at its deadline (quarantine).
void Inflight::cancelSlice(Slice* s, Outbox& ob, const char* why) {
  if (s->reported || s->state == SState::kDone) return;
  s->rec->failed = true;
  Status err(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled: {}", opName(s->write),
                                         s->file ? s->file->path : "?", s->off, s->len, why));
  switch (s->state) {
    case SState::kPrepared:
      s->state = SState::kDone;
      report(s, TransferState::kCanceled, std::move(err), ob);
      break;
    case SState::kWaitBounce:
      waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), s), waiters_.end());
      slot_waiters_.erase(std::remove(slot_waiters_.begin(), slot_waiters_.end(), s), slot_waiters_.end());
      s->state = SState::kDone;
      s->file.reset();
      s->rec->sb->active--;
      total_active_--;
      report(s, TransferState::kCanceled, std::move(err), ob);
      break;
    case SState::kInFlight:
      if (!s->cancel_requested) {
        s->cancel_requested = true;
        s->deadline = Clock::now() + grace_;
        cancelling_.push_back(s);
        ob.of(s->engine).cancels.push_back(s->cookie);
        detail::counters().cancel_requests++;
        wd_cv_.notify_all();
      }
      break;
    case SState::kCopying:
      // A GPU copy cannot be stopped; it is short. A staged write then ends
      // CANCELED instead of being written (onCopyDone).
      s->cancel_requested = true;
      break;
    case SState::kDone:
      break;
  }
  if (total_active_ == 0) drained_cv_.notify_all();
}

// The slice's I/O has ended for good: release what it held.
void Inflight::finishIo(Slice* s, Outbox& ob) {
  if (s->cookie) cookies_.remove(s->cookie);
  s->cookie = 0;
  pool_.release(s->bb);
  if (s->slot >= 0) {
    staging_->release(s->slot);
    s->slot = -1;
  }
  s->file.reset();
  s->state = SState::kDone;
  BatchSlices* sb = s->rec->sb;
  sb->active--;
  total_active_--;
  if (s->cancel_requested) cancelling_.erase(std::remove(cancelling_.begin(), cancelling_.end(), s), cancelling_.end());
  // A freed bounce buffer goes to the oldest waiter.
  while (!waiters_.empty()) {
    Slice* w = waiters_.front();
    w->bb = pool_.acquire(w->io_len);
    if (!w->bb.p) break;
    waiters_.pop_front();
    if (w->write) ob.copy_in.push_back({w->bb.p, w->user, w->len});
    issue(w, ob);
  }
  // So does a freed staging slot.
  while (!slot_waiters_.empty()) {
    long slot = staging_->tryAcquire();
    if (slot < 0) break;
    Slice* w = slot_waiters_.front();
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
  Slice* s = cookies_.find(c.cookie);
  if (!s || s->state != SState::kInFlight) {
    HLOG_WARN("file: completion for unknown cookie {:#x} (result {}) ignored", c.cookie, c.result);
    return;
  }
  const int64_t res = c.result;
  // Bytes of the I/O that must be done for the slice to be complete: a
  // bounce (or staged) read may run past end of file in its alignment padding.
  const uint64_t needed =
      ((s->bounce || s->route == Route::kStaged) && !s->write) ? (s->off - s->io_off) + s->len : s->io_len;
  if (res > 0) s->progress += static_cast<uint64_t>(res);

  if (s->quarantined) {
    HLOG_INFO("file: quarantined {} of '{}' [{}, +{}) has ended (result {}); its memory is released",
              opName(s->write), s->file->path, s->off, s->len, res);
    detail::counters().quarantine_released++;
    finishIo(s, ob);
    return;
  }
  if (res > 0 && s->progress < needed && !s->cancel_requested) {
    detail::counters().short_continuations++;
    issue(s, ob);  // resume the remainder with the same cookie
    return;
  }
  if (s->progress >= needed && s->route == Route::kStaged && !s->write && !s->cancel_requested) {
    // The bytes are in the slot: on to the GPU; the slice ends with that copy.
    s->state = SState::kCopying;
    ob.gpu_copies.push_back({s->device, true, s->user, staging_->slot(s->slot) + (s->off - s->io_off), s->len,
                             s->cookie});
    return;
  }
  TransferState st;
  Status err;
  if (s->progress >= needed && s->route == Route::kStaged && !s->write) {
    // Read into the slot, but cancelled before its copy to the GPU.
    st = TransferState::kCanceled;
    err = Status(Code::kIoError, fmt::format("read of '{}' [{}, +{}) canceled before its copy to the GPU",
                                             s->file->path, s->off, s->len));
  } else if (s->progress >= needed) {
    st = TransferState::kCompleted;
    if (s->bounce && !s->write) std::memcpy(s->user, s->bb.p + (s->off - s->io_off), s->len);
  } else if (res == -ECANCELED || s->cancel_requested) {
    st = TransferState::kCanceled;
    err = Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled after {} bytes", opName(s->write),
                                             s->file->path, s->off, s->len, s->progress));
  } else if (res < 0) {
    st = TransferState::kFailed;
    err = Status(Code::kIoError, fmt::format("{} of '{}' at offset {} ({} bytes): {}", opName(s->write),
                                             s->file->path, s->io_off + s->progress, s->io_len - s->progress,
                                             std::strerror(static_cast<int>(-res))));
  } else {
    st = TransferState::kFailed;
    err = Status(Code::kIoError,
                 fmt::format("short {}: {} of {} bytes at offset {} of '{}' (end of file: truncated since it was "
                             "opened?)",
                             opName(s->write), std::min(s->progress, needed), needed, s->io_off, s->file->path));
  }
  if (st == TransferState::kFailed) return fail(s, std::move(err), ob);
  report(s, st, std::move(err), ob);
  finishIo(s, ob);
}

void Inflight::onCopyDone(uint64_t cookie, const Status& result) {
  Outbox ob;
  {
    std::lock_guard lk(mu_);
    Slice* s = cookies_.find(cookie);
    if (!s || s->state != SState::kCopying) {
      HLOG_WARN("file: staging copy for unknown cookie {:#x} ignored", cookie);
      return;
    }
    if (!result.ok()) {
      fail(s,
           Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) through staging: {}", opName(s->write),
                                              s->file->path, s->off, s->len, result.message())),
           ob);
    } else if (!s->write) {
      report(s, TransferState::kCompleted, Status::OK(), ob);
      finishIo(s, ob);
    } else if (s->cancel_requested) {
      report(s, TransferState::kCanceled,
             Status(Code::kIoError, fmt::format("write of '{}' [{}, +{}) canceled before it was written",
                                                s->file->path, s->off, s->len)),
             ob);
      finishIo(s, ob);
    } else {
      issue(s, ob);  // the slot holds the bytes: write them
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
  for (auto& c : ob.gpu_copies) staging_->copy(c.device, c.to_gpu, c.dst, c.src, c.len, c.cookie);
  for (auto& w : ob.engines)
    if (!w.ops.empty()) w.engine->submit(w.ops);
  for (auto& w : ob.engines)
    if (!w.cancels.empty()) w.engine->cancel(w.cancels);
  for (auto& r : ob.reports) r.task->completeSlice(r.state, r.bytes, r.error);
  ob.destroy.clear();
}

// Reports CANCELED for slices whose cancel did not take effect within the
// grace period, and keeps their memory (quarantine) until the I/O ends.
void Inflight::watchdog() {
  std::unique_lock lk(mu_);
  while (!wd_stop_) {
    Outbox ob;
    auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (Slice* s : cancelling_) {
      if (s->reported || s->quarantined) continue;
      if (now >= s->deadline) {
        s->quarantined = true;
        detail::counters().quarantined++;
        HLOG_WARN("file: {} of '{}' [{}, +{}) did not stop within {} ms of its cancel; reported CANCELED and "
                  "quarantined (bounce buffer, descriptor and batch kept) until the kernel ends it",
                  opName(s->write), s->file->path, s->off, s->len, grace_.count());
        report(s, TransferState::kCanceled,
               Status(Code::kIoError, fmt::format("{} of '{}' [{}, +{}) canceled; the I/O had not stopped after {} "
                                                  "ms and is quarantined",
                                                  opName(s->write), s->file->path, s->off, s->len, grace_.count())),
               ob);
      } else {
        next = std::min(next, s->deadline);
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
