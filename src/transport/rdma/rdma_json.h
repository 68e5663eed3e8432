// Integers of the rdma transport's JSON (the handshake, the descriptor's
// transports.rdma), read by base/json_integer.h (a JSON integer within T's
// range only). These throw std::runtime_error with its refusal instead (the
// decoders parse with nlohmann's throwing accessors and catch it).
#pragma once

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/json_integer.h"

namespace hawser::rdma {

template <JsonIntegerType T>
T integerValue(const nlohmann::json& v, const char* what) {
  T out{};
  Status s = jsonInteger(v, what, out);
  if (!s.ok()) throw std::runtime_error(s.message());
  return out;
}

// j.at(key) as T.
template <JsonIntegerType T>
T integerAt(const nlohmann::json& j, const char* key) {
  return integerValue<T>(j.at(key), key);
}

// j[key] as T, or `def` when j has no such key.
template <JsonIntegerType T>
T integerOr(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  return it == j.end() ? def : integerValue<T>(*it, key);
}

}  // namespace hawser::rdma
