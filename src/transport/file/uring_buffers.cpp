// UringEngine's fixed buffers (uring_engine.h).
//
// Fixed buffers: a sparse table, filled lazily. addMemory only makes the
// region's UringMemory (registering pins every page, which for untouched
// memory means faulting it in: seconds per GiB on the registering thread):
// the region cut into pieces of 64 MiB, a slot number per piece. An op
// carries the UringMemory of its memory (IoOp::memory); the first op that
// lies inside a piece asks for it and goes out as a plain read/write. A
// background thread faults the piece in (MADV_POPULATE_WRITE) and the owner
// registers it and records the slot in the piece; later ops in the piece
// read the slot from it and use the fixed buffer. No address is looked up
// in a table, and no op ever waits for a registration. A registration
// refused by the kernel (RLIMIT_MEMLOCK, non-anonymous memory) only means
// that piece uses plain reads/writes.
#include "transport/file/io_engine.h"

#if HAWSER_HAVE_URING

#include "transport/file/uring_engine.h"

#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "base/log.h"

namespace hawser::file::uring_detail {
namespace {

constexpr uint64_t kPiece = 64ULL << 20;  // fixed buffers are registered in pieces of this size (kernel limit: 1 GiB)

}  // namespace

UringMemory::UringMemory(const IoEngine* owner, uint64_t a, uint64_t n)
    : EngineMemory(owner), addr(a), len(n), pieces((n + kPiece - 1) / kPiece),
      slots(new std::atomic<int>[pieces]) {
  for (size_t i = 0; i < pieces; ++i) slots[i].store(kUnasked, std::memory_order_relaxed);
}

uint64_t UringEngine::pieceStart(const UringMemory& m, size_t i) { return m.addr + i * kPiece; }
uint64_t UringEngine::pieceLen(const UringMemory& m, size_t i) { return std::min(kPiece, m.len - i * kPiece); }

void UringEngine::stopPinner() {
  {
    std::lock_guard lk(reg_mu_);
    pin_stop_ = true;
  }
  pin_cv_.notify_all();
  if (pinner_.joinable()) pinner_.join();
}

std::shared_ptr<EngineMemory> UringEngine::addMemory(void* addr, size_t len, int) {
  if (!fixed_buffers_ || len == 0) return nullptr;
  return std::make_shared<UringMemory>(this, reinterpret_cast<uint64_t>(addr), len);
}

void UringEngine::removeMemory(EngineMemory& em) {
  if (em.engine != this) return;
  auto& m = static_cast<UringMemory&>(em);
  // On the owner, so that no registration of its pieces can follow it.
  // Synchronous: the caller may free and remap the memory right after.
  auto drop = [this, &m] {
    std::vector<std::pair<int, uint64_t>> gone;  // slot, bytes
    {
      std::lock_guard lk(reg_mu_);
      m.removed = true;
      for (auto it = pin_q_.begin(); it != pin_q_.end();) it = it->memory.get() == &m ? pin_q_.erase(it) : it + 1;
      // From now on no new op uses these slots.
      for (size_t i = 0; i < m.pieces; ++i) {
        const int slot = m.slots[i].exchange(UringMemory::kNoSlot, std::memory_order_acq_rel);
        if (slot >= 0) gone.emplace_back(slot, pieceLen(m, i));
      }
    }
    for (const auto& [slot, bytes] : gone) {
      iovec iov{nullptr, 0};
      __u64 tag = 0;
      int r = io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(slot), &iov, &tag, 1);
      if (r != 1) HLOG_WARN("file/uring: unregister buffer slot {}: {}", slot, r < 0 ? std::strerror(-r) : "?");
      st_reg_bytes_ -= bytes;
    }
    std::lock_guard lk(reg_mu_);
    for (const auto& g : gone) free_bufs_.push_back(g.first);
  };
  if (!onOwner(drop)) {
    // The owner is gone, and with it every use of the table.
    std::lock_guard lk(reg_mu_);
    m.removed = true;
  }
}

int UringEngine::fixedBuffer(const IoOp& op) {
  if (!fixed_buffers_ || !op.memory || op.memory->engine != this) return -1;
  auto& m = static_cast<UringMemory&>(*op.memory);
  const auto a = reinterpret_cast<uint64_t>(op.buf);
  if (a < m.addr || op.len > m.len || a - m.addr > m.len - op.len) return -1;
  const size_t i = (a - m.addr) / kPiece;
  if (a + op.len > pieceStart(m, i) + pieceLen(m, i)) return -1;  // spans two pieces
  int slot = m.slots[i].load(std::memory_order_acquire);
  if (slot != UringMemory::kUnasked) return slot;  // registered, or asked for already
  // The first op in the piece asks for it, once.
  if (!m.slots[i].compare_exchange_strong(slot, UringMemory::kNoSlot, std::memory_order_acq_rel)) return -1;
  std::lock_guard lk(reg_mu_);
  if (m.removed) return -1;
  pin_q_.push_back(Piece{m.shared_from_this(), i});
  if (!pinner_.joinable()) pinner_ = std::thread([this] { pin(); });
  pin_cv_.notify_one();
  return -1;
}

void UringEngine::pin() {
  std::unique_lock lk(reg_mu_);
  for (;;) {
    pin_cv_.wait(lk, [&] { return pin_stop_ || !pin_q_.empty(); });
    if (pin_stop_) return;
    Piece p = std::move(pin_q_.front());
    pin_q_.pop_front();
    lk.unlock();
    // Faults the piece in here, so that the owner's registration only pins
    // pages already present (it would otherwise fault them in itself, with
    // every op of the ring waiting). Populating does not change contents;
    // memory unmapped meanwhile just fails here and at registration.
#ifdef MADV_POPULATE_WRITE
    (void)::madvise(reinterpret_cast<void*>(pieceStart(*p.memory, p.index)), pieceLen(*p.memory, p.index),
                    MADV_POPULATE_WRITE);
#endif
    (void)onOwner([this, p] { registerPiece(*p.memory, p.index); }, false);
    lk.lock();
  }
}

void UringEngine::registerPiece(UringMemory& m, size_t piece) {
  const uint64_t start = pieceStart(m, piece), len = pieceLen(m, piece);
  int slot;
  {
    std::lock_guard lk(reg_mu_);
    if (m.removed) return;  // removed since it was asked for
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
  // Removal runs on this (the owner) thread too: m is still there.
  m.slots[piece].store(slot, std::memory_order_release);
  st_reg_bytes_ += len;
}

}  // namespace hawser::file::uring_detail

#endif  // HAWSER_HAVE_URING
