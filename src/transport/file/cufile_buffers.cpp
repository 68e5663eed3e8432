// GPU buffers registered with cuFile in the background. See cufile_buffers.h.
#include "transport/file/cufile_buffers.h"

#include <vector>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/file/cufile_engine.h"

namespace hawser::file {

void CufileBuffers::add(void* addr, size_t len) {
  if (!addr || len == 0) return;
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;  // unregistered: the library stages it itself
    queue_.push_back(Job{reinterpret_cast<uint64_t>(addr), len});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

void CufileBuffers::remove(void* addr, size_t len) {
  const auto base = reinterpret_cast<uint64_t>(addr);
  auto inRange = [&](uint64_t a) { return a >= base && a - base < len; };
  {
    std::unique_lock lk(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) it = inRange(it->addr) ? queue_.erase(it) : it + 1;
    // A registration of this range that already reached the library is
    // finished first, so that it is deregistered below, not left behind.
    done_cv_.wait(lk, [&] { return !running_ || !inRange(running_->addr); });
  }
  deregisterRange(base, len);
}

void CufileBuffers::locate(void* p, void*& base, off_t& off, int& device) const {
  const auto a = reinterpret_cast<uint64_t>(p);
  {
    std::shared_lock bl(buf_mu_);
    auto it = bufs_.upper_bound(a);
    if (it != bufs_.begin()) {
      --it;
      if (a - it->first < it->second.len) {
        base = reinterpret_cast<void*>(it->first);
        off = static_cast<off_t>(a - it->first);
        device = it->second.device;
        return;
      }
    }
  }
  base = p;
  off = 0;
  device = -1;
}

size_t CufileBuffers::queued() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

void CufileBuffers::stop() {
  size_t dropped = 0;
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
  deregisterRange(0, SIZE_MAX);
}

void CufileBuffers::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stopped_ || !queue_.empty(); });
    if (stopped_) return;
    running_ = queue_.front();
    queue_.pop_front();
    lk.unlock();
    registerOne(*running_);
    lk.lock();
    running_.reset();
    done_cv_.notify_all();
  }
}

void CufileBuffers::registerOne(const Job& j) {
  auto* addr = reinterpret_cast<void*>(j.addr);
  const gpu::CudaDriver* d = gpu::CudaDriver::get();
  const int dev = d ? d->pointer(addr).ordinal : -1;
  if (d && dev >= 0) (void)d->bindDevice(dev);
  cufile::Error e = a_.BufRegister(addr, j.len, 0);
  if (e.err == cufile::kSuccess) {
    std::unique_lock bl(buf_mu_);
    bufs_[j.addr] = Buf{j.len, dev};
    return;
  }
  // Unregistered GPU memory still works: the library stages it itself.
  HLOG_INFO("file/cufile: cuFileBufRegister({:p}, {}) failed: {}; its I/O goes through the library's own bounce "
            "buffers",
            addr, j.len, CufileLibrary::describe(e));
}

void CufileBuffers::deregisterRange(uint64_t base, size_t len) {
  std::vector<uint64_t> gone;
  {
    std::unique_lock bl(buf_mu_);
    for (auto it = bufs_.lower_bound(base); it != bufs_.end() && it->first - base < len;) {
      gone.push_back(it->first);
      it = bufs_.erase(it);
    }
  }
  for (uint64_t b : gone) {
    cufile::Error e = a_.BufDeregister(reinterpret_cast<void*>(b));
    if (e.err != cufile::kSuccess)
      HLOG_WARN("file/cufile: cuFileBufDeregister({:#x}): {}", b, CufileLibrary::describe(e));
  }
}

}  // namespace hawser::file
