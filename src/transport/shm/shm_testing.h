// Test seams of the shm transport: points where a test holds a copy thread
// so that a race the transport must survive (the target withdrawing or
// re-registering memory between two slices of a task, or while one is being
// copied) happens in the one order that matters, every run. Internal (tests
// include it; nothing else sets them). Unset (null) in production, where each
// costs one relaxed atomic load. A hook runs on the thread that copies (a
// copy thread, or the submitting thread for a submit of up to
// shm.inline_bytes), so it may block only on conditions with a deadline.
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::shm::testing {

enum class Point {
  kTurn,       // a copy's turn came: nothing checked or announced yet
  kAnnounced,  // its registration was announced and checked; the system call is next
};
// `remote`, `len`: the copy's first run in the target (its address and length).
using CopyHook = void (*)(Point point, uint64_t remote, uint64_t len);

extern std::atomic<CopyHook> on_copy;

inline void call(Point point, uint64_t remote, uint64_t len) {
  if (CopyHook h = on_copy.load(std::memory_order_relaxed)) h(point, remote, len);
}

}  // namespace hawser::shm::testing
