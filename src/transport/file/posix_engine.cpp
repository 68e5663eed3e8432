// POSIX engine: pread/pwrite on a small pool of worker threads. Used where
// io_uring is unavailable and for files the file system serves only through
// the page cache (tmpfs). An op still queued can be cancelled; one inside
// pread/pwrite runs to its end (the kernel offers no way to stop it).
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/log.h"
#include "transport/file/io_engine.h"

namespace hawser::file {
namespace {

class PosixEngine final : public IoEngine {
 public:
  explicit PosixEngine(const IoEngineOptions& o) : opts_(o) {}
  ~PosixEngine() override {
    while (!workers_.empty() && stop(std::chrono::seconds(60)) != 0) {
    }
  }

  const char* name() const override { return "posix"; }

  Status start(CompletionSink sink) override {
    sink_ = std::move(sink);
    unsigned n = opts_.posix_threads ? opts_.posix_threads : 1;
    for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
    return Status::OK();
  }

  size_t stop(std::chrono::milliseconds timeout) override {
    if (workers_.empty()) return 0;
    std::unique_lock lk(mu_);
    stop_ = true;
    for (auto& op : queue_) op.cancelled = true;  // delivered as -ECANCELED by the workers
    cv_.notify_all();
    if (!idle_cv_.wait_for(lk, timeout, [&] { return queue_.empty() && running_ == 0 && exited_ == workers_.size(); })) {
      size_t left = queue_.size() + running_;
      HLOG_ERROR("file/posix: {} I/O(s) still running {} ms after shutdown; the engine and the memory they "
                 "reference are quarantined (never freed)",
                 left, timeout.count());
      return left ? left : 1;
    }
    lk.unlock();
    for (auto& t : workers_) t.join();
    workers_.clear();
    return 0;
  }

  void submit(std::span<const IoOp> ops) override {
    if (ops.empty()) return;
    {
      std::lock_guard lk(mu_);
      for (const auto& op : ops) queue_.push_back(Item{op, false});
      submitted_ += ops.size();
    }
    if (ops.size() == 1)
      cv_.notify_one();
    else
      cv_.notify_all();
  }

  void cancel(std::span<const uint64_t> cookies) override {
    std::lock_guard lk(mu_);
    std::unordered_set<uint64_t> set(cookies.begin(), cookies.end());
    bool any = false;
    for (auto& it : queue_) {
      if (set.count(it.op.cookie)) {
        it.cancelled = true;
        any = true;
      }
    }
    cancels_ += cookies.size();
    if (any) cv_.notify_one();
  }

  IoEngineStats stats() const override {
    std::lock_guard lk(mu_);
    IoEngineStats s;
    s.submitted = submitted_;
    s.cancels = cancels_;
    return s;
  }

 private:
  struct Item {
    IoOp op;
    bool cancelled = false;
  };

  void work() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) {
        if (stop_) break;
        continue;
      }
      Item it = queue_.front();
      queue_.pop_front();
      running_++;
      lk.unlock();
      IoCompletion c{it.op.cookie, -ECANCELED};
      if (!it.cancelled) c.result = run(it.op);
      sink_(std::span<const IoCompletion>(&c, 1));
      lk.lock();
      running_--;
      if (stop_ && queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
    exited_++;
    idle_cv_.notify_all();
  }

  static int64_t run(const IoOp& op) {
    const auto at = static_cast<off_t>(op.offset);
    const int n_iov = static_cast<int>(op.iov_count);
    for (;;) {
      ssize_t n = op.iov_count ? (op.write ? ::pwritev(op.fd, op.iov, n_iov, at) : ::preadv(op.fd, op.iov, n_iov, at))
                               : (op.write ? ::pwrite(op.fd, op.buf, op.len, at) : ::pread(op.fd, op.buf, op.len, at));
      if (n >= 0) return n;
      if (errno != EINTR) return -errno;
    }
  }

  IoEngineOptions opts_;
  CompletionSink sink_;
  std::vector<std::thread> workers_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Item> queue_;
  size_t running_ = 0;
  size_t exited_ = 0;
  bool stop_ = false;
  uint64_t submitted_ = 0, cancels_ = 0;
};

}  // namespace

std::unique_ptr<IoEngine> makePosixEngine(const IoEngineOptions& opts) { return std::make_unique<PosixEngine>(opts); }

}  // namespace hawser::file
