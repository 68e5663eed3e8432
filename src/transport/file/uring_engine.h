// The io_uring engine's class (internal to the file transport): the ring and
// its owner thread in uring_engine.cpp, the lazily registered fixed buffers
// in uring_buffers.cpp. Only built with liburing (HAWSER_HAVE_URING).
#pragma once

#if HAWSER_HAVE_URING

#include <liburing.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "transport/file/io_engine.h"

namespace hawser::file::uring_detail {

struct Queued {
  IoOp op;
  int buf_index = -1;  // fixed buffer holding [buf, buf+len), or -1
};

// A registration the owner thread performs for another thread.
struct Command {
  std::function<void()> fn;
  std::promise<void>* done = nullptr;  // null: nobody waits
};

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoEngineOptions& o) : opts_(o) {}
  ~UringEngine() override;

  Status init();
  const char* name() const override { return "uring"; }
  Status start(CompletionSink sink) override;
  size_t stop(std::chrono::milliseconds timeout) override;
  int addFile(int fd) override;
  void removeFile(int token) override;
  void addMemory(void* addr, size_t len) override;
  void removeMemory(void* addr, size_t len) override;
  void submit(std::span<const IoOp> ops) override;
  void cancel(std::span<const uint64_t> cookies) override;
  IoEngineStats stats() const override;

 private:
  struct Chunk {
    uint64_t len = 0;
    int index = -1;
  };

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
  // The fixed buffer holding [buf, buf+len), or -1; asks for the piece
  // holding it when it lies in recorded memory not yet registered.
  int lookupBuffer(const void* buf, uint64_t len);
  // Background: fault pieces in, then have the owner register them.
  void pin();
  void stopPinner();
  // Owner thread: registers one piece if its region is still recorded.
  void registerPiece(uint64_t region, uint64_t gen, uint64_t start, uint64_t len);

  IoEngineOptions opts_;
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

  // Registration bookkeeping (slots, recorded regions and asked-for pieces
  // under reg_mu_, chunk map under buf_mu_).
  struct Recorded {
    uint64_t len = 0;
    uint64_t gen = 0;  // which addMemory recorded it (a later one may reuse the address)
  };
  struct Piece {
    uint64_t region = 0, gen = 0, start = 0, len = 0;
  };
  std::mutex reg_mu_;
  mutable std::shared_mutex buf_mu_;
  std::map<uint64_t, Chunk> chunks_;  // start address -> registered piece
  std::map<uint64_t, Recorded> recorded_;  // addMemory regions by start
  std::atomic<size_t> recorded_count_{0};
  std::unordered_set<uint64_t> asked_;      // piece starts asked for (pending, registered or refused)
  uint64_t next_gen_ = 0;
  // The pinning thread and its queue (under reg_mu_).
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
