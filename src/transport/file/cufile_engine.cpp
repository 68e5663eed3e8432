// cuFile's batch I/O engine. See cufile_engine.h.
#include "transport/file/cufile_engine.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/file/cufile_buffers.h"
#include "transport/file/file_counters.h"

namespace hawser::file {

namespace {

class Engine final : public CufileEngine {
 public:
  Engine(const CufileLibrary& lib, uint32_t depth, uint32_t batch, std::shared_ptr<FileCounters> counters)
      : lib_(lib), a_(lib.api()), counters_(std::move(counters)), depth_(std::max<uint32_t>(depth, 1)),
        batch_(std::max<uint32_t>(1, std::min<uint32_t>(batch, lib.maxBatch()))), buffers_(lib.api()) {
    max_handles_ = std::min<uint32_t>(depth_, 64);
  }
  ~Engine() override {
    while (thread_.joinable() && stop(std::chrono::seconds(60)) != 0) {
    }
  }

  const char* name() const override { return "cufile"; }
  const CufileLibrary& library() const override { return lib_; }

  Status start(CompletionSink sink) override {
    sink_ = std::move(sink);
    thread_ = std::thread([this] { run(); });
    return Status::OK();
  }

  // I/O first, then buffer registrations: queued ones are dropped, a
  // running one is waited for, and every registered buffer is deregistered
  // (unless I/O never ended: its memory stays registered, quarantined).
  size_t stop(std::chrono::milliseconds timeout) override {
    if (!thread_.joinable()) {
      buffers_.stop();
      return 0;
    }
    {
      std::lock_guard lk(mu_);
      stop_req_ = true;
    }
    cv_.notify_all();
    std::unique_lock lk(done_mu_);
    if (!done_cv_.wait_for(lk, timeout, [&] { return done_; })) {
      size_t left = outstanding_.load();
      HLOG_ERROR("file/cufile: {} I/O(s) did not finish within {} ms of shutdown; their batches and memory are "
                 "quarantined (never freed)",
                 left, timeout.count());
      return left ? left : 1;
    }
    lk.unlock();
    thread_.join();
    buffers_.stop();
    return 0;
  }

  Status registerFile(int fd, int& token) override {
    cufile::Descr d{};
    d.type = cufile::kHandleTypeOpaqueFd;
    d.handle.fd = fd;
    cufile::Handle h = nullptr;
    cufile::Error e = a_.HandleRegister(&h, &d);
    if (e.err != cufile::kSuccess)
      return {Code::kNotSupported, fmt::format("cuFileHandleRegister: {}", CufileLibrary::describe(e))};
    std::lock_guard lk(reg_mu_);
    if (!free_files_.empty()) {
      token = free_files_.back();
      free_files_.pop_back();
      files_[static_cast<size_t>(token)] = h;
    } else {
      token = static_cast<int>(files_.size());
      files_.push_back(h);
    }
    return Status::OK();
  }

  void removeFile(int token) override {
    if (token < 0) return;
    cufile::Handle h;
    {
      std::lock_guard lk(reg_mu_);
      if (static_cast<size_t>(token) >= files_.size() || !files_[static_cast<size_t>(token)]) return;
      h = files_[static_cast<size_t>(token)];
      files_[static_cast<size_t>(token)] = nullptr;
      free_files_.push_back(token);
    }
    a_.HandleDeregister(h);
  }

  // In the background (cufile_buffers.h): registering costs tens of ms.
  std::shared_ptr<EngineMemory> addMemory(void* addr, size_t len, int device) override {
    auto m = std::make_shared<CufileMemory>(this, addr, len, device);
    buffers_.add(m);
    return m;
  }
  void removeMemory(EngineMemory& m) override {
    if (m.engine == this) buffers_.remove(static_cast<CufileMemory&>(m));
  }

