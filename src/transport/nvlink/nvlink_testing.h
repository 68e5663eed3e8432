// Test seam of the nvlink transport: a point where a test holds a stream
// worker so that the owner re-registering memory between two stripes of a
// task happens in the one order that matters, every run. Internal (tests
// include it; nothing else sets it). Unset (null) in production, where it
// costs one relaxed atomic load. The hook runs on a stream worker's thread,
// so it may block only on conditions with a deadline.
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

}  // namespace hawser::nvlink::testing
