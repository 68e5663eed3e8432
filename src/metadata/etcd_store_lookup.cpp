// EtcdStore, reads: one segment (memory or file key, in one txn), every
// segment under the prefix; what was fetched is remembered for change tracking.
#include "metadata/etcd_store.h"

#include <algorithm>

#include "base/config.h"
#include "base/log.h"
#include "metadata/etcd_txn.h"

namespace hawser {

using etcd::rangeOp;
using etcd::rangeResult;

Status EtcdStore::getBoth(const std::string& name, std::vector<std::optional<etcd::KeyValue>>& out) {
  out.assign(2, std::nullopt);
  nlohmann::json body = {{"success", nlohmann::json::array({rangeOp(segmentKey(name)), rangeOp(fileKey(name))})}};
  nlohmann::json reply;
  Status st = client_.call("kv/txn", body, reply);
  if (!st.ok()) return st;
  for (size_t i = 0; i < 2; ++i) {
    bool malformed = false;
    out[i] = rangeResult(reply, i, malformed);
    if (malformed) return Status(Code::kMetadataError, "etcd returned a malformed kv for segment '" + name + "'");
  }
  return Status::OK();
}

Status EtcdStore::getEntry(const std::string& name, Entry& out) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  std::vector<std::optional<etcd::KeyValue>> kvs;
  st = getBoth(name, kvs);
  if (!st.ok()) return st;
  const etcd::KeyValue* kv = kvs[0] ? &*kvs[0] : kvs[1] ? &*kvs[1] : nullptr;
  if (kv == nullptr) {
    return Status(Code::kSegmentNotFound, "segment '" + name + "' not found in etcd at " + client_.endpointsText() +
                                              " (no key " + segmentKey(name) + " or " + fileKey(name) + ")");
  }
  out = Entry{};
  out.key = kv->key;
  out.name = name;
  out.is_file = kvs[0] ? false : true;
  out.mod_revision = kv->mod_revision;
  out.create_revision = kv->create_revision;
  out.lease = kv->lease;
  out.decode = decodeSegmentText(kv->value, out.desc);
  if (out.decode.ok()) {
    bool kind_ok = out.is_file == (out.desc.kind == SegmentDesc::Kind::kFile);
    if (!kind_ok) {
      out.decode = Status(Code::kMetadataError, "etcd key '" + out.key + "' holds a " +
                                                    (out.is_file ? "memory" : "file") + " segment descriptor");
    }
  }
  return Status::OK();
}

Status EtcdStore::getSegment(const std::string& name, SegmentDesc& out) {
  Entry e;
  Status st = getEntry(name, e);
  if (st.code() == Code::kSegmentNotFound) {
    // A cached copy of a deleted segment is as fresh as it gets until the key
    // comes back: stop flagging it (callers would re-fetch on every use).
    std::lock_guard<std::mutex> lk(state_mu_);
    auto f = fetched_.find(name);
    if (f != fetched_.end()) {
      auto it = latest_.find(f->second.rel);
      if (it != latest_.end() && !it->second.present) f->second.mod_revision = it->second.revision;
    }
  }
  if (!st.ok()) return st;
  if (!e.decode.ok()) return Status(Code::kMetadataError, "etcd key '" + e.key + "': " + e.decode.message());
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    fetched_[name] = Fetched{(e.is_file ? "files/" : "segments/") + name, e.mod_revision, e.desc.generation};
    noteChange();
  }
  out = std::move(e.desc);
  return Status::OK();
}

Status EtcdStore::listEntries(std::vector<Entry>& out) {
  out.clear();
  std::vector<etcd::KeyValue> kvs;
  Status st = client_.getPrefix(options_.prefix + "/", kvs);
  if (!st.ok()) return st;
  for (auto& kv : kvs) {
    std::string rel = relOf(kv.key);
    Entry e;
    if (rel.rfind("segments/", 0) == 0) {
      e.name = rel.substr(9);
    } else if (rel.rfind("files/", 0) == 0) {
      e.name = rel.substr(6);
      e.is_file = true;
    } else {
      continue;
    }
    if (!checkSegmentName(e.name).ok()) continue;
    e.key = kv.key;
    e.mod_revision = kv.mod_revision;
    e.create_revision = kv.create_revision;
    e.lease = kv.lease;
    e.decode = decodeSegmentText(kv.value, e.desc);
    if (e.decode.ok() && e.is_file != (e.desc.kind == SegmentDesc::Kind::kFile))
      e.decode = Status(Code::kMetadataError, "holds a descriptor of the other kind");
    out.push_back(std::move(e));
  }
  return Status::OK();
}

Status EtcdStore::listSegments(std::vector<SegmentDesc>& out) {
  out.clear();
  std::vector<Entry> entries;
  Status st = listEntries(entries);
  if (!st.ok()) return st;
  for (auto& e : entries) {
    if (!e.decode.ok()) {
      HLOG_WARN("etcd: skipping key {}: {}", e.key, e.decode.message());
      continue;
    }
    out.push_back(std::move(e.desc));
  }
  return Status::OK();
}

}  // namespace hawser
