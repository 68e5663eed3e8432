// EtcdStore, change tracking: one watch on <prefix>/ keeps the latest
// mod_revision of every key (resynced after a break), so mayHaveChanged()
// invalidates cached descriptors without a round trip.
#include "metadata/etcd_store.h"

#include <algorithm>

#include "base/config.h"
#include "base/log.h"

namespace hawser {

using std::chrono::milliseconds;

void EtcdStore::applyEvent(int64_t revision, const etcd::WatchEvent& ev) {
  (void)revision;
  const std::string rel = relOf(ev.kv.key);
  if (rel.empty()) return;
  bool own = false;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    KeyState& ks = latest_[rel];
    ks.present = !ev.is_delete;
    ks.revision = ev.kv.mod_revision;
    own = ev.is_delete && rel == "segments/" + local_name_;
    noteChange();
  }
  if (own && !stopping_.load()) {
    HLOG_WARN("etcd: key of local segment '{}' was deleted while the engine runs; re-publishing", local_name_);
    requestRepublish();
  }
}

void EtcdStore::watchLoop() {
  const std::string prefix = options_.prefix + "/";
  milliseconds backoff = kFirstBackoff;
  milliseconds wait{0};
  etcd::Client::CallOptions co;
  co.retries = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lk(wake_mu_);
      wake_cv_.wait_for(lk, wait, [&] { return stopping_.load(); });
    }
    if (stopping_.load()) break;
    std::vector<etcd::KeyValue> kvs;
    int64_t rev = 0;
    Status st = client_.getPrefix(prefix, kvs, &rev, /*keys_only=*/true, co);
    if (!st.ok()) {
      synced_.store(false);
      noteChange();
      HLOG_DEBUG("etcd: watch resync failed: {}", st.message());
      wait = backoff;
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    bool own_missing = true;
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      std::map<std::string, KeyState> now;
      for (const auto& kv : kvs) {
        std::string rel = relOf(kv.key);
        if (rel.empty()) continue;
        now[rel] = KeyState{kv.mod_revision, true};
      }
      for (const auto& [rel, ks] : latest_) {
        if (!now.count(rel)) now[rel] = KeyState{rev, false};
      }
      for (const auto& [name, f] : fetched_) {
        if (!now.count(f.rel)) now[f.rel] = KeyState{rev, false};
      }
      latest_ = std::move(now);
      noteChange();
      auto it = latest_.find("segments/" + local_name_);
      own_missing = it == latest_.end() || !it->second.present;
    }
    if (own_missing && !stopping_.load()) requestRepublish();
    synced_.store(true);
    noteChange();
    backoff = kFirstBackoff;
    bool compacted = false;
    st = client_.watch(
        prefix, rev + 1, stopping_, [] {},
        [this](int64_t r, const std::vector<etcd::WatchEvent>& evs) {
          for (const auto& ev : evs) applyEvent(r, ev);
        },
        compacted);
    synced_.store(false);
    noteChange();
    if (stopping_.load()) break;
    HLOG_DEBUG("etcd: watch ended: {}", st.message());
    wait = compacted ? milliseconds(0) : backoff;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

bool EtcdStore::mayHaveChanged(const std::string& name, uint64_t generation) {
  std::lock_guard<std::mutex> lk(state_mu_);
  auto f = fetched_.find(name);
  if (f == fetched_.end() || f->second.generation != generation) return true;
  if (!synced_.load()) return false;  // etcd unreachable: keep serving what we have
  auto it = latest_.find(f->second.rel);
  if (it == latest_.end()) return false;  // nothing newer seen yet
  return it->second.revision != f->second.mod_revision;
}

}  // namespace hawser
