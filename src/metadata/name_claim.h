// Claiming a segment name in a shared store (etcd, Mooncake's HTTP server):
// a name held by a live engine elsewhere is refused; a stale one, left by a
// crashed engine, may be taken over. Liveness is a ping to the rpc endpoint
// the old descriptor names.
#pragma once

#include <string>

#include "hawser/status.h"
#include "metadata/descriptor.h"

namespace hawser {

// Ok when `name` may be taken over from `old` (the previous owner's
// descriptor): it names this engine's own endpoint (`mine`), names no
// endpoint, or its endpoint does not answer (refused or timed out).
// kInvalidArgument, naming the live owner, when it answers. `where` says
// which store holds the name, for the message.
Status checkNameOwner(const std::string& name, const SegmentDesc& old, const SegmentDesc& mine,
                      const std::string& where);

}  // namespace hawser
