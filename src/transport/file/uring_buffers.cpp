// UringEngine's fixed buffers (uring_engine.h).
//
// Fixed buffers: a sparse table, filled lazily. addMemory only records the
// region (registering pins every page, which for untouched memory means
// faulting it in: seconds per GiB on the registering thread). The region is
// cut into pieces of 64 MiB; the first op that lies inside a piece asks for
// it and goes out as a plain read/write. A background thread faults the
// piece in (MADV_POPULATE_WRITE) and the owner registers it; later ops in
// the piece use the fixed buffer. No op ever waits for a registration. A
// registration refused by the kernel (RLIMIT_MEMLOCK, non-anonymous memory)
// only means that piece uses plain reads/writes.
#include "transport/file/io_engine.h"

#if HAWSER_HAVE_URING

#include "transport/file/uring_engine.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <cstring>

#include "base/log.h"

namespace hawser::file::uring_detail {
namespace {

constexpr uint64_t kPiece = 64ULL << 20;  // fixed buffers are registered in pieces of this size (kernel limit: 1 GiB)

}  // namespace

void UringEngine::stopPinner() {
  {
    std::lock_guard lk(reg_mu_);
    pin_stop_ = true;
  }
  pin_cv_.notify_all();
  if (pinner_.joinable()) pinner_.join();
}

void UringEngine::addMemory(void* addr, size_t len) {
  if (!fixed_buffers_ || len == 0) return;
  std::lock_guard lk(reg_mu_);
  recorded_[reinterpret_cast<uint64_t>(addr)] = Recorded{len, ++next_gen_};
  recorded_count_.store(recorded_.size(), std::memory_order_release);
}

void UringEngine::removeMemory(void* addr, size_t len) {
  if (!fixed_buffers_) return;
  const auto base = reinterpret_cast<uint64_t>(addr);
  // On the owner, so that no registration of these pieces can follow it.
  // Synchronous: the caller may free and remap the memory right after.
  auto drop = [this, base, len] {
    std::vector<Chunk> gone;
    {
      std::lock_guard lk(reg_mu_);
      recorded_.erase(base);
      recorded_count_.store(recorded_.size(), std::memory_order_release);
      for (auto it = asked_.begin(); it != asked_.end();)
        it = *it >= base && *it < base + len ? asked_.erase(it) : std::next(it);
      // From now on no new op uses these chunks.
      std::unique_lock bl(buf_mu_);
      auto it = chunks_.lower_bound(base);
      while (it != chunks_.end() && it->first < base + len) {
        gone.push_back(it->second);
        st_reg_bytes_ -= it->second.len;
        it = chunks_.erase(it);
      }
    }
    for (const Chunk& c : gone) {
      iovec iov{nullptr, 0};
      __u64 tag = 0;
      int r = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(c.index), &iov, &tag, 1);
      if (r != 1) HLOG_WARN("file/uring: unregister buffer slot {}: {}", c.index, r < 0 ? std::strerror(-r) : "?");
    }
    std::lock_guard lk(reg_mu_);
    for (const Chunk& c : gone) free_bufs_.push_back(c.index);
  };
  if (!onOwner(drop)) {
    // The owner is gone, and with it every use of the table.
    std::lock_guard lk(reg_mu_);
    recorded_.erase(base);
    recorded_count_.store(recorded_.size(), std::memory_order_release);
  }
}

int UringEngine::lookupBuffer(const void* buf, uint64_t len) {
  if (!fixed_buffers_) return -1;
  auto a = reinterpret_cast<uint64_t>(buf);
  {
    std::shared_lock bl(buf_mu_);
    auto it = chunks_.upper_bound(a);
    if (it != chunks_.begin()) {
      --it;
      if (a >= it->first && a + len <= it->first + it->second.len) return it->second.index;
    }
  }
  if (recorded_count_.load(std::memory_order_acquire) == 0) return -1;
  // Not registered (yet): ask for the piece holding the op, once.
  std::lock_guard lk(reg_mu_);
  auto r = recorded_.upper_bound(a);
  if (r == recorded_.begin()) return -1;
  --r;
  const uint64_t rs = r->first, re = rs + r->second.len;
  if (a < rs || a + len > re) return -1;
  const uint64_t ps = rs + (a - rs) / kPiece * kPiece, pe = std::min(ps + kPiece, re);
  if (a + len > pe || !asked_.insert(ps).second) return -1;  // spans two pieces, or already asked for
  pin_q_.push_back(Piece{rs, r->second.gen, ps, pe - ps});
  if (!pinner_.joinable()) pinner_ = std::thread([this] { pin(); });
  pin_cv_.notify_one();
  return -1;
}

void UringEngine::pin() {
  std::unique_lock lk(reg_mu_);
  for (;;) {
    pin_cv_.wait(lk, [&] { return pin_stop_ || !pin_q_.empty(); });
    if (pin_stop_) return;
    Piece p = pin_q_.front();
    pin_q_.pop_front();
    lk.unlock();
    // Faults the piece in here, so that the owner's registration only pins
    // pages already present (it would otherwise fault them in itself, with
    // every op of the ring waiting). Populating does not change contents;
    // memory unmapped meanwhile just fails here and at registration.
#ifdef MADV_POPULATE_WRITE
    (void)::madvise(reinterpret_cast<void*>(p.start), p.len, MADV_POPULATE_WRITE);
#endif
    (void)onOwner([this, p] { registerPiece(p.region, p.gen, p.start, p.len); }, false);
    lk.lock();
  }
}

void UringEngine::registerPiece(uint64_t region, uint64_t gen, uint64_t start, uint64_t len) {
  int slot;
  {
    std::lock_guard lk(reg_mu_);
    auto r = recorded_.find(region);
    if (r == recorded_.end() || r->second.gen != gen) return;  // removed since it was asked for
    if (free_bufs_.empty()) {
      HLOG_DEBUG("file/uring: registered buffer table full; [{:#x}, +{}) uses plain I/O", start, len);
      return;
    }
    slot = free_bufs_.back();
    free_bufs_.pop_back();
  }
  iovec iov{reinterpret_cast<void*>(start), len};
  __u64 tag = 0;
  const int r = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(slot), &iov, &tag, 1);
  std::lock_guard lk(reg_mu_);
  if (r != 1) {
    // ENOMEM: RLIMIT_MEMLOCK; EFAULT/EOPNOTSUPP: memory the kernel cannot pin this way.
    if (!warned_buffers_) {
      HLOG_INFO("file/uring: cannot register [{:#x}, +{}) as a fixed buffer ({}); plain I/O for it", start, len,
                r < 0 ? std::strerror(-r) : "not updated");
      warned_buffers_ = true;
    }
    free_bufs_.push_back(slot);
    return;
  }
  std::unique_lock bl(buf_mu_);
  chunks_[start] = Chunk{len, slot};
  st_reg_bytes_ += len;
}

}  // namespace hawser::file::uring_detail

#endif  // HAWSER_HAVE_URING
