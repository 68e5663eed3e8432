// Building blocks of etcd transactions (kv/txn bodies of the JSON gateway)
// shared by the store's lookups and its file-segment edits.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "metadata/etcd_codec.h"

namespace hawser::etcd {

// {"request_range":{key}}: read one key.
nlohmann::json rangeOp(const std::string& key);
// {"request_delete_range":{key}}: delete one key.
nlohmann::json deleteOp(const std::string& key);
// Compare: the key does not exist (create_revision == 0).
nlohmann::json absentCmp(const std::string& key);
// The kv of responses[i].response_range of a txn reply, or empty;
// `malformed` when it is there but cannot be parsed.
std::optional<KeyValue> rangeResult(const nlohmann::json& reply, size_t i, bool& malformed);

}  // namespace hawser::etcd
