#include "metadata/etcd_txn.h"

namespace hawser::etcd {

nlohmann::json rangeOp(const std::string& key) { return {{"request_range", {{"key", base64Encode(key)}}}}; }
nlohmann::json deleteOp(const std::string& key) { return {{"request_delete_range", {{"key", base64Encode(key)}}}}; }
nlohmann::json absentCmp(const std::string& key) {
  return {{"key", base64Encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
}

std::optional<KeyValue> rangeResult(const nlohmann::json& reply, size_t i, bool& malformed) {
  malformed = false;
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.is_array() || responses.size() <= i) return std::nullopt;
  const auto& rr = responses[i].value("response_range", nlohmann::json::object());
  auto kvs = rr.find("kvs");
  if (kvs == rr.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  KeyValue kv;
  if (!parseKv((*kvs)[0], kv)) {
    malformed = true;
    return std::nullopt;
  }
  return kv;
}

}  // namespace hawser::etcd
