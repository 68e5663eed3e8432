// Integers in JSON that came from elsewhere (a peer's descriptor, a
// handshake): nlohmann's get<T>() converts a float or an out-of-range number
// silently, and a float out of T's range is undefined behaviour. These take
// a JSON integer within T's range only, and say which field is at fault.
// The one reader of such integers for the layers above base (the
// transports' descriptor decoders, rdma's handshake).
//
// Refusals are kInvalidArgument (the caller gives its own code and context),
// with `field` the name given (jsonIntegerField: "<where>.<key>", or "<key>"
// when `where` is empty):
//   "<field> is missing"
//   "<field> must be an integer, got <value>"       (a string, a float, ...)
//   "<field> is out of range: <value> is not in [<min>, <max>]"
// <value> is the JSON text, cut to 40 characters ("...").
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "hawser/status.h"

namespace hawser {

template <typename T>
concept JsonIntegerType = std::integral<T> && !std::same_as<T, bool>;

namespace json_integer_detail {
// `v` as an integer in [lo, hi] (lo < 0 only for signed types), its two's
// complement bits in `bits`.
Status read(const nlohmann::json& v, std::string_view field, int64_t lo, uint64_t hi, uint64_t& bits);
std::string fieldName(std::string_view where, std::string_view key);
Status missing(std::string_view field);
}  // namespace json_integer_detail

// `v` as a T.
template <JsonIntegerType T>
Status jsonInteger(const nlohmann::json& v, std::string_view field, T& out) {
  uint64_t bits = 0;
  const int64_t lo = std::is_signed_v<T> ? static_cast<int64_t>(std::numeric_limits<T>::min()) : 0;
  Status s = json_integer_detail::read(v, field, lo, static_cast<uint64_t>(std::numeric_limits<T>::max()), bits);
  if (s.ok()) out = static_cast<T>(bits);
  return s;
}

// Member `key` of object `j` as a T; "is missing" when absent (or `j` is
// not an object). `where` names `j` in errors ("transports.shm").
template <JsonIntegerType T>
Status jsonIntegerField(const nlohmann::json& j, std::string_view where, const char* key, T& out) {
  const std::string field = json_integer_detail::fieldName(where, key);
  if (!j.is_object()) return json_integer_detail::missing(field);
  auto it = j.find(key);
  if (it == j.end()) return json_integer_detail::missing(field);
  return jsonInteger(*it, field, out);
}

// The same, or `def` when `j` has no member `key` (a present member that is
// not a T is still refused).
template <JsonIntegerType T>
Status jsonIntegerFieldOr(const nlohmann::json& j, std::string_view where, const char* key, T def, T& out) {
  if (!j.is_object() || !j.contains(key)) {
    out = def;
    return Status::OK();
  }
  return jsonIntegerField(j, where, key, out);
}

}  // namespace hawser
