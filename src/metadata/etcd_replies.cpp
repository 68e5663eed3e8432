#include "metadata/etcd_replies.h"

namespace hawser::etcd {

namespace {
const nlohmann::json kNull;
}  // namespace

const nlohmann::json& member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

bool memberBool(const nlohmann::json& j, const char* key, bool def) {
  const auto& v = member(j, key);
  return v.is_boolean() ? v.get<bool>() : def;
}

std::string memberString(const nlohmann::json& j, const char* key, const std::string& def) {
  const auto& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : def;
}

Status decodeReply(long http, std::string_view body, const std::string& where, const std::string& url_path,
                   nlohmann::json& out, bool& transient, int& grpc_code) {
  transient = true;
  grpc_code = 0;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    // Not the etcd gateway (or a truncated answer): another endpoint may do.
    return Status(Code::kMetadataError, where + ": HTTP " + std::to_string(http) + " on " + url_path +
                                            " with a non-JSON body (is this an etcd v3 endpoint?)");
  }
  // Streaming methods wrap errors as {"error":{...}} with HTTP 200.
  const nlohmann::json* err = nullptr;
  if (http != 200) err = &j;
  else if (member(j, "error").is_object()) err = &member(j, "error");
  if (err != nullptr) {
    const int64_t code = jsonInt(*err, "code", 2);
    grpc_code = code >= 0 && code <= 16 ? static_cast<int>(code) : 2;  // gRPC codes are 0..16; else UNKNOWN
    std::string msg = memberString(*err, "message");
    if (msg.empty()) msg = memberString(*err, "error");
    std::string text = where + ": etcd refused " + url_path + ": " + msg + " (grpc code " + std::to_string(grpc_code) +
                       ", HTTP " + std::to_string(http) + ")";
    if (grpc_code == 14) return Status(Code::kUnavailable, text);  // no leader, stopping
    if (grpc_code == 4) return Status(Code::kTimeout, text);       // etcd's own deadline
    transient = false;
    return Status(Code::kMetadataError, text);
  }
  transient = false;
  out = std::move(j);
  return Status::OK();
}

Status decodeRange(const nlohmann::json& reply, std::vector<KeyValue>& kvs, int64_t& revision) {
  kvs.clear();
  revision = jsonInt(member(reply, "header"), "revision");
  const auto& list = member(reply, "kvs");
  if (!list.is_array()) return Status::OK();  // the gateway leaves out an empty list
  for (const auto& j : list) {
    KeyValue kv;
    if (!parseKv(j, kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv");
    kvs.push_back(std::move(kv));
  }
  return Status::OK();
}

bool txnSucceeded(const nlohmann::json& reply) { return memberBool(reply, "succeeded"); }

const nlohmann::json& txnResponse(const nlohmann::json& reply, size_t i, const char* kind) {
  const auto& responses = member(reply, "responses");
  if (!responses.is_array() || responses.size() <= i) return kNull;
  return member(responses[i], kind);
}

int64_t txnDeleted(const nlohmann::json& reply) {
  const auto& responses = member(reply, "responses");
  if (!responses.is_array()) return 0;
  int64_t n = 0;
  for (const auto& r : responses) {
    const int64_t d = jsonInt(member(r, "response_delete_range"), "deleted");
    if (d > 0 && n <= INT64_MAX - d) n += d;
  }
  return n;
}

void decodeLeaseGrant(const nlohmann::json& reply, int64_t& id, int64_t& ttl_s, std::string& error) {
  id = jsonInt(reply, "ID");
  ttl_s = jsonInt(reply, "TTL");
  error = memberString(reply, "error");
}

int64_t decodeKeepAlive(const nlohmann::json& reply) { return jsonInt(member(reply, "result"), "TTL"); }

}  // namespace hawser::etcd
