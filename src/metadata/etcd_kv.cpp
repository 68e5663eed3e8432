// etcd_client.h, key-value calls: range, put, compare-and-swap put and delete.
#include "metadata/etcd_client.h"
#include "metadata/etcd_replies.h"

namespace hawser::etcd {

Status Client::get(const std::string& key, std::optional<KeyValue>& out, int64_t* revision) {
  out.reset();
  nlohmann::json reply;
  Status st = call("kv/range", {{"key", base64Encode(key)}}, reply);
  if (!st.ok()) return st;
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  st = decodeRange(reply, kvs, rev);
  if (!st.ok()) return Status(st.code(), st.message() + " for key '" + key + "'");
  if (revision) *revision = rev;
  if (!kvs.empty()) out = std::move(kvs[0]);
  return Status::OK();
}

Status Client::getPrefix(const std::string& prefix, std::vector<KeyValue>& out, int64_t* revision, bool keys_only,
                         const CallOptions& co) {
  out.clear();
  nlohmann::json body = {{"key", base64Encode(prefix)}, {"range_end", base64Encode(prefixRangeEnd(prefix))}};
  if (keys_only) body["keys_only"] = true;
  nlohmann::json reply;
  Status st = call("kv/range", body, reply, co);
  if (!st.ok()) return st;
  int64_t rev = 0;
  st = decodeRange(reply, out, rev);
  if (!st.ok()) {
    out.clear();
    return Status(st.code(), st.message() + " under '" + prefix + "'");
  }
  if (revision) *revision = rev;
  return Status::OK();
}

Status Client::put(const std::string& key, const std::string& value, int64_t lease, const CallOptions& co) {
  nlohmann::json body = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  nlohmann::json reply;
  return call("kv/put", body, reply, co);
}

Status Client::putIf(const std::string& key, const std::string& value, int64_t expect_mod_revision, int64_t lease,
                     bool& succeeded, std::optional<KeyValue>& current) {
  succeeded = false;
  current.reset();
  nlohmann::json cmp = {{"key", base64Encode(key)}, {"result", "EQUAL"}};
  if (expect_mod_revision == 0) {
    cmp["target"] = "CREATE";
    cmp["create_revision"] = "0";
  } else {
    cmp["target"] = "MOD";
    cmp["mod_revision"] = std::to_string(expect_mod_revision);
  }
  nlohmann::json put = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  nlohmann::json body = {{"compare", nlohmann::json::array({cmp})},
                         {"success", nlohmann::json::array({{{"request_put", put}}})},
                         {"failure", nlohmann::json::array({{{"request_range", {{"key", base64Encode(key)}}}}})}};
  nlohmann::json reply;
  CallOptions co;
  co.idempotent = false;
  Status st = call("kv/txn", body, reply, co);
  if (!st.ok()) return st;
  succeeded = txnSucceeded(reply);
  if (succeeded) return Status::OK();
  const auto& kvs = member(txnResponse(reply, 0, "response_range"), "kvs");
  if (kvs.is_array() && !kvs.empty()) {
    KeyValue kv;
    if (!parseKv(kvs[0], kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv for key '" + key + "'");
    current = std::move(kv);
  }
  return Status::OK();
}

Status Client::removeIf(const std::string& key, int64_t expect_mod_revision, int64_t& deleted) {
  deleted = 0;
  nlohmann::json reply;
  if (expect_mod_revision == 0) {
    Status st = call("kv/deleterange", {{"key", base64Encode(key)}}, reply);
    if (!st.ok()) return st;
    deleted = jsonInt(reply, "deleted");
    return Status::OK();
  }
  nlohmann::json cmp = {{"key", base64Encode(key)},
                        {"result", "EQUAL"},
                        {"target", "MOD"},
                        {"mod_revision", std::to_string(expect_mod_revision)}};
  nlohmann::json body = {
      {"compare", nlohmann::json::array({cmp})},
      {"success", nlohmann::json::array({{{"request_delete_range", {{"key", base64Encode(key)}}}}})}};
  CallOptions co;
  co.idempotent = false;
  Status st = call("kv/txn", body, reply, co);
  if (!st.ok()) return st;
  if (!txnSucceeded(reply)) return Status::OK();
  deleted = jsonInt(txnResponse(reply, 0, "response_delete_range"), "deleted");
  return Status::OK();
}

}  // namespace hawser::etcd
