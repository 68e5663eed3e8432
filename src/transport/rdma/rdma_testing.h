// Test seams of the rdma transport: points where a test holds one thread so
// that a race the transport must survive happens in the one order that
// matters, every run. Internal (tests include it; nothing else sets them).
// Unset (null) in production, where each costs one relaxed atomic load.
// A test sets them before the transfers it watches and clears them after;
// a hook runs on the transport's own threads, so it may block only on
// conditions with a deadline, and never on what that thread holds.
#pragma once

#include <atomic>

#include "hawser/stats.h"

namespace hawser::rdma {

class RdmaContext;

namespace testing {

using ContextHook = void (*)(RdmaContext& ctx);

// On the posting thread, under the endpoint's mutex, right after the NIC's
// CQ had no room for it (reserveCq returned 0) and before the endpoint
// registers as starved.
extern std::atomic<ContextHook> on_cq_full;
// On the worker thread, after a drain of `ctx` that polled completions:
// they were handed to their endpoints and the starved endpoints kicked.
extern std::atomic<ContextHook> after_drain;

inline void call(const std::atomic<ContextHook>& hook, RdmaContext& ctx) {
  if (ContextHook h = hook.load(std::memory_order_relaxed)) h(ctx);
}

// At the end of shutdown(), on the thread shutting down: the transport's
// final counters (stats()), for a test that shuts an engine down and then
// reads what it counted (the engine lets go of its transports at shutdown).
using CountersHook = void (*)(const Counters& final_counters);
extern std::atomic<CountersHook> after_shutdown;

}  // namespace testing
}  // namespace hawser::rdma
