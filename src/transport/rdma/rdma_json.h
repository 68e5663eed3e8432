// Integers of the rdma transport's JSON (the handshake, the descriptor's
// transports.rdma): nlohmann's get<T>() converts a float or an out-of-range
// number silently, and a float out of T's range is undefined behaviour.
// These accept a JSON integer within T's range only and throw
// std::runtime_error naming the key otherwise (the decoders catch it).
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace hawser::rdma {

template <std::integral T>
T integerValue(const nlohmann::json& v, const char* what) {
  bool fits = false;
  if (v.is_number_unsigned()) {
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    fits = x >= 0 ? static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                  : std::numeric_limits<T>::is_signed && x >= static_cast<int64_t>(std::numeric_limits<T>::min());
  }
  if (!fits) throw std::runtime_error(std::string(what) + ": expected an integer in the range of its field, got " + v.dump());
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

// j.at(key) as T.
template <std::integral T>
T integerAt(const nlohmann::json& j, const char* key) {
  return integerValue<T>(j.at(key), key);
}

// j[key] as T, or `def` when j has no such key.
template <std::integral T>
T integerOr(const nlohmann::json& j, const char* key, T def) {
  auto it = j.find(key);
  return it == j.end() ? def : integerValue<T>(*it, key);
}

}  // namespace hawser::rdma