  // How each entry names its buffer is decided here, from the memory the
  // op carries (registered: the buffer's base and the offset in it).
  void submit(std::span<const IoOp> ops) override {
    if (ops.empty()) return;
    std::vector<Entry> es;
    es.reserve(ops.size());
    for (const IoOp& op : ops) {
      Entry& e = es.emplace_back(Entry{op, op.buf, 0});
      if (op.memory && op.memory->engine == this)
        static_cast<const CufileMemory&>(*op.memory).locate(op.buf, op.len, e.base, e.off);
      e.op.memory = nullptr;  // it may go once submit returns
    }
    outstanding_ += ops.size();
    {
      std::lock_guard lk(mu_);
      queue_.insert(queue_.end(), es.begin(), es.end());
    }
    cv_.notify_all();
  }

  void cancel(std::span<const uint64_t> cookies) override {
    if (cookies.empty()) return;
    {
      std::lock_guard lk(mu_);
      cancel_q_.insert(cancel_q_.end(), cookies.begin(), cookies.end());
    }
    cv_.notify_all();
  }

  bool needsAlignment() const override { return false; }

  IoEngineStats stats() const override {
    IoEngineStats s;
    s.submitted = st_submitted_;
    s.submit_calls = st_batches_;
    s.cancels = st_cancels_;
    return s;
  }

 private:
  // An op and the buffer its entry names.
  struct Entry {
    IoOp op;
    void* base = nullptr;
    off_t off = 0;
  };
  struct Batch {
    cufile::BatchHandle h = nullptr;
    size_t outstanding = 0;
    std::vector<uint64_t> cookies;
    bool cancel_sent = false;
  };
  struct Live {
    Batch* batch;
    bool cancel;
  };

  cufile::Handle fileHandle(int token) const {
    std::lock_guard lk(reg_mu_);
    if (token < 0 || static_cast<size_t>(token) >= files_.size()) return nullptr;
    return files_[static_cast<size_t>(token)];
  }

  // A batch handle from the pool, set up on first need; nullptr when every
  // allowed handle is busy, or set-up failed (`err` then says why).
  cufile::BatchHandle takeHandle(std::string& err) {
    if (!pool_.empty()) {
      auto h = pool_.back();
      pool_.pop_back();
      return h;
    }
    if (handles_ >= max_handles_) return nullptr;
    cufile::BatchHandle h = nullptr;
    cufile::Error e = a_.BatchIOSetUp(&h, batch_);
    if (e.err != cufile::kSuccess) {
      err = fmt::format("cuFileBatchIOSetUp({}): {}", batch_, CufileLibrary::describe(e));
      return nullptr;
    }
    handles_++;
    return h;
  }

  static int64_t resultOf(const cufile::IoEvents& ev) {
    const auto ret = static_cast<int64_t>(static_cast<ssize_t>(ev.ret));
    switch (ev.status) {
      case cufile::kStatusComplete:
        return ret < 0 ? (ret >= -4095 ? ret : -EIO) : ret;
      case cufile::kStatusCanceled: return -ECANCELED;
      case cufile::kStatusTimeout: return -ETIMEDOUT;
      case cufile::kStatusInvalid: return -EINVAL;
      default:  // kStatusFailed
        return ret < 0 && ret >= -4095 ? ret : -EIO;
    }
  }

  void takeEvents(Batch* b, const cufile::IoEvents* evs, unsigned n, std::vector<IoCompletion>& done) {
    for (unsigned i = 0; i < n; ++i) {
      const auto& ev = evs[i];
      if (ev.status == cufile::kStatusWaiting || ev.status == cufile::kStatusPending) continue;
      const auto cookie = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ev.cookie));
      auto it = live_.find(cookie);
      if (it == live_.end() || it->second.batch != b) {
        HLOG_WARN("file/cufile: completion for unknown cookie {:#x} (status {:#x}) ignored", cookie, ev.status);
        continue;
      }
      live_.erase(it);
      b->outstanding--;
      done.push_back(IoCompletion{cookie, resultOf(ev)});
    }
  }

