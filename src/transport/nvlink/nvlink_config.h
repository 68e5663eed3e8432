// The nvlink transport's knobs: its rows of the one strict config system
// (base/knob.h has the machinery; `hawser config --prefix nvlink.` lists them).
// The generated list of built-in transports registers this table (its
// hawser_transport(... CONFIG kNvlinkKnobs) call); the transport reads them
// through NvlinkConfig, whose keys are checked against this table when they
// compile.
//
// Adding a knob: a row below, then regenerate the docs' tables (docs/config.md):
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kNvlinkKnobs[] = {
  {"nvlink.streams", "HAWSER_NVLINK_STREAMS", KnobType::kInt, "4", 1, 32, {},
   "CUDA streams (each with its own thread) per local GPU that nvlink copies run on"},
  {"nvlink.stripe_size", "HAWSER_NVLINK_STRIPE_SIZE", KnobType::kSize, "64M", 64 * knob_detail::K, knob_detail::G, {},
   "bytes per nvlink copy: a larger request is striped over the streams in pieces of this size (smaller pieces "
   "cost a wake-up each: on an H200 8M stripes ran at 0.33-0.85 of one cuMemcpyAsync, 64M at 0.99-1.10)"},
  {"nvlink.stream_depth", "HAWSER_NVLINK_STREAM_DEPTH", KnobType::kInt, "4", 1, 1024, {},
   "copies (windows of runs) queued on one stream before its thread waits for the oldest"},
  {"nvlink.plan_cache", "HAWSER_NVLINK_PLAN_CACHE", KnobType::kSize, "64M", 0, 16 * knob_detail::G, {},
   "device memory per engine for prepared plans' run lists kept on the GPU: a window of a plan posted again is "
   "launched from its kept list with no per-block work on the host (24 bytes a block of up to 64 KiB); 0: none kept"},
  {"nvlink.spin_wait", "HAWSER_NVLINK_SPIN_WAIT", KnobType::kBool, "true", 0, 0, {},
   "a stream's thread polls for its copies' ends, issuing what arrives meanwhile (a CPU core busy while copies "
   "are in flight, none when idle); false: it sleeps in the driver until the oldest is done (on an H200 a 32 KiB "
   "KV request ran at 0.43 of a contiguous copy sleeping, 0.50 polling)"},
  {"nvlink.issue_inline", "HAWSER_NVLINK_ISSUE_INLINE", KnobType::kBool, "true", 0, 0, {},
   "a group of copies posted while its stream is idle is issued (checked and launched) by the posting thread, its "
   "GPU context restored after; the stream's thread is woken only to see it end, while the GPU copies. false: "
   "every group is handed to the stream's thread (on an H200 the hand-over cost 40-400 us a request)"},
  {"nvlink.socket_dir", "HAWSER_NVLINK_SOCKET_DIR", KnobType::kString, "", 0, 0, {},
   "where an owner's local socket lives (its region table, a pidfd and the file descriptors of its CUDA virtual "
   "memory passed to peers of this host): empty: the abstract namespace (peers must share the network namespace); "
   "else a directory both sides see (e.g. a volume two containers mount)"},
};
// clang-format on

using NvlinkConfig = TableConfig<kNvlinkKnobs>;

}  // namespace hawser
