// I/Os in flight, for every sub-batch of one file transport, under one lock.
// prepare() (file_sub_batch.h) turns a window of tasks into I/Os, each
// carrying one or more *slices* (a slice: the bytes one I/O moves for one
// task; file_coalesce.h says how runs become I/Os). This table issues each
// I/O to its engine (or parks it until a bounce buffer or a staging slot
// frees), matches completions by one-based cookie (slot index + 1,
// generation in the high bits), resumes short I/O, reports every slice of an
// I/O when it ends (completed, or failed with the I/O's error: a failed I/O
// fails exactly the slices it carried), stops the other I/Os of a failed
// task when they carry nothing else, cancels, and quarantines: an I/O that
// does not end within the cancel grace has its slices reported CANCELED by
// the watchdog, but its memory (bounce buffer, staging slot, descriptor, the
// sub-batch) is kept until the kernel reports the I/O ended.
//
// GPU memory (file_sub_batch.h decides which way each I/O goes): a cuFile
// I/O (one slice) is issued to the cuFile engine with the device address; a
// staged I/O reads or writes a pinned staging slot through io_uring/POSIX,
// and the copy of all its slices to (reads, after the I/O) or from (writes,
// before it) the GPU is one batched copy on a copy lane (gpu_staging.h).
// Host code never dereferences GPU memory.
#pragma once

#include <sys/uio.h>

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
#include "base/transport.h"
#include "transport/file/bounce_pool.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

struct OpenFile;
struct FileCounters;
struct BatchSlices;
struct Slice;

using Clock = std::chrono::steady_clock;

class GpuStaging;

// kWaitBounce: waiting for a bounce buffer or a staging slot; kCopying: a
// staged I/O's copy to or from the GPU is queued or running.
enum class SState : uint8_t { kPrepared, kWaitBounce, kCopying, kInFlight, kDone };

// How an I/O's bytes reach the file.
enum class Route : uint8_t {
  kHost,    // host memory: direct, bounce or buffered (see FileIo)
  kCufile,  // GPU memory <-> file through the cuFile engine (one slice per I/O)
  kStaged,  // GPU memory <-> pinned staging slot <-> file through io_uring/POSIX
};

struct FileIo;

// A unit of a window: a task (its slices report to it), or a run of a
// block request (prepareRuns: reported to the window's sink once its last
// slice has ended, with its worst outcome).
struct TaskRec {
  Task* task = nullptr;
  RunSink* sink = nullptr;
  BatchSlices* sb = nullptr;
  Slice* first = nullptr;  // its slices, linked through Slice::next
  bool failed = false;     // a slice failed or the batch was cancelled: stop its other I/Os
  // A run: slices not ended yet, failureRank of the worst (0: all
  // completed so far) and its error, bytes of the completed ones.
  uint32_t left = 0;
  int worst = 0;
  Status error;
  uint64_t bytes = 0;
};

// What one I/O moves for one task: [off, +len) of the file <-> [user, +len)
// of the task's memory (never dereferenced for GPU memory).
struct Slice {
  TaskRec* rec = nullptr;
  FileIo* io = nullptr;
  Slice* next = nullptr;  // the task's next slice
  char* user = nullptr;
  uint64_t off = 0;
  uint64_t len = 0;
  uint32_t task = 0;  // prepare() to post(): index of its unit (task or run) in the window
};

// One I/O of one file, carrying slices [first, +count) of its sub-batch in
// file order: [data_off, +data_len) from the first slice's first byte to the
// last one's last (a read may pass through gaps between slices, read into a
// discard buffer and dropped).
struct FileIo {
  BatchSlices* sb = nullptr;
  size_t first = 0;
  uint32_t count = 0;
  std::shared_ptr<OpenFile> file;
  bool write = false;
  bool bounce = false;    // through a bounce buffer (unaligned memory, too many iovecs)
  bool buffered = false;  // through a page-cache descriptor
  Route route = Route::kHost;
  int device = -1;        // GPU of the slices' memory (kCufile, kStaged)
  long slot = -1;         // staging slot held (kStaged)
  IoEngine* engine = nullptr;  // engine of the I/O (the file's, or cuFile)
  int token = -1;              // that engine's file token
  // What that engine set up for the slice's memory (one buffer, no
  // iovecs): from the registration of its region, which the task (or the
  // window's plan) keeps alive while the I/O may be issued. Null: none.
  EngineMemory* memory = nullptr;
  uint64_t data_off = 0;
  uint64_t data_len = 0;
  uint64_t bytes = 0;     // its slices' bytes (data_len less the gaps)
  uint64_t io_off = 0;    // the I/O issued (bounce and staged reads round out to the alignment)
  uint64_t io_len = 0;
  uint64_t progress = 0;  // bytes of the I/O done (short I/O is resumed)
  // Straight to/from the slices' memory as one vectored I/O (several slices,
  // or gaps); empty: one buffer (the slice's memory, a bounce buffer or a slot).
  std::vector<iovec> iov;
  std::vector<iovec> iov_rest;  // what remains of iov after a short I/O
  Bounce bb;
  uint64_t cookie = 0;
  SState state = SState::kPrepared;
  bool cancel_requested = false;
  bool reported = false;  // its slices' outcome has been reported
  bool quarantined = false;
  bool counted = false;    // its path's counters bumped
  bool staged_in = false;  // staged write: its bytes were copied into the slot
  Clock::time_point deadline{};
};

