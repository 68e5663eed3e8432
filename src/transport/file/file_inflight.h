// Slices in flight, for every sub-batch of one file transport, under one
// lock: issuing each slice's I/O to its engine (or parking it until a bounce
// buffer frees), matching completions by one-based cookie (slot index + 1,
// generation in the high bits), resuming short I/O, failing a task's other
// slices when one fails, cancel, and quarantine: a slice whose I/O does not
// end within the cancel grace is reported CANCELED by the watchdog, but its
// memory (bounce buffer, descriptor, the sub-batch's slices) is kept until
// the kernel reports the I/O ended.
//
// GPU memory (file_sub_batch.h decides which way each slice goes): a cuFile
// slice is issued to the cuFile engine with the device address; a staged
// slice reads or writes a pinned staging slot through io_uring/POSIX, and its
// copy to (reads, after the I/O) or from (writes, before it) the GPU runs on
// a copy lane (gpu_staging.h). Host code never dereferences GPU memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "base/task.h"
#include "transport/file/bounce_pool.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

struct OpenFile;
struct BatchSlices;

using Clock = std::chrono::steady_clock;

class GpuStaging;

// kWaitBounce: waiting for a bounce buffer or a staging slot; kCopying: a
// staged slice's copy to or from the GPU is queued or running.
enum class SState : uint8_t { kPrepared, kWaitBounce, kCopying, kInFlight, kDone };

// How a slice's bytes reach the file.
enum class Route : uint8_t {
  kHost,    // host memory: direct, bounce or buffered (see Slice)
  kCufile,  // GPU memory <-> file through the cuFile engine
  kStaged,  // GPU memory <-> pinned staging slot <-> file through io_uring/POSIX
};

struct TaskRec {
  Task* task = nullptr;
  BatchSlices* sb = nullptr;
  size_t first = 0;  // index of its first slice in sb->slices
  uint32_t count = 0;
  bool failed = false;  // a slice failed or the batch was cancelled: stop its siblings
};

struct Slice {
  TaskRec* rec = nullptr;
  std::shared_ptr<OpenFile> file;
  bool write = false;
  bool bounce = false;
  bool buffered = false;
  Route route = Route::kHost;
  int device = -1;        // GPU of the user's memory (kCufile, kStaged)
  long slot = -1;         // staging slot held (kStaged)
  IoEngine* engine = nullptr;  // engine of the I/O (the file's, or cuFile)
  int token = -1;              // that engine's file token
  char* user = nullptr;   // the user's memory for this slice (never dereferenced for GPU memory)
  uint64_t len = 0;       // bytes asked
  uint64_t off = 0;       // file offset of those bytes
  uint64_t io_off = 0;    // the I/O issued (bounce reads round out to the alignment)
  uint64_t io_len = 0;
  uint64_t progress = 0;  // bytes of the I/O done (short I/O is resumed)
  Bounce bb;
  uint64_t cookie = 0;
  SState state = SState::kPrepared;
  bool cancel_requested = false;
  bool reported = false;
  bool quarantined = false;
  bool counted = false;  // its path's slice counter bumped
  bool staged_in = false;  // staged write: its bytes were copied into the slot
  Clock::time_point deadline{};
};

// A task's slices as prepare() cut them, before post().
struct CutTask {
  Task* task = nullptr;
  std::vector<Slice> slices;
};

// The slices of one sub-batch (stable addresses: cookies point at them).
struct BatchSlices {
  std::deque<TaskRec> tasks;
  std::deque<Slice> slices;
  size_t active = 0;  // slices waiting for a bounce buffer or with I/O in the kernel
};

// One-based cookies naming slices: cookie 0 never names one, and a cookie of
// a freed slot (stale generation) finds nothing.
class CookieTable {
 public:
  uint64_t add(Slice* s);
  void remove(uint64_t cookie);
  Slice* find(uint64_t cookie) const;

 private:
  std::vector<Slice*> slots_;
  std::vector<uint32_t> gens_;
  std::vector<uint32_t> free_;
};

class Inflight {
 public:
  Inflight() = default;
  Inflight(const Inflight&) = delete;
  ~Inflight();

  // `uring` (may be null) is told apart from the POSIX engine for counters;
  // `gds`: cuFile slices run GPUDirect (else compat mode), for counters.
  void configure(IoEngine* uring, std::chrono::milliseconds grace, size_t bounce_size, size_t bounce_buffers);
  // Staging for GPU slices (set once, before any staged slice is posted).
  void setStaging(GpuStaging* staging);
  void setCufileMode(bool gds);

  // A staging copy ended (from a copy lane).
  void onCopyDone(uint64_t cookie, const Status& result);
  void startWatchdog();
  void stopWatchdog();

  // Completions from any engine.
  void onComplete(std::span<const IoCompletion> cs);

  // Sub-batches: registered while they exist (shutdown cancels them).
  void add(BatchSlices* sb);
  // Appends what prepare cut and issues it.
  void post(BatchSlices& sb, std::vector<CutTask>& work);
  void cancel(BatchSlices& sb, const char* why);
  bool idle(const BatchSlices& sb) const;
  // The sub-batch is gone: its slices are freed now, or quarantined until
  // their last I/O ends.
  void retire(std::unique_ptr<BatchSlices> sb);

  // Shutdown: cancel every slice, wait up to `timeout` for all I/O to end.
  void cancelAll(const char* why);
  void waitDrained(std::chrono::milliseconds timeout);
  // After engines that could not be stopped: keep everything for good.
  void leak();

 private:
  struct Outbox;
  // Under mu_.
  void issue(Slice* s, Outbox& ob);
  void cancelSlice(Slice* s, Outbox& ob, const char* why);
  void finishIo(Slice* s, Outbox& ob);
  void handle(const IoCompletion& c, Outbox& ob);
  void report(Slice* s, TransferState st, Status err, Outbox& ob);
  void countIssue(Slice* s);
  void countDone(const Slice* s);
  // A slice failed: report it and cancel the other slices of its task.
  void fail(Slice* s, Status err, Outbox& ob);
  // Outside mu_.
  void flush(Outbox& ob);
  void watchdog();

  IoEngine* uring_ = nullptr;
  GpuStaging* staging_ = nullptr;
  bool cufile_gds_ = false;
  std::chrono::milliseconds grace_{1000};
  bool leaked_ = false;

  mutable std::mutex mu_;  // everything below
  CookieTable cookies_;
  BouncePool pool_;
  std::deque<Slice*> waiters_;          // for a bounce buffer
  std::deque<Slice*> slot_waiters_;     // for a staging slot
  std::vector<Slice*> cancelling_;
  std::set<BatchSlices*> live_;
  std::vector<std::unique_ptr<BatchSlices>> quarantine_;
  size_t total_active_ = 0;
  std::condition_variable drained_cv_;

  std::thread watchdog_;
  std::condition_variable wd_cv_;
  bool wd_stop_ = false;
};

}  // namespace hawser::file
