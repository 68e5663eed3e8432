// Reading the etcd gateway's replies. A reply is a JSON object from the
// network: any field may be absent, of another type than etcd sends, or
// malformed. These readers never throw and never assume a type; the client's
// calls (etcd_kv.cpp, etcd_lease.cpp, the store) are the I/O around them.
// Fuzzed by tests/fuzz/etcd_fuzz.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hawser/status.h"
#include "metadata/etcd_codec.h"

namespace hawser::etcd {

// j[key] when j is an object holding key, else a JSON null.
const nlohmann::json& member(const nlohmann::json& j, const char* key);
// j[key] when it is a JSON boolean, else `def`.
bool memberBool(const nlohmann::json& j, const char* key, bool def = false);
// j[key] when it is a JSON string, else `def`.
std::string memberString(const nlohmann::json& j, const char* key, const std::string& def = std::string());

// One POST's answer: HTTP status `http` and body `body`, from endpoint
// `where` for `url_path`. Ok with `out` the parsed object; otherwise the
// refusal: kMetadataError (not JSON, or etcd refused), kUnavailable (grpc 14:
// no leader), kTimeout (grpc 4). `transient`: another endpoint or a retry may
// help. `grpc_code`: etcd's gRPC code of a refusal, 0 otherwise.
Status decodeReply(long http, std::string_view body, const std::string& where, const std::string& url_path,
                   nlohmann::json& out, bool& transient, int& grpc_code);

// kv/range: the kvs (base64 decoded) and the store revision of the answer.
// kMetadataError when a kv is malformed.
Status decodeRange(const nlohmann::json& reply, std::vector<KeyValue>& kvs, int64_t& revision);
// kv/txn: whether the compares held.
bool txnSucceeded(const nlohmann::json& reply);
// kv/txn: responses[i].<kind> ("response_range", "response_delete_range"),
// or a JSON null.
const nlohmann::json& txnResponse(const nlohmann::json& reply, size_t i, const char* kind);
// kv/txn: keys deleted by every response_delete_range of the reply.
int64_t txnDeleted(const nlohmann::json& reply);
// lease/grant: the lease id and TTL granted, and etcd's error text if any.
void decodeLeaseGrant(const nlohmann::json& reply, int64_t& id, int64_t& ttl_s, std::string& error);
// lease/keepalive: the TTL left (<= 0: the lease is gone).
int64_t decodeKeepAlive(const nlohmann::json& reply);

}  // namespace hawser::etcd
