// Test seams of the nvlink transport: a point where a test holds a stream
// worker so that the owner re-registering memory between two stripes of a
// task happens in the one order that matters, every run; and a switch that
// keeps the stream threads from ending groups, so that only a waiting
// caller's poll can. Internal (tests include it; nothing else sets them).
// Unset in production, where each costs one relaxed atomic load. The hook
// runs on a stream worker's thread, so it may block only on conditions with
// a deadline.
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::nvlink::testing {

// Before a copy's registration is checked (Owner::valid): `remote` is the
// copy's address in the owner.
using CheckHook = void (*)(uint64_t remote);
extern std::atomic<CheckHook> before_check;

inline void call(uint64_t remote) {
  if (CheckHook h = before_check.load(std::memory_order_relaxed)) h(remote);
}

// While true, a stream thread that is idle stays asleep when a poster kicks
// it (StreamWorker::issueHere), so a group issued inline ends only through a
// waiting caller's Transport::poll. Cleared by the test before the engine
// shuts down (stop() still wakes the threads).
extern std::atomic<bool> stream_threads_ignore_kicks;

inline bool ignoringKicks() { return stream_threads_ignore_kicks.load(std::memory_order_relaxed); }

}  // namespace hawser::nvlink::testing
