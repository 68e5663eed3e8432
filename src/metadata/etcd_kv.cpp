// etcd_client.h, key-value calls: range, put, compare-and-swap put and delete.
#include "metadata/etcd_client.h"

namespace hawser::etcd {

Status Client::get(const std::string& key, std::optional<KeyValue>& out, int64_t* revision) {
  out.reset();
  nlohmann::json reply;
  Status st = call("kv/range", {{"key", base64Encode(key)}}, reply);
  if (!st.ok()) return st;
  if (revision) *revision = jsonInt(reply.value("header", nlohmann::json::object()), "revision");
  auto kvs = reply.find("kvs");
  if (kvs == reply.end() || !kvs->is_array() || kvs->empty()) return Status::OK();
  KeyValue kv;
  if (!parseKv((*kvs)[0], kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv for key '" + key + "'");
  out = std::move(kv);
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
  if (revision) *revision = jsonInt(reply.value("header", nlohmann::json::object()), "revision");
  auto kvs = reply.find("kvs");
  if (kvs == reply.end() || !kvs->is_array()) return Status::OK();
  for (const auto& j : *kvs) {
    KeyValue kv;
    if (!parseKv(j, kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv under '" + prefix + "'");
    out.push_back(std::move(kv));
  }
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
  succeeded = reply.value("succeeded", false);
  if (succeeded) return Status::OK();
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.empty() && responses[0].contains("response_range")) {
    const auto& rr = responses[0]["response_range"];
    auto kvs = rr.find("kvs");
    if (kvs != rr.end() && kvs->is_array() && !kvs->empty()) {
      KeyValue kv;
      if (!parseKv((*kvs)[0], kv))
        return Status(Code::kMetadataError, "etcd returned a malformed kv for key '" + key + "'");
      current = std::move(kv);
    }
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
  if (!reply.value("succeeded", false)) return Status::OK();
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.empty() && responses[0].contains("response_delete_range"))
    deleted = jsonInt(responses[0]["response_delete_range"], "deleted");
  return Status::OK();
}

}  // namespace hawser::etcd