  // Polls every batch in flight (min_nr 0; `wait_oldest`: waits a little
  // for the oldest one) and retires batches with nothing outstanding.
  void reap(bool wait_oldest, std::vector<IoCompletion>& done) {
    std::vector<cufile::IoEvents> evs(batch_);
    for (size_t i = 0; i < batches_.size(); ++i) {
      Batch* b = batches_[i].get();
      unsigned nr = batch_;
      timespec ts{0, (wait_oldest && i == 0) ? 200 * 1000 : 0};
      cufile::Error e = a_.BatchIOGetStatus(b->h, (wait_oldest && i == 0) ? 1 : 0, &nr, evs.data(), &ts);
      if (e.err != cufile::kSuccess) {
        HLOG_WARN("file/cufile: cuFileBatchIOGetStatus: {}", CufileLibrary::describe(e));
        continue;
      }
      takeEvents(b, evs.data(), std::min(nr, batch_), done);
    }
    for (auto it = batches_.begin(); it != batches_.end();) {
      if ((*it)->outstanding == 0) {
        pool_.push_back((*it)->h);
        it = batches_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void submitBacklog(std::vector<IoCompletion>& done) {
    while (!backlog_.empty() && inflight() < depth_) {
      std::string err;
      cufile::BatchHandle h = takeHandle(err);
      if (!h) {
        if (!err.empty() && batches_.empty()) {
          // Nothing in flight will free a handle: fail what waits.
          HLOG_WARN("file/cufile: {}", err);
          for (auto& e : backlog_) done.push_back(IoCompletion{e.op.cookie, -EIO});
          backlog_.clear();
        }
        return;
      }
      const size_t n = std::min<size_t>({backlog_.size(), batch_, depth_ - inflight()});
      std::vector<cufile::IoParams> params;
      auto b = std::make_unique<Batch>();
      b->h = h;
      int dev = -1;
      for (size_t i = 0; i < n; ++i) {
        const Entry e = backlog_.front();
        const IoOp& op = e.op;
        backlog_.pop_front();
        cufile::Handle fh = fileHandle(op.file_token);
        if (!fh || op.iov_count > 0) {  // an entry is one buffer: the transport never sends iovecs here
          done.push_back(IoCompletion{op.cookie, fh ? -EINVAL : -EBADF});
          continue;
        }
        cufile::IoParams p{};
        p.mode = cufile::kBatchMode;
        p.u.batch.devPtr_base = e.base;
        p.u.batch.devPtr_offset = e.off;
        if (dev < 0) dev = op.device;
        p.u.batch.file_offset = static_cast<off_t>(op.offset);
        p.u.batch.size = op.len;
        p.fh = fh;
        p.opcode = op.write ? cufile::kOpWrite : cufile::kOpRead;
        p.cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(op.cookie));
        params.push_back(p);
      }
      if (params.empty()) {
        pool_.push_back(h);
        continue;
      }
      if (const gpu::CudaDriver* d = gpu::CudaDriver::get(); d && dev >= 0) (void)d->bindDevice(dev);
      cufile::Error e = a_.BatchIOSubmit(h, static_cast<unsigned>(params.size()), params.data(), 0);
      if (e.err != cufile::kSuccess) {
        HLOG_WARN("file/cufile: cuFileBatchIOSubmit of {} entries: {}", params.size(), CufileLibrary::describe(e));
        for (auto& p : params) done.push_back(IoCompletion{reinterpret_cast<uintptr_t>(p.cookie), -EIO});
        pool_.push_back(h);
        continue;
      }
      st_batches_++;
      st_submitted_ += params.size();
      counters_->cufile_batches++;
      for (auto& p : params) {
        const auto c = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p.cookie));
        b->cookies.push_back(c);
        live_[c] = Live{b.get(), false};
      }
      b->outstanding = params.size();
      batches_.push_back(std::move(b));
    }
  }

  size_t inflight() const { return live_.size(); }