// The slices of one sub-batch (stable addresses: cookies and slices point
// at its I/Os and tasks).
struct BatchSlices {
  std::deque<TaskRec> tasks;
  std::deque<Slice> slices;
  std::deque<FileIo> ios;
  size_t active = 0;  // I/Os waiting for a bounce buffer or a slot, copying, or in the kernel
};

// What prepare() made of a window, before post(): I/Os whose `first`
// indexes `slices`, and slices whose `task` indexes the window's units:
// `tasks`, or (prepareRuns) `runs` runs that end through `sink`.
struct PreparedIos {
  std::vector<Task*> tasks;
  RunSink* sink = nullptr;
  size_t runs = 0;
  std::vector<uint32_t> unit_slices;  // slices of each unit
  std::vector<Slice> slices;
  std::vector<FileIo> ios;
};

// One-based cookies naming I/Os: cookie 0 never names one, and a cookie of
// a freed slot (stale generation) finds nothing.
class CookieTable {
 public:
  uint64_t add(FileIo* io);
  void remove(uint64_t cookie);
  FileIo* find(uint64_t cookie) const;

 private:
  std::vector<FileIo*> slots_;
  std::vector<uint32_t> gens_;
  std::vector<uint32_t> free_;
};

class Inflight {
 public:
  // `counters`: the transport's, counted per op, slice path and byte.
  explicit Inflight(std::shared_ptr<FileCounters> counters) : counters_(std::move(counters)) {}
  Inflight(const Inflight&) = delete;
  ~Inflight();

  // `uring` (may be null) is told apart from the POSIX engine for counters.
  void configure(IoEngine* uring, std::chrono::milliseconds grace, size_t bounce_size, size_t bounce_buffers);
  // Staging for GPU I/O (set once, before any staged I/O is posted).
  void setStaging(GpuStaging* staging);
  // `gds`: cuFile I/O runs GPUDirect (else compat mode), for counters.
  void setCufileMode(bool gds);

  // A staging copy ended (from a copy lane).
  void onCopyDone(uint64_t cookie, const Status& result);
  void startWatchdog();
  void stopWatchdog();

  // Completions from any engine.
  void onComplete(std::span<const IoCompletion> cs);

  // Sub-batches: registered while they exist (shutdown cancels them).
  void add(BatchSlices* sb);
  // Appends what prepare made and issues its I/Os.
  void post(BatchSlices& sb, PreparedIos& work);
  void cancel(BatchSlices& sb, const char* why);
  bool idle(const BatchSlices& sb) const;
  // The sub-batch is gone: its I/Os are freed now, or quarantined until
  // their last one ends.
  void retire(std::unique_ptr<BatchSlices> sb);

  // Shutdown: cancel every I/O, wait up to `timeout` for all of them to end.
  void cancelAll(const char* why);
  void waitDrained(std::chrono::milliseconds timeout);
  // After engines that could not be stopped: keep everything for good.
  void leak();

 private:
  struct Outbox;
  // Under mu_.
  void issue(FileIo* io, Outbox& ob);
  // Takes a bounce buffer for `io` (a write's bytes are copied in); false: none free.
  bool takeBounce(FileIo* io, Outbox& ob);
  void cancelIo(FileIo* io, Outbox& ob, const char* why);
  void finishIo(FileIo* io, Outbox& ob);
  void handle(const IoCompletion& c, Outbox& ob);
  // Reports every slice of `io` (once).
  void report(FileIo* io, TransferState st, const Status& err, Outbox& ob);
  void countIssue(FileIo* io);
  void countDone(const FileIo* io);
  // An I/O failed: its slices fail with `err`; the other I/Os of their
  // tasks are cancelled where they carry nothing for a task still alive.
  void fail(FileIo* io, Status err, Outbox& ob);
  Slice& slice(const FileIo* io, uint32_t i) const { return io->sb->slices[io->first + i]; }
  // Outside mu_.
  void flush(Outbox& ob);
  void watchdog();

  std::shared_ptr<FileCounters> counters_;
  IoEngine* uring_ = nullptr;
  GpuStaging* staging_ = nullptr;
  bool cufile_gds_ = false;
  std::chrono::milliseconds grace_{1000};
  bool leaked_ = false;

  mutable std::mutex mu_;  // everything below
  CookieTable cookies_;
  BouncePool pool_;
  std::deque<FileIo*> waiters_;          // for a bounce buffer
  std::deque<FileIo*> slot_waiters_;     // for a staging slot
  std::vector<FileIo*> cancelling_;
  std::set<BatchSlices*> live_;
  std::vector<std::unique_ptr<BatchSlices>> quarantine_;
  size_t total_active_ = 0;
  std::condition_variable drained_cv_;

  std::thread watchdog_;
  std::condition_variable wd_cv_;
  bool wd_stop_ = false;
};

}  // namespace hawser::file
