#include "metadata/etcd_txn.h"

#include "metadata/etcd_replies.h"

namespace hawser::etcd {

nlohmann::json rangeOp(const std::string& key) { return {{"request_range", {{"key", base64Encode(key)}}}}; }
nlohmann::json deleteOp(const std::string& key) { return {{"request_delete_range", {{"key", base64Encode(key)}}}}; }
nlohmann::json absentCmp(const std::string& key) {
  return {{"key", base64Encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
}

std::optional<KeyValue> rangeResult(const nlohmann::json& reply, size_t i, bool& malformed) {
  malformed = false;
  const auto& kvs = member(txnResponse(reply, i, "response_range"), "kvs");
  if (!kvs.is_array() || kvs.empty()) return std::nullopt;
  KeyValue kv;
  if (!parseKv(kvs[0], kv)) {
    malformed = true;
    return std::nullopt;
  }
  return kv;
}

}  // namespace hawser::etcd
