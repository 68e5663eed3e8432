// How every transport's openPeer starts, in one place and one wording: the
// refusal of a transport that is not running, and, for the memory
// transports, the peer's part of a memory segment's descriptor
// (transports.<name>) found before its descriptor decoder reads its fields.
// Each refusal comes with its route reason (base/route.h) in `why`.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "base/route.h"
#include "base/segment_desc.h"
#include "hawser/status.h"

namespace hawser {

// kUnavailable "<name> transport is not running" (reason kRefused): not
// installed, or shut down.
Status transportNotRunning(std::string_view name, RouteDecline& why);

// What counts as publishing no transports.<name>, beyond its absence or a
// value that is not an object.
struct PeerEntryRule {
  bool empty_is_absent = false;  // an empty object too (nvlink: no CUDA driver there)
  std::string_view absent_hint;  // added to the refusal in parentheses
};

// Points `entry` at `seg`'s transports.<name> object. Refusals, kNotSupported:
//   a file segment: "not a memory segment" (reason kRefused);
//   no such object: "segment '<seg>' publishes no <name> transport[ (<hint>)]"
//   (reason kPeerLacksTransport).
Status memoryPeerEntry(const SegmentDesc& seg, std::string_view name, const nlohmann::json*& entry, RouteDecline& why,
                       const PeerEntryRule& rule = {});

}  // namespace hawser
