// GPU buffers registered with cuFile in the background. See cufile_buffers.h.
#include "transport/file/cufile_buffers.h"

#include <algorithm>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/file/cufile_library.h"

namespace hawser::file {

void CufileMemory::locate(void* p, size_t n, void*& base, off_t& off) const {
  const auto a = reinterpret_cast<uint64_t>(p), b = reinterpret_cast<uint64_t>(addr);
  if (registered.load(std::memory_order_acquire) && a >= b && n <= len && a - b <= len - n) {
    base = addr;
    off = static_cast<off_t>(a - b);
    return;
  }
  base = p;
  off = 0;
}

void CufileBuffers::add(std::shared_ptr<CufileMemory> m) {
  if (!m || !m->addr || m->len == 0) return;
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;  // unregistered: the library stages it itself
    queue_.push_back(std::move(m));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

void CufileBuffers::remove(CufileMemory& m) {
  {
    std::unique_lock lk(mu_);
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const auto& q) { return q.get() == &m; }),
                 queue_.end());
    // A registration of it that already reached the library is finished
    // first, so that it is deregistered below, not left behind.
    done_cv_.wait(lk, [&] { return running_.get() != &m; });
    auto it = std::find_if(registered_.begin(), registered_.end(), [&](const auto& r) { return r.get() == &m; });
    if (it == registered_.end()) return;
    registered_.erase(it);
  }
  deregister(m);
}

size_t CufileBuffers::queued() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

void CufileBuffers::stop() {
  size_t dropped = 0;
  std::vector<std::shared_ptr<CufileMemory>> left;
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    dropped = queue_.size();
    queue_.clear();
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();  // after the registration it is running, if any
  if (dropped)
    HLOG_DEBUG("file/cufile: {} buffer registration(s) still queued at shutdown were dropped", dropped);
  {
    std::lock_guard lk(mu_);
    left.swap(registered_);
  }
  for (auto& m : left) deregister(*m);
}

void CufileBuffers::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stopped_ || !queue_.empty(); });
    if (stopped_) return;
    running_ = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    registerOne(running_);
    lk.lock();
    running_.reset();
    done_cv_.notify_all();
  }
}

void CufileBuffers::registerOne(const std::shared_ptr<CufileMemory>& m) {
  // The buffer's GPU is the region's (found at registration): no driver query.
  if (const gpu::CudaDriver* d = gpu::CudaDriver::get(); d && m->device >= 0) (void)d->bindDevice(m->device);
  cufile::Error e = a_.BufRegister(m->addr, m->len, 0);
  if (e.err == cufile::kSuccess) {
    std::lock_guard lk(mu_);
    registered_.push_back(m);
    m->registered.store(true, std::memory_order_release);
    return;
  }
  // Unregistered GPU memory still works: the library stages it itself.
  HLOG_INFO("file/cufile: cuFileBufRegister({:p}, {}) failed: {}; its I/O goes through the library's own bounce "
            "buffers",
            m->addr, m->len, CufileLibrary::describe(e));
}

void CufileBuffers::deregister(CufileMemory& m) {
  // I/O submitted from now on names the address itself.
  m.registered.store(false, std::memory_order_release);
  cufile::Error e = a_.BufDeregister(m.addr);
  if (e.err != cufile::kSuccess)
    HLOG_WARN("file/cufile: cuFileBufDeregister({:p}): {}", m.addr, CufileLibrary::describe(e));
}

}  // namespace hawser::file
