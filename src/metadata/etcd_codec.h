// How etcd's HTTP/JSON gateway (grpc-gateway) spells things: keys and values
// travel base64-encoded, int64 fields come back as strings, a key range is
// [key, range_end).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hawser::etcd {

std::string base64Encode(std::string_view in);
// False on characters outside the alphabet or bad padding.
bool base64Decode(std::string_view in, std::string& out);

// The end of the key range holding every key that starts with `prefix`.
std::string prefixRangeEnd(const std::string& prefix);

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

// Reads an int64 field that the gateway sends as a string (or a number);
// `def` when absent or malformed.
int64_t jsonInt(const nlohmann::json& j, const char* field, int64_t def = 0);
// Parses one "kv" object of a reply (base64 decoded).
bool parseKv(const nlohmann::json& j, KeyValue& out);

}  // namespace hawser::etcd
