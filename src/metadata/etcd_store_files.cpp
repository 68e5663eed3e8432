// EtcdStore, file segments (persistent keys <prefix>/files/<name>, no lease)
// and the admin verbs: create-if-absent, replace, compare-and-swap edits,
// removal.
#include "metadata/etcd_store.h"

#include <algorithm>

#include "base/config.h"
#include "base/log.h"
#include "metadata/etcd_replies.h"
#include "metadata/etcd_txn.h"

namespace hawser {

using etcd::absentCmp;
using etcd::deleteOp;
using etcd::rangeOp;
using etcd::rangeResult;

namespace {

std::string b64(const std::string& s) { return etcd::base64Encode(s); }

}  // namespace

Status EtcdStore::putFileSegment(const SegmentDesc& desc) {
  if (desc.kind != SegmentDesc::Kind::kFile)
    return Status(Code::kInvalidArgument, "putFileSegment: segment '" + desc.name + "' is not a file segment");
  Status st = checkSegmentName(desc.name);
  if (!st.ok()) return st;
  nlohmann::json put = {{"key", b64(fileKey(desc.name))}, {"value", b64(encodeSegmentText(desc))}};
  nlohmann::json body = {{"compare", nlohmann::json::array({absentCmp(segmentKey(desc.name))})},
                         {"success", nlohmann::json::array({{{"request_put", put}}})}};
  nlohmann::json reply;
  st = client_.call("kv/txn", body, reply);  // the put is idempotent: retry is safe
  if (!st.ok()) return st;
  if (!etcd::txnSucceeded(reply)) {
    return Status(Code::kInvalidArgument,
                  "segment name '" + desc.name + "' is taken by a memory segment (" + segmentKey(desc.name) + ")");
  }
  return Status::OK();
}

Status EtcdStore::createFileSegment(const SegmentDesc& desc) {
  if (desc.kind != SegmentDesc::Kind::kFile)
    return Status(Code::kInvalidArgument, "segment '" + desc.name + "' is not a file segment");
  Status st = checkSegmentName(desc.name);
  if (!st.ok()) return st;
  nlohmann::json put = {{"key", b64(fileKey(desc.name))}, {"value", b64(encodeSegmentText(desc))}};
  nlohmann::json body = {
      {"compare", nlohmann::json::array({absentCmp(segmentKey(desc.name)), absentCmp(fileKey(desc.name))})},
      {"success", nlohmann::json::array({{{"request_put", put}}})},
      {"failure", nlohmann::json::array({rangeOp(segmentKey(desc.name))})}};
  nlohmann::json reply;
  etcd::Client::CallOptions co;
  co.idempotent = false;
  st = client_.call("kv/txn", body, reply, co);
  if (!st.ok()) return st;
  if (etcd::txnSucceeded(reply)) return Status::OK();
  bool malformed = false;
  bool memory = rangeResult(reply, 0, malformed).has_value();
  return Status(Code::kInvalidArgument, "segment name '" + desc.name + "' already exists as a " +
                                            (memory ? "memory" : "file") + " segment (key " +
                                            (memory ? segmentKey(desc.name) : fileKey(desc.name)) + ")");
}

Status EtcdStore::updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  for (int attempt = 0; attempt < kMaxCasAttempts; ++attempt) {
    Entry e;
    st = getEntry(name, e);
    if (!st.ok()) return st;
    if (!e.is_file) return Status(Code::kInvalidArgument, "segment '" + name + "' is a memory segment, not a file segment");
    if (!e.decode.ok()) return Status(Code::kMetadataError, "etcd key '" + e.key + "': " + e.decode.message());
    st = edit(e.desc);
    if (!st.ok()) return st;
    bool ok = false;
    std::optional<etcd::KeyValue> cur;
    st = client_.putIf(e.key, encodeSegmentText(e.desc), e.mod_revision, 0, ok, cur);
    if (!st.ok()) return st;
    if (ok) return Status::OK();
    HLOG_DEBUG("etcd: concurrent update of {}, retrying", e.key);
  }
  return Status(Code::kMetadataError, "file segment '" + name + "' kept changing under concurrent updates (" +
                                          std::to_string(kMaxCasAttempts) + " attempts)");
}

Status EtcdStore::registerFileSegment(const SegmentDesc& desc, bool replace) {
  return replace ? putFileSegment(desc) : createFileSegment(desc);
}

Status EtcdStore::removeEntry(const std::string& name, bool force) {
  Entry e;
  Status st = getEntry(name, e);
  if (!st.ok()) return st;
  if (!e.is_file && !force) {
    std::string owner = e.decode.ok() ? " of the engine at " + e.desc.host + ":" + std::to_string(e.desc.rpc_port) +
                                            " (pid " + std::to_string(e.desc.pid) + ")"
                                      : std::string();
    return Status(Code::kInvalidArgument,
                  "'" + name + "' is the memory segment" + owner +
                      "; it vanishes when that engine stops or its lease expires. Use --force to delete the key "
                      "anyway (a running engine re-publishes it)");
  }
  return removeKey(name, e.is_file);
}

Status EtcdStore::removeKey(const std::string& name, bool is_file) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  const std::string key = is_file ? fileKey(name) : segmentKey(name);
  int64_t deleted = 0;
  st = client_.removeIf(key, 0, deleted);
  if (!st.ok()) return st;
  if (deleted == 0) return Status(Code::kSegmentNotFound, "no key " + key + " in etcd at " + client_.endpointsText());
  return Status::OK();
}

Status EtcdStore::removeSegment(const std::string& name) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  nlohmann::json body = {{"success", nlohmann::json::array({deleteOp(segmentKey(name)), deleteOp(fileKey(name))})}};
  nlohmann::json reply;
  st = client_.call("kv/txn", body, reply);
  if (!st.ok()) return st;
  const int64_t deleted = etcd::txnDeleted(reply);
  if (deleted == 0) {
    return Status(Code::kSegmentNotFound, "segment '" + name + "' not found in etcd at " + client_.endpointsText());
  }
  return Status::OK();
}

}  // namespace hawser
