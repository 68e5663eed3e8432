// Test seams of the tcp transport: points where a test holds a thread so
// that a race the transport must survive happens in the one order that
// matters, every run. Internal (tests include it; nothing else sets them).
// Unset (null) in production, where each costs one relaxed atomic load (per
// request served; per turn of an initiator's io loop). A hook runs on the
// transport's own thread, so it may block only on conditions with a
// deadline.
//   on_request   the target's thread serving a data connection: the target
//                withdrawing and registering again the range of a task
//                between two of its requests.
//   after_drain  an initiator's io thread between draining its inbox and
//                looking at its events: a submit posted behind the drain,
//                then cancelTransfer's purge request.
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

// An io thread drained its inbox this turn and holds its loop; its events
// (a purge request among them) come next. `purge_requests` counts the purges
// asked of this thread so far (each cancelTransfer with queued slices asks
// one). A submit meanwhile finds the loop held and posts to the inbox.
using LoopHook = void (*)(const std::atomic<uint64_t>& purge_requests);

extern std::atomic<LoopHook> after_drain;

inline void afterDrain(const std::atomic<uint64_t>& purge_requests) {
  if (LoopHook h = after_drain.load(std::memory_order_relaxed)) h(purge_requests);
}

}  // namespace hawser::tcp::testing
