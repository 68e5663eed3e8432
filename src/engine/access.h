// Internal access to an engine's parts, for tests only (the public header
// has no back door: tools and the Python module use the public API).
#pragma once

#include "engine/engine_impl.h"
#include "hawser/engine.h"

namespace hawser::detail {

struct EngineAccess {
  static EngineImpl& of(TransferEngine& e) { return *e.impl_; }
};

}  // namespace hawser::detail
