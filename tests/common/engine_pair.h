// Two in-process engines: `target` exposes `target_mem`, `init` holds
// `local_mem`, and `seg` is the target opened from the initiator. With a
// FakeTransport installed in both (default) the data path is memcpy.
#pragma once

#include <memory>

#include "common/fake_transport.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"

namespace hawser::test {

struct EnginePair {
  explicit EnginePair(size_t target_bytes = 1 << 20, size_t local_bytes = 1 << 20, bool fake = true,
                      size_t fake_slice = 4096);
  // Declared before the engines, so they outlive them: registered memory
  // must not be freed before the engines end (unregister) — a target thread
  // may still be inside the sendmsg that carried a response the initiator
  // already has (and ASan reads a sendmsg's buffers after the call returns).
  Buffer target_mem, local_mem;
  TransferEngine target, init;
  FakeTransport* fake_target = nullptr;
  FakeTransport* fake_init = nullptr;
  SegmentID seg = kInvalidSegment;
  uint64_t remote(size_t off = 0) const { return reinterpret_cast<uint64_t>(target_mem.p) + off; }
  char* local(size_t off = 0) { return local_mem.p + off; }
  Status setup_status;
};

}  // namespace hawser::test
