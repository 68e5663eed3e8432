// The io_uring engine's class (internal to the file transport): the ring and
// its owner thread in uring_engine.cpp, the lazily registered fixed buffers
// of each added region (UringMemory) in uring_buffers.cpp. Only built with
// liburing (HAWSER_HAVE_URING).
#pragma once

#if HAWSER_HAVE_URING

#include <liburing.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "transport/file/io_engine.h"

namespace hawser::file::uring_detail {

struct Queued {
  IoOp op;
  int buf_index = -1;  // fixed buffer holding [buf, buf+len), or -1
};

// A region added with addMemory: its fixed buffers, one slot per 64 MiB
// piece (uring_buffers.cpp), found from the op that carries it.
class UringMemory final : public EngineMemory, public std::enable_shared_from_this<UringMemory> {
 public:
  UringMemory(const IoEngine* owner, uint64_t addr, uint64_t len);
  // Slot states besides a slot number (>= 0).
  static constexpr int kUnasked = -2;  // no op asked for the piece yet
  static constexpr int kNoSlot = -1;   // asked for (being registered, refused, or removed)

  const uint64_t addr;
  const uint64_t len;
  const size_t pieces;
  std::unique_ptr<std::atomic<int>[]> slots;  // per piece
  bool removed = false;                       // under the engine's reg_mu_
};

// A registration the owner thread performs for another thread.
struct Command {
  std::function<void()> fn;
  std::promise<void>* done = nullptr;  // null: nobody waits
};

class UringEngine final : public IoEngine {
 public:
  UringEngine(const IoEngineOptions& o, std::shared_ptr<FileCounters> counters)
      : opts_(o), counters_(std::move(counters)) {}
  ~UringEngine() override;

  Status init();
  const char* name() const override { return "uring"; }
  Status start(CompletionSink sink) override;
  size_t stop(std::chrono::milliseconds timeout) override;
  int addFile(int fd) override;
  void removeFile(int token) override;
  std::shared_ptr<EngineMemory> addMemory(void* addr, size_t len, int device) override;
  void removeMemory(EngineMemory& m) override;
  void submit(std::span<const IoOp> ops) override;
  void cancel(std::span<const uint64_t> cookies) override;
  IoEngineStats stats() const override;

 private:
  void main(std::promise<Status>* ready);
  Status setup();
  void run();
  void wake();
  // Runs fn on the owner thread (directly when called there) and waits,
  // unless `wait` is false. False when the owner has exited.
  bool onOwner(std::function<void()> fn, bool wait = true);
  // Hands the prepared SQEs to the kernel and waits for `wait_nr`
  // completions (io_uring_submit_and_wait); counts the call and its size.
  int enter(unsigned wait_nr);
  io_uring_sqe* getSqe();
  void prep(const Queued& q, io_uring_sqe* sqe);
  void reap(std::vector<IoCompletion>& done);
  // The fixed buffer of op.memory holding [buf, buf+len), or -1; asks for
  // the piece holding it the first time an op lies there.
  int fixedBuffer(const IoOp& op);
  // Background: fault pieces in, then have the owner register them.
  void pin();
  void stopPinner();
  // Owner thread: registers piece `piece` of `m` unless m was removed.
  void registerPiece(UringMemory& m, size_t piece);
  static uint64_t pieceStart(const UringMemory& m, size_t i);
  static uint64_t pieceLen(const UringMemory& m, size_t i);

  IoEngineOptions opts_;
  std::shared_ptr<FileCounters> counters_;
  io_uring ring_{};
  bool ring_ok_ = false;
  unsigned ring_flags_ = 0;
  int efd_ = -1;
  CompletionSink sink_;
  std::thread thread_;
  std::thread::id owner_id_;

  // Shared with submitters.
  std::mutex mu_;
  std::vector<Queued> queue_;
  std::vector<uint64_t> cancel_q_;
  std::vector<Command> cmd_q_;
  bool stop_req_ = false;
  bool exited_ = false;  // the owner thread left its loop (under mu_)
  std::atomic<bool> need_wake_{false};
  std::atomic<size_t> outstanding_{0};  // accepted by submit(), not yet delivered

  // Owner thread only.
  std::deque<Queued> backlog_;
  std::unordered_set<uint64_t> inflight_;
  bool wake_armed_ = false;

  // Exit handshake.
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;

  // Registration bookkeeping under reg_mu_: free slots, the pieces asked
  // for, the pinning thread. What is registered where lives in each
  // UringMemory: no table of regions here.
  struct Piece {
    std::shared_ptr<UringMemory> memory;
    size_t index = 0;
  };
  std::mutex reg_mu_;
  std::deque<Piece> pin_q_;
  std::condition_variable pin_cv_;
  std::thread pinner_;
  bool pin_stop_ = false;
  std::vector<int> free_bufs_;
  std::vector<int> free_files_;
  bool fixed_buffers_ = false;
  bool fixed_files_ = false;
  bool warned_buffers_ = false;

  std::atomic<uint64_t> st_submitted_{0}, st_calls_{0}, st_fixed_buf_{0}, st_fixed_file_{0}, st_cancels_{0},
      st_reg_bytes_{0}, st_largest_{0};
};

}  // namespace hawser::file::uring_detail

#endif  // HAWSER_HAVE_URING
