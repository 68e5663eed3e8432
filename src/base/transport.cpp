#include "base/transport.h"

#include <nlohmann/json.hpp>

namespace hawser {

void Transport::describe(nlohmann::json& attrs) const { attrs = nlohmann::json::object(); }

Status Transport::registerMemory(void*, size_t, const std::string&, bool, nlohmann::json&) {
  return Status::OK();
}

Status Transport::unregisterMemory(void*, size_t) { return Status::OK(); }

}  // namespace hawser
