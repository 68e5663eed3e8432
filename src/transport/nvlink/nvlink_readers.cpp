// The readers' area of the owner's region table (nvlink_readers.h): the
// owner waits on it, initiators' stream workers announce their copies in it.
#include "transport/nvlink/nvlink_readers.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <thread>

#include "base/log.h"
#include "base/tsan.h"
#include "transport/nvlink/nvlink_internal.h"

// ThreadSanitizer keys synchronization by address, and the readers' area is
// mapped at another address in each process that uses it (twice in one
// whose engines copy with each other): the handshake's release (a bit
// cleared once the copies completed) and acquire (the owner finding it
// clear) are told to it on a key of the table slot.
#ifdef HAWSER_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace hawser::nvlink {

namespace {

#ifdef HAWSER_TSAN
char g_tsan_keys[kTableSlots];
void tsanRelease(uint32_t slot) { __tsan_release(&g_tsan_keys[slot]); }
void tsanAcquire(uint32_t slot) { __tsan_acquire(&g_tsan_keys[slot]); }
#else
void tsanRelease(uint32_t) {}
void tsanAcquire(uint32_t) {}
#endif

ReadersHeader* header(void* r) { return static_cast<ReadersHeader*>(r); }
ReaderSlot* slots(void* r) { return reinterpret_cast<ReaderSlot*>(static_cast<char*>(r) + sizeof(ReadersHeader)); }
std::atomic<uint64_t>* bitmap(void* r, size_t slot) {
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(r) + (kBitmapsOffset - kReadersOffset)) +
         slot * kBitmapWords;
}
std::atomic_ref<uint64_t> word(uint64_t& w) { return std::atomic_ref<uint64_t>(w); }

// Whether the process that holds a reader slot still exists: its pid, and
// (when it wrote one) its start time, so a pid reused by another process
// does not count.
bool alive(uint64_t pid, uint64_t start) {
  if (pid & kHolderToken) return true;  // until the owner frees it (freeHolder)
  if (pid == 0 || pid > INT32_MAX) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  return start == 0 || processStartTime(static_cast<int64_t>(pid)) == start;
}

}  // namespace

void waitForReaders(void* readers, uint32_t slot, uint64_t gen, std::atomic<uint64_t>& waits) {
  if (!readers || slot >= kTableSlots) return;
  const uint64_t used = std::min<uint64_t>(word(header(readers)->used).load(std::memory_order_acquire), kReaderSlots);
  const uint64_t bit = uint64_t{1} << (slot % 64);
  bool waited = false;
  for (uint64_t i = 0; i < used; ++i) {
    std::atomic<uint64_t>& w = bitmap(readers, i)[slot / 64];
    ReaderSlot& rs = slots(readers)[i];
    const auto begin = std::chrono::steady_clock::now();
    auto next_log = begin + std::chrono::seconds(1);
    for (unsigned spin = 0;; ++spin) {
      if ((w.load(std::memory_order_acquire) & bit) == 0) break;
      const uint64_t pid = word(rs.pid).load(std::memory_order_acquire);
      if (!alive(pid, word(rs.start).load(std::memory_order_acquire))) break;  // its copies ended with it
      if (!waited) waits.fetch_add(1, std::memory_order_relaxed);  // counted as it starts waiting
      waited = true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_log) {
        HLOG_WARN("nvlink: withdrawing registration {} (table slot {}) has waited {} ms for the copies of process {} "
                  "(stopped?)",
                  gen, slot, std::chrono::duration_cast<std::chrono::milliseconds>(now - begin).count(), pid);
        next_log = now + std::chrono::seconds(5);
      }
      if (spin < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spin < 1000 ? 20 : 1000));
    }
  }
  tsanAcquire(slot);
}

void freeHolder(void* readers, uint64_t holder) {
  if (!readers || (holder & kHolderToken) == 0) return;
  ReaderSlot* sl = slots(readers);
  const uint64_t used = std::min<uint64_t>(word(header(readers)->used).load(std::memory_order_acquire), kReaderSlots);
  for (uint64_t i = 0; i < used; ++i) {
    uint64_t cur = holder;
    word(sl[i].pid).compare_exchange_strong(cur, 0, std::memory_order_acq_rel);
  }
}

bool Reader::claim(void* readers, uint64_t holder) {
  const uint64_t me = holder ? holder : static_cast<uint64_t>(::getpid());
  const uint64_t my_start = holder ? 0 : processStartTime(static_cast<int64_t>(me));
  ReaderSlot* sl = slots(readers);
  for (uint32_t i = 0; i < kReaderSlots; ++i) {
    auto pid = word(sl[i].pid);
    uint64_t cur = pid.load(std::memory_order_acquire);
    if (cur != 0 && (cur == me || alive(cur, word(sl[i].start).load(std::memory_order_acquire)))) continue;
    if (!pid.compare_exchange_strong(cur, me, std::memory_order_acq_rel)) continue;
    word(sl[i].start).store(my_start, std::memory_order_release);
    // A dead holder's bits: an owner may wait on them until they are gone.
    std::atomic<uint64_t>* bits = bitmap(readers, i);
    for (size_t k = 0; k < kBitmapWords; ++k)
      if (bits[k].load(std::memory_order_relaxed) != 0) bits[k].store(0, std::memory_order_release);
    auto used = word(header(readers)->used);
    uint64_t u = used.load(std::memory_order_acquire);
    while (u < i + 1 && !used.compare_exchange_weak(u, i + 1, std::memory_order_acq_rel)) {
    }
    readers_ = readers;
    slot_ = static_cast<int>(i);
    bits_ = bits;
    return true;
  }
  return false;
}

void Reader::release() {
  if (slot_ < 0) return;
  ReaderSlot& rs = slots(readers_)[slot_];
  word(rs.start).store(0, std::memory_order_relaxed);
  word(rs.pid).store(0, std::memory_order_release);
  slot_ = -1;
}

void Reader::enter(uint32_t s) {
  if (uses_[s]++ > 0) return;  // set already, by a group still in flight
  std::atomic<uint64_t>& w = bits_[s / 64];
  w.store(w.load(std::memory_order_relaxed) | (uint64_t{1} << (s % 64)), std::memory_order_relaxed);
}

void Reader::leave(uint32_t s) {
  auto it = uses_.find(s);
  if (it == uses_.end() || --it->second > 0) return;
  uses_.erase(it);
  std::atomic<uint64_t>& w = bits_[s / 64];
  tsanRelease(s);
  w.store(w.load(std::memory_order_relaxed) & ~(uint64_t{1} << (s % 64)), std::memory_order_release);
}

}  // namespace hawser::nvlink
