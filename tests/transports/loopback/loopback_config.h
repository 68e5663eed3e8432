// loopback's knobs: its rows of the one strict config system (base/knob.h),
// named in its hawser_transport(... CONFIG kLoopbackKnobs) call. As a
// built-in transport the generated list registers them; this test-only one
// brings them with its factory (TransportFactory::knobs), so while it is
// registered `hawser config` lists them and init validates them.
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kLoopbackKnobs[] = {
  {"loopback.workers", "HAWSER_LOOPBACK_WORKERS", KnobType::kInt, "1", 1, 16, {},
   "loopback: copy threads"},
  {"loopback.max_copy", "HAWSER_LOOPBACK_MAX_COPY", KnobType::kSize, "64M", 4 * knob_detail::K, knob_detail::G, {},
   "loopback: a task is cut into slices of at most this many bytes, one memcpy each"},
};
// clang-format on

using LoopbackConfig = TableConfig<kLoopbackKnobs>;

}  // namespace hawser
