// Test seam of the tcp transport: a point where a test holds the target's
// thread serving a data connection, so that a race the transport must
// survive (the target withdrawing and registering again the range of a task
// between two of its requests) happens in the one order that matters,
// every run. Internal (tests include it; nothing else sets it). Unset (null)
// in production, where it costs one relaxed atomic load per request. The
// hook runs on a serving thread, so it may block only on conditions with a
// deadline.
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::tcp::testing {

// A request was read (header, binding, run table) and nothing of it is
// pinned or checked yet: `remote` is its first run's address, `size` the
// bytes it addresses. Earlier responses leave before the thread waits for a
// request, so a request sent after the previous one's response came
// (tcp.inflight=1) finds nothing of that one pinned.
using RequestHook = void (*)(uint64_t remote, uint64_t size);

extern std::atomic<RequestHook> on_request;

inline void call(uint64_t remote, uint64_t size) {
  if (RequestHook h = on_request.load(std::memory_order_relaxed)) h(remote, size);
}

}  // namespace hawser::tcp::testing
