// io_uring engine.
//
// One owner thread creates and holds the ring: it takes queued ops, fills
// SQEs (at most io_depth ops in the kernel at once), submits them with one
// io_uring_submit_and_wait call and reaps completions in batches. Other
// threads only append to a queue and, when the owner sleeps, wake it through
// an eventfd that the ring itself polls. Being the only thread that enters or
// registers with the ring, the owner sets it up SINGLE_ISSUER + DEFER_TASKRUN
// (completion work runs only when it waits; falls back to COOP_TASKRUN, then
// to no flags, on older kernels). Registrations asked for by other threads
// are commands the owner runs; the caller waits for them.
//
// Fixed buffers: uring_buffers.cpp. Fixed files: a sparse table, -1 on failure.
#include "transport/file/io_engine.h"

#if HAWSER_HAVE_URING

#include "transport/file/uring_engine.h"

#include <liburing.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "base/log.h"
#include "transport/file/file_counters.h"

namespace hawser::file {
namespace {

constexpr uint64_t kWakeTag = ~0ULL;
constexpr uint64_t kCancelTag = ~0ULL - 1;
// Ops of at least this many bytes enter the kernel one per system call.
// io_uring plugs a submission of more than two ops, and the block layer
// then merges adjacent ones into a larger request: sequential 1 MiB writes
// went out as ~3.4 MiB requests and ran at 0.63-0.74 of fio, which submits
// one at a time (0.87-0.96 with merging switched off in sysfs). At this size
// the extra system calls cost nothing that shows; smaller ops are still
// submitted together.
constexpr size_t kSubmitAloneBytes = 256 * 1024;

}  // namespace

namespace uring_detail {

UringEngine::~UringEngine() {
  // The owner of an engine calls stop() first and leaks the engine when I/O
  // did not finish; here the thread must be gone before the ring is torn down.
  while (thread_.joinable() && stop(std::chrono::seconds(60)) != 0) {
  }
  stopPinner();
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (efd_ >= 0) ::close(efd_);
}

// The ring belongs to the owner thread: it is created there.
Status UringEngine::init() {
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) return {Code::kNotSupported, fmt::format("eventfd: {}", std::strerror(errno))};
  // Shared with the owner thread: set_value() may still be running there
  // when fut.get() returns here, so the promise must outlive this frame.
  auto ready = std::make_shared<std::promise<Status>>();
  auto fut = ready->get_future();
  thread_ = std::thread([this, ready] { main(ready.get()); });
  Status s = fut.get();
  if (!s.ok()) thread_.join();
  return s;
}

Status UringEngine::setup() {
  unsigned entries = 8;
  while (entries < opts_.io_depth * 2 + 8) entries <<= 1;
  const unsigned base = IORING_SETUP_CQSIZE;
  // Most preferred first; the kernel answers EINVAL for flags it lacks.
  std::vector<unsigned> tries;
  if (opts_.sqpoll) {
    tries = {base | IORING_SETUP_SQPOLL, IORING_SETUP_SQPOLL};
  } else {
    tries = {base | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, base | IORING_SETUP_COOP_TASKRUN, base,
             0};
  }
  int r = -EINVAL;
  for (unsigned flags : tries) {
    io_uring_params p{};
    p.flags = flags;
    p.cq_entries = entries * 4;
    if (flags & IORING_SETUP_SQPOLL) p.sq_thread_idle = opts_.sqpoll_idle_ms;
    r = io_uring_queue_init_params(entries, &ring_, &p);
    if (r != -EINVAL) {
      ring_flags_ = flags;
      break;
    }
  }
  if (r < 0)
    return {Code::kNotSupported, fmt::format("io_uring_queue_init({} entries): {}", entries, std::strerror(-r))};
  ring_ok_ = true;

  if (opts_.fixed_buffers && opts_.max_fixed_buffers > 0) {
    r = io_uring_register_buffers_sparse(&ring_, opts_.max_fixed_buffers);
    if (r == 0) {
      fixed_buffers_ = true;
      for (int i = static_cast<int>(opts_.max_fixed_buffers) - 1; i >= 0; --i) free_bufs_.push_back(i);
    } else {
      HLOG_INFO("file/uring: no registered buffers ({}); using plain reads/writes", std::strerror(-r));
    }
  }
  if (opts_.fixed_files && opts_.max_fixed_files > 0) {
    r = io_uring_register_files_sparse(&ring_, opts_.max_fixed_files);
    if (r == 0) {
      fixed_files_ = true;
      for (int i = static_cast<int>(opts_.max_fixed_files) - 1; i >= 0; --i) free_files_.push_back(i);
    } else {
      HLOG_INFO("file/uring: no registered files ({}); using plain fds", std::strerror(-r));
    }
  }
  HLOG_DEBUG("file/uring: ring of {} entries, flags {:#x}", entries, ring_flags_);
  return Status::OK();
}

void UringEngine::main(std::promise<Status>* ready) {
  owner_id_ = std::this_thread::get_id();
  Status s = setup();
  bool ok = s.ok();
  ready->set_value(std::move(s));
  if (!ok) return;
  // Runs before start(): registrations may come first. No op (and so no
  // completion, which needs the sink) can arrive before start().
  run();
}

Status UringEngine::start(CompletionSink sink) {
  // The owner reads sink_ only after taking ops from the queue under mu_.
  std::lock_guard lk(mu_);
  sink_ = std::move(sink);
  return Status::OK();
}

size_t UringEngine::stop(std::chrono::milliseconds timeout) {
  stopPinner();
  if (!thread_.joinable()) return 0;
  {
    std::lock_guard lk(mu_);
    stop_req_ = true;
  }
  wake();
  std::unique_lock lk(done_mu_);
  if (!done_cv_.wait_for(lk, timeout, [&] { return done_; })) {
    size_t left = outstanding_.load();
    HLOG_ERROR("file/uring: {} I/O(s) did not finish within {} ms of shutdown; the ring, its thread and the "
               "memory those I/Os reference are quarantined (never freed)",
               left, timeout.count());
    return left ? left : 1;
  }
  lk.unlock();
  thread_.join();
  return 0;
}

void UringEngine::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(efd_, &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is already non-zero, the owner will wake anyway
}

bool UringEngine::onOwner(std::function<void()> fn, bool wait) {
  if (std::this_thread::get_id() == owner_id_) {
    fn();
    return true;
  }
  std::promise<void> done;
  auto fut = done.get_future();
  {
    std::lock_guard lk(mu_);
    if (exited_) return false;
    cmd_q_.push_back(Command{std::move(fn), wait ? &done : nullptr});
  }
  if (need_wake_.exchange(false)) wake();
  if (wait) fut.wait();
  return true;
}

int UringEngine::addFile(int fd) {
  if (!fixed_files_) return -1;
  int slot;
  {
    std::lock_guard lk(reg_mu_);
    if (free_files_.empty()) return -1;
    slot = free_files_.back();
    free_files_.pop_back();
  }
  int r = -ECANCELED;
  // Synchronous: the caller may close fd as soon as removeFile() returns.
  onOwner([&] { r = io_uring_register_files_update(&ring_, static_cast<unsigned>(slot), &fd, 1); });
  if (r != 1) {
    HLOG_DEBUG("file/uring: register fd {} as fixed file: {}", fd, r < 0 ? std::strerror(-r) : "not updated");
    std::lock_guard lk(reg_mu_);
    free_files_.push_back(slot);
    return -1;
  }
  return slot;
}

void UringEngine::removeFile(int token) {
  if (token < 0) return;
  // The table holds its own reference to the file, so the caller may close
  // its fd at once; the slot is reused only after the owner cleared it.
  auto clear = [this, token] {
    int none = -1;
    int r = io_uring_register_files_update(&ring_, static_cast<unsigned>(token), &none, 1);
    if (r != 1) HLOG_WARN("file/uring: unregister fixed file slot {}: {}", token, r < 0 ? std::strerror(-r) : "?");
    std::lock_guard lk(reg_mu_);
    free_files_.push_back(token);
  };
  if (!onOwner(clear, false)) {  // the owner is gone: so is any use of the table
    std::lock_guard lk(reg_mu_);
    free_files_.push_back(token);
  }
}

void UringEngine::submit(std::span<const IoOp> ops) {
  if (ops.empty()) return;
  std::vector<Queued> qs;
  qs.reserve(ops.size());
  for (const auto& op : ops) {
    // The fixed buffer is found now: op.memory may go once submit returns.
    Queued& q = qs.emplace_back(Queued{op, fixedBuffer(op)});
    q.op.memory = nullptr;
  }
  outstanding_ += ops.size();
  {
    std::lock_guard lk(mu_);
    for (auto& q : qs) queue_.push_back(q);
  }
  if (need_wake_.exchange(false)) wake();
}

void UringEngine::cancel(std::span<const uint64_t> cookies) {
  if (cookies.empty()) return;
  {
    std::lock_guard lk(mu_);
    cancel_q_.insert(cancel_q_.end(), cookies.begin(), cookies.end());
  }
  if (need_wake_.exchange(false)) wake();
}

int UringEngine::enter(unsigned wait_nr) {
  const int r = io_uring_submit_and_wait(&ring_, wait_nr);
  st_calls_++;
  if (r > 0 && static_cast<uint64_t>(r) > st_largest_.load(std::memory_order_relaxed))
    st_largest_.store(static_cast<uint64_t>(r), std::memory_order_relaxed);
  return r;
}

io_uring_sqe* UringEngine::getSqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {
    enter(0);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void UringEngine::prep(const Queued& q, io_uring_sqe* sqe) {
  const IoOp& op = q.op;
  int fd = op.file_token >= 0 ? op.file_token : op.fd;
  auto len = static_cast<unsigned>(op.len);
  if (op.iov_count > 0) {
    if (op.write)
      io_uring_prep_writev(sqe, fd, op.iov, op.iov_count, op.offset);
    else
      io_uring_prep_readv(sqe, fd, op.iov, op.iov_count, op.offset);
  } else if (q.buf_index >= 0) {
    if (op.write)
      io_uring_prep_write_fixed(sqe, fd, op.buf, len, op.offset, q.buf_index);
    else
      io_uring_prep_read_fixed(sqe, fd, op.buf, len, op.offset, q.buf_index);
    st_fixed_buf_++;
    counters_->fixed_buffer_ops++;
  } else if (op.write) {
    io_uring_prep_write(sqe, fd, op.buf, len, op.offset);
  } else {
    io_uring_prep_read(sqe, fd, op.buf, len, op.offset);
  }
  if (op.file_token >= 0) {
    sqe->flags |= IOSQE_FIXED_FILE;
    st_fixed_file_++;
    counters_->fixed_file_ops++;
  }
  io_uring_sqe_set_data64(sqe, op.cookie);
}

void UringEngine::reap(std::vector<IoCompletion>& done) {
  io_uring_cqe* cqes[64];
  for (;;) {
    unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
    if (n == 0) break;
    for (unsigned i = 0; i < n; ++i) {
      uint64_t ud = io_uring_cqe_get_data64(cqes[i]);
      if (ud == kWakeTag) {
        wake_armed_ = false;
        uint64_t v;
        ssize_t r = ::read(efd_, &v, sizeof(v));
        (void)r;
      } else if (ud == kCancelTag) {
        // Result of a cancel request: 0, -ENOENT (already done) or -EALREADY
        // (running; it completes on its own). The op's own CQE says the rest.
      } else {
        inflight_.erase(ud);
        done.push_back(IoCompletion{ud, cqes[i]->res});
      }
    }
    io_uring_cq_advance(&ring_, n);
  }
}

void UringEngine::run() {
  std::vector<Queued> incoming;
  std::vector<uint64_t> cancels;
  std::vector<Command> cmds;
  std::vector<IoCompletion> done;
  bool stopping = false;
  std::unordered_set<uint64_t> cancel_sent;
  for (;;) {
    {
      std::lock_guard lk(mu_);
      incoming.swap(queue_);
      cancels.swap(cancel_q_);
      cmds.swap(cmd_q_);
      stopping = stop_req_;
    }
    // Registrations first: ops queued after them may use what they register.
    for (auto& c : cmds) {
      c.fn();
      if (c.done) c.done->set_value();
    }
    cmds.clear();
    for (auto& q : incoming) backlog_.push_back(q);
    incoming.clear();

    // Cancels: an op still in our backlog never reaches the kernel.
    if (stopping) {
      for (uint64_t c : inflight_) cancels.push_back(c);
      for (auto& q : backlog_) cancels.push_back(q.op.cookie);
    }
    for (uint64_t c : cancels) {
      bool found = false;
      for (auto it = backlog_.begin(); it != backlog_.end(); ++it) {
        if (it->op.cookie == c) {
          done.push_back(IoCompletion{c, -ECANCELED});
          backlog_.erase(it);
          found = true;
          break;
        }
      }
      if (found || !inflight_.count(c) || cancel_sent.count(c)) continue;
      io_uring_sqe* sqe = getSqe();
      if (!sqe) continue;
      io_uring_prep_cancel64(sqe, c, 0);
      io_uring_sqe_set_data64(sqe, kCancelTag);
      cancel_sent.insert(c);
      st_cancels_++;
    }
    cancels.clear();

    // Fill the ring up to the queue depth.
    while (!backlog_.empty() && inflight_.size() < opts_.io_depth) {
      io_uring_sqe* sqe = getSqe();
      if (!sqe) break;
      prep(backlog_.front(), sqe);
      inflight_.insert(backlog_.front().op.cookie);
      const bool alone = backlog_.front().op.len >= kSubmitAloneBytes;
      backlog_.pop_front();
      st_submitted_++;
      if (alone && !opts_.sqpoll) enter(0);
    }
    if (!wake_armed_) {
      io_uring_sqe* sqe = getSqe();
      if (sqe) {
        io_uring_prep_poll_add(sqe, efd_, POLLIN);
        io_uring_sqe_set_data64(sqe, kWakeTag);
        wake_armed_ = true;
      }
    }

    if (!done.empty()) {
      outstanding_ -= done.size();
      sink_(done);
      done.clear();
      continue;  // the sink may have queued more work
    }
    if (stopping && inflight_.empty() && backlog_.empty()) break;

    unsigned wait_nr = 1;
    need_wake_.store(true);
    {
      std::lock_guard lk(mu_);
      if (!queue_.empty() || !cancel_q_.empty() || !cmd_q_.empty() || stop_req_ != stopping) {
        wait_nr = 0;
        need_wake_.store(false);
      }
    }
    int r = enter(wait_nr);
    need_wake_.store(false);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME)
      HLOG_WARN("file/uring: io_uring_submit_and_wait: {}", std::strerror(-r));
    reap(done);
    for (auto& c : done) cancel_sent.erase(c.cookie);
    if (!done.empty()) {
      outstanding_ -= done.size();
      sink_(done);
      done.clear();
    }
  }
  {
    // Commands that arrive from now on are not run; wake their callers.
    std::lock_guard lk(mu_);
    exited_ = true;
    for (auto& c : cmd_q_)
      if (c.done) c.done->set_value();
    cmd_q_.clear();
  }
  {
    std::lock_guard lk(done_mu_);
    done_ = true;
  }
  done_cv_.notify_all();
}

IoEngineStats UringEngine::stats() const {
  IoEngineStats s;
  s.submitted = st_submitted_;
  s.submit_calls = st_calls_;
  s.largest_submit = st_largest_;
  s.fixed_buffer_ops = st_fixed_buf_;
  s.fixed_file_ops = st_fixed_file_;
  s.cancels = st_cancels_;
  s.registered_bytes = st_reg_bytes_;
  return s;
}

}  // namespace uring_detail

bool uringCompiledIn() { return true; }

Status makeUringEngine(const IoEngineOptions& opts, std::shared_ptr<FileCounters> counters,
                       std::unique_ptr<IoEngine>& out) {
  auto e = std::make_unique<uring_detail::UringEngine>(opts, std::move(counters));
  Status s = e->init();
  if (!s.ok()) return s;
  out = std::move(e);
  return Status::OK();
}

}  // namespace hawser::file

#else  // !HAWSER_HAVE_URING

namespace hawser::file {
bool uringCompiledIn() { return false; }
Status makeUringEngine(const IoEngineOptions&, std::shared_ptr<FileCounters>, std::unique_ptr<IoEngine>&) {
  return {Code::kNotSupported, "this build has no io_uring engine (HAWSER_WITH_URING=OFF or liburing missing)"};
}
}  // namespace hawser::file

#endif
