// hawser — configuration helpers of the public API.
//
// Every tunable has a key ("tcp.connections"), an environment variable
// (HAWSER_TCP_CONNECTIONS) and a documented default; give values to an
// engine with EngineOptions::config (hawser/engine.h) or the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace hawser {

// Parses a byte size: "4096", "64K", "1M", "2G", "1T" (binary units; "64KB",
// "1MiB" too). nullopt on junk or overflow.
std::optional<uint64_t> parseSize(std::string_view text);

}  // namespace hawser
