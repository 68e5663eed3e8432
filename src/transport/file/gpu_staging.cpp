// Staging slots and pipelined GPU copies. See gpu_staging.h.
#include "transport/file/gpu_staging.h"

#include <condition_variable>
#include <deque>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/copy_stream.h"
#include "transport/file/file_counters.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

// One thread and one stream of one GPU, for copies of one direction.
class GpuStaging::Lane {
 public:
  Lane(int device, bool to_gpu, const gpu::CopySettings& settings, const CopySink& sink, gpu::CopyCounters& counters)
      : device_(device), to_gpu_(to_gpu), settings_(settings), sink_(sink), counters_(counters) {
    thread_ = std::thread([this] { run(); });
  }
  ~Lane() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void push(std::vector<gpu::CopyRun> runs, uint64_t cookie) {
    {
      std::lock_guard lk(mu_);
      queue_.push_back(Job{std::move(runs), cookie, 0});
    }
    cv_.notify_all();
  }

 private:
  struct Job {
    std::vector<gpu::CopyRun> runs;
    uint64_t cookie;
    uint64_t ticket;
  };

  void run() {
    std::unique_ptr<gpu::CopyStream> stream;
    Status opened = gpu::CopyStream::open(device_, stream, settings_);
    if (!opened.ok())
      HLOG_ERROR("file: cannot open a copy stream on GPU {}: {}; its staged slices fail", device_,
                 opened.toString());
    struct Issued {
      uint64_t cookie;
      uint64_t ticket;
    };
    std::deque<Issued> issued;  // queued on the stream, oldest first
    std::vector<Job> fresh;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        if (issued.empty()) cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty() && issued.empty()) break;
        fresh.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
        queue_.clear();
      }
      // Queue every new copy on the stream first, then wait for the oldest:
      // the stream always holds all the work there is.
      for (Job& j : fresh) {
        gpu::CopyReport rep;
        Status s = opened.ok() ? stream->copyRuns(j.runs, j.ticket, &rep) : opened;
        if (!s.ok()) {
          uint64_t bytes = 0;
          for (const auto& r : j.runs) bytes += r.len;
          // Copies of the window already queued may still run: the slot and
          // the GPU memory are let go only once the stream has drained.
          if (opened.ok()) (void)stream->waitAll();
          sink_(j.cookie, Status(Code::kIoError, fmt::format("GPU {} copy of {} runs, {} bytes ({}): {}", device_,
                                                             j.runs.size(), bytes,
                                                             to_gpu_ ? "to the GPU" : "from the GPU", s.message())));
          continue;
        }
        counters_.add(rep);
        issued.push_back(Issued{j.cookie, j.ticket});
      }
      fresh.clear();
      if (issued.empty()) continue;
      Issued j = issued.front();
      issued.pop_front();
      Status s = stream->wait(j.ticket);
      sink_(j.cookie, s.ok() ? s : Status(Code::kIoError, fmt::format("GPU {} copy failed: {}", device_, s.message())));
      // Whatever else has finished goes out too, without waiting.
      while (!issued.empty()) {
        bool done = false;
        Status p = stream->poll(issued.front().ticket, done);
        if (!p.ok() || !done) break;
        sink_(issued.front().cookie, Status::OK());
        issued.pop_front();
      }
    }
  }

  const int device_;
  const bool to_gpu_;
  const gpu::CopySettings settings_;
  const CopySink& sink_;
  gpu::CopyCounters& counters_;  // the transport's, which GpuStaging holds
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

GpuStaging::GpuStaging(std::shared_ptr<FileCounters> counters) : counters_(std::move(counters)) {}
GpuStaging::~GpuStaging() { stop(); }

Status GpuStaging::init(size_t slots, size_t slot_size, IoEngine* uring, const gpu::CopySettings& copy,
                        CopySink sink) {
  Status s = gpu::PinnedBuffers::create(slots, slot_size, buffers_);
  if (!s.ok()) return s;
  copy_ = copy;
  sink_ = std::move(sink);
  uring_ = uring;
  // Registered outside any lock of the transport (a round trip to the ring's thread).
  if (uring_) memory_ = uring_->addMemory(buffers_->base(), buffers_->bytes(), -1);
  return Status::OK();
}

GpuStaging::Lane* GpuStaging::lane(int device, bool to_gpu) {
  std::lock_guard lk(mu_);
  auto& l = lanes_[{device, to_gpu}];
  if (!l) l = std::make_unique<Lane>(device, to_gpu, copy_, sink_, counters_->copy);
  return l.get();
}

void GpuStaging::copy(int device, bool to_gpu, std::vector<gpu::CopyRun> runs, uint64_t cookie) {
  lane(device, to_gpu)->push(std::move(runs), cookie);
}

void GpuStaging::stop() {
  std::map<std::pair<int, bool>, std::unique_ptr<Lane>> lanes;
  {
    std::lock_guard lk(mu_);
    lanes.swap(lanes_);
  }
  lanes.clear();  // each lane finishes its copies first
  if (memory_ && uring_) uring_->removeMemory(*memory_);
  memory_.reset();
  uring_ = nullptr;
}

}  // namespace hawser::file
