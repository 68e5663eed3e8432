// Test seam of the notify outbox: a point where a test decides the fate of
// each engine.signal frame a sender sends, to prove that a receiver still
// learns every outcome when frames or their replies are lost. Internal
// (tests and test helpers set it; nothing else does). Unset (null) in
// production, where it costs one relaxed atomic load per frame.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace hawser::notify_testing {

enum class FrameFate {
  kSend = 0,       // as usual
  kDrop = 1,       // never reaches the receiver (the call fails as if the network lost it)
  kLoseReply = 2,  // reaches the receiver, but its reply is lost (the call fails after it was applied)
};

// `target`: the receiver's segment name; `seq`: the frame's sequence number;
// `attempt`: 0 for its first sending, then 1, 2, ... for each resend.
using FrameHook = FrameFate (*)(const std::string& target, uint64_t seq, int attempt);

extern std::atomic<FrameHook> on_signal_frame;

inline FrameFate fate(const std::string& target, uint64_t seq, int attempt) {
  if (FrameHook h = on_signal_frame.load(std::memory_order_relaxed)) return h(target, seq, attempt);
  return FrameFate::kSend;
}

}  // namespace hawser::notify_testing
