#include "base/peer_entry.h"

#include <fmt/format.h>

namespace hawser {

Status transportNotRunning(std::string_view name, RouteDecline& why) {
  return declined(why, RouteReason::kRefused, {Code::kUnavailable, fmt::format("{} transport is not running", name)});
}

Status memoryPeerEntry(const SegmentDesc& seg, std::string_view name, const nlohmann::json*& entry, RouteDecline& why,
                       const PeerEntryRule& rule) {
  entry = nullptr;
  why = {};
  if (seg.kind != SegmentDesc::Kind::kMemory)
    return declined(why, RouteReason::kRefused, {Code::kNotSupported, "not a memory segment"});
  auto it = seg.transports.is_object() ? seg.transports.find(name) : seg.transports.end();
  if (it == seg.transports.end() || !it->is_object() || (rule.empty_is_absent && it->empty()))
    return declined(why, RouteReason::kPeerLacksTransport,
                    {Code::kNotSupported,
                     rule.absent_hint.empty()
                         ? fmt::format("segment '{}' publishes no {} transport", seg.name, name)
                         : fmt::format("segment '{}' publishes no {} transport ({})", seg.name, name, rule.absent_hint)});
  entry = &*it;
  return Status::OK();
}

}  // namespace hawser