  void applyCancels(std::vector<uint64_t>& cancels, std::vector<IoCompletion>& done) {
    for (uint64_t c : cancels) {
      auto q = std::find_if(backlog_.begin(), backlog_.end(), [&](const Entry& e) { return e.op.cookie == c; });
      if (q != backlog_.end()) {
        done.push_back(IoCompletion{c, -ECANCELED});
        backlog_.erase(q);
        continue;
      }
      auto it = live_.find(c);
      if (it == live_.end()) continue;
      it->second.cancel = true;
      maybeCancelBatch(it->second.batch);
    }
    cancels.clear();
  }

  // cuFileBatchIOCancel stops a whole batch: only once every entry still
  // running in it was asked to stop.
  void maybeCancelBatch(Batch* b) {
    if (b->cancel_sent) return;
    for (uint64_t c : b->cookies) {
      auto it = live_.find(c);
      if (it != live_.end() && !it->second.cancel) return;
    }
    cufile::Error e = a_.BatchIOCancel(b->h);
    b->cancel_sent = true;
    st_cancels_++;
    if (e.err != cufile::kSuccess)
      HLOG_WARN("file/cufile: cuFileBatchIOCancel: {} (its entries end on their own)", CufileLibrary::describe(e));
  }

  void run() {
    std::vector<Entry> incoming;
    std::vector<uint64_t> cancels;
    std::vector<IoCompletion> done;
    bool stopping = false;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        if (queue_.empty() && cancel_q_.empty() && !stop_req_ && batches_.empty() && backlog_.empty())
          cv_.wait(lk, [&] { return !queue_.empty() || !cancel_q_.empty() || stop_req_; });
        incoming.swap(queue_);
        cancels.swap(cancel_q_);
        stopping = stop_req_;
      }
      backlog_.insert(backlog_.end(), incoming.begin(), incoming.end());
      incoming.clear();
      if (stopping) {
        for (auto& e : backlog_) cancels.push_back(e.op.cookie);
        for (auto& [c, l] : live_) cancels.push_back(c);
      }
      applyCancels(cancels, done);
      if (!stopping) submitBacklog(done);
      const bool idle = done.empty();
      reap(idle && !batches_.empty(), done);
      if (!done.empty()) {
        outstanding_ -= done.size();
        sink_(done);
        done.clear();
      }
      if (stopping && backlog_.empty() && batches_.empty()) break;
    }
    for (auto h : pool_) a_.BatchIODestroy(h);
    pool_.clear();
    {
      std::lock_guard lk(done_mu_);
      done_ = true;
    }
    done_cv_.notify_all();
  }

  const CufileLibrary& lib_;
  const cufile::Api& a_;
  const std::shared_ptr<FileCounters> counters_;
  const uint32_t depth_;
  const uint32_t batch_;
  uint32_t max_handles_ = 1;
  CompletionSink sink_;
  std::thread thread_;

  // Shared with callers.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> queue_;
  std::vector<uint64_t> cancel_q_;
  bool stop_req_ = false;
  std::atomic<size_t> outstanding_{0};

  // Engine thread only.
  std::deque<Entry> backlog_;
  std::vector<std::unique_ptr<Batch>> batches_;  // submitted, oldest first
  std::unordered_map<uint64_t, Live> live_;      // cookie -> its batch
  std::vector<cufile::BatchHandle> pool_;
  uint32_t handles_ = 0;

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;

  mutable std::mutex reg_mu_;
  std::vector<cufile::Handle> files_;
  std::vector<int> free_files_;
  CufileBuffers buffers_;

  std::atomic<uint64_t> st_submitted_{0}, st_batches_{0}, st_cancels_{0};
};

}  // namespace

std::unique_ptr<CufileEngine> makeCufileEngine(const CufileLibrary& lib, uint32_t depth, uint32_t batch,
                                               std::shared_ptr<FileCounters> counters) {
  return std::make_unique<Engine>(lib, depth, batch, std::move(counters));
}

}  // namespace hawser::file
