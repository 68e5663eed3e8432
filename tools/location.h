// Where a tool puts its memory: "cpu" or "cuda:N" (--location of serve,
// --local-location of bench). The library's own parse (base's gpuOrdinalOf /
// hostNodeOf, src/base/transport.h) is not a public header, and the tools
// see public headers only: this one stays, for the two forms tools take.
#pragma once

#include <charconv>
#include <optional>
#include <string>

namespace hawser::tools {

// -1 for "cpu", N for "cuda:N"; nullopt for anything else.
inline std::optional<int> parseMemoryPlace(const std::string& s) {
  if (s == "cpu") return -1;
  if (s.rfind("cuda:", 0) != 0) return std::nullopt;
  int n = -1;
  const char* b = s.data() + 5;
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, n);
  if (b == e || ec != std::errc() || p != e || n < 0) return std::nullopt;
  return n;
}

}  // namespace hawser::tools
