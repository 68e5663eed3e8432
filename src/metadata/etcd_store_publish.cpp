// EtcdStore, the local segment: a lease granted at start and kept alive,
// the descriptor published under it (claiming the name), re-granted and
// re-published after a loss, revoked at stop.
#include "metadata/etcd_store.h"

#include <algorithm>

#include "base/config.h"
#include "base/log.h"
#include "metadata/name_claim.h"

namespace hawser {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kRevokeTimeout{2000};

}  // namespace

Status EtcdStore::start(const std::string& local_name, std::function<SegmentDesc()> local) {
  Status st = checkSegmentName(local_name);
  if (!st.ok()) return Status(Code::kInvalidArgument, "local_server_name: " + st.message());
  if (!local) return Status(Code::kInvalidArgument, "etcd store start: no local descriptor function");
  if (started_.load()) return Status(Code::kInternal, "etcd store started twice");
  local_name_ = local_name;
  local_ = std::move(local);

  int64_t id = 0, granted = 0;
  st = client_.leaseGrant(options_.lease_ttl_s, id, granted);
  if (!st.ok()) return st;
  lease_.store(id);
  HLOG_INFO("etcd: lease {:x} granted ({} s) for segment '{}'", id, granted, local_name_);
  st = publish(/*claim=*/true);
  if (!st.ok()) {
    etcd::Client::CallOptions co;
    co.timeout = std::min(options_.client.timeout, kRevokeTimeout);
    co.retries = 0;
    (void)client_.leaseRevoke(id, co);
    lease_.store(0);
    return st;
  }
  stopping_.store(false);
  started_.store(true);
  keepalive_thread_ = std::thread([this] { keepaliveLoop(); });
  watch_thread_ = std::thread([this] { watchLoop(); });
  return Status::OK();
}

void EtcdStore::stop() {
  if (!started_.exchange(false)) return;
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    stopping_.store(true);
  }
  wake_cv_.notify_all();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  int64_t lease = lease_.exchange(0);
  if (lease != 0 && outage_.load()) {
    HLOG_WARN("etcd: unreachable at shutdown; segment '{}' vanishes when lease {:x} expires (<= {} s)", local_name_,
              lease, options_.lease_ttl_s);
  } else if (lease != 0) {
    etcd::Client::CallOptions co;
    co.timeout = std::min(options_.client.timeout, kRevokeTimeout);
    co.retries = 0;
    Status st = client_.leaseRevoke(lease, co);
    if (!st.ok()) {
      HLOG_WARN("etcd: could not revoke lease {:x} at shutdown ({}); segment '{}' vanishes within {} s", lease,
                st.message(), local_name_, options_.lease_ttl_s);
    }
  }
}

Status EtcdStore::publishLocal() {
  if (!started_.load()) return Status::OK();  // start() publishes the first version
  if (outage_.load()) {
    // Known outage: do not block the registering thread for etcd.timeout_ms;
    // the keepalive thread publishes the current descriptor once etcd is back.
    requestRepublish();
    return Status(Code::kUnavailable, "etcd at " + client_.endpointsText() + " is unreachable; segment '" +
                                          local_name_ + "' is re-published when it is back");
  }
  Status st = publish(/*claim=*/false);
  if (!st.ok()) requestRepublish();  // the keepalive thread retries with backoff
  return st;
}

Status EtcdStore::publish(bool claim) {
  std::lock_guard<std::mutex> lk(publish_mu_);
  // Cleared before reading the descriptor: a request arriving after this
  // point publishes again (harmless), none is lost.
  need_publish_.store(false);
  const int64_t lease = lease_.load();
  if (lease == 0) {
    need_publish_.store(true);
    return Status(Code::kUnavailable, "etcd at " + client_.endpointsText() +
                                          ": no lease (etcd unreachable); segment '" + local_name_ +
                                          "' is published when etcd is back");
  }
  SegmentDesc d = local_();
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = local_name_;
  if (d.server_name.empty()) d.server_name = local_name_;
  const std::string value = encodeSegmentText(d);
  if (claim) {
    Status st = claimName(value);
    if (!st.ok()) return st;
    return Status::OK();
  }
  int gc = 0;
  etcd::Client::CallOptions co;
  co.grpc_code = &gc;
  Status st = client_.put(segmentKey(local_name_), value, lease, co);
  if (!st.ok()) {
    if (gc == 5) {  // lease not found: etcd lost it; the keepalive thread grants a new one
      int64_t expected = lease;
      lease_.compare_exchange_strong(expected, 0);
    }
    need_publish_.store(true);
    return st;
  }
  return Status::OK();
}

Status EtcdStore::claimName(const std::string& value) {
  SegmentDesc mine;
  (void)decodeSegmentText(value, mine);
  const std::string key = segmentKey(local_name_);
  int64_t expect = 0;
  for (int attempt = 0; attempt < kMaxCasAttempts; ++attempt) {
    bool ok = false;
    std::optional<etcd::KeyValue> cur;
    Status st = client_.putIf(key, value, expect, lease_.load(), ok, cur);
    if (!st.ok()) return st;
    if (ok) return Status::OK();
    if (!cur) {
      expect = 0;
      continue;
    }
    SegmentDesc old;
    Status dec = decodeSegmentText(cur->value, old);
    if (dec.ok()) {
      st = checkNameOwner(local_name_, old, mine, "etcd");
      if (!st.ok()) return st;
    }
    HLOG_INFO("etcd: taking over stale key {} (mod_revision {}, owner unreachable)", key, cur->mod_revision);
    expect = cur->mod_revision;
  }
  return Status(Code::kMetadataError, "etcd key '" + key + "' kept changing while claiming it (" +
                                          std::to_string(kMaxCasAttempts) + " attempts)");
}

void EtcdStore::keepaliveLoop() {
  const milliseconds interval(std::max<int64_t>(500, options_.lease_ttl_s * 1000 / 3));
  milliseconds backoff = kFirstBackoff;
  milliseconds wait = interval;
  auto next_keepalive = Clock::now() + interval;
  bool outage = false;
  auto failed = [&](const char* what, const Status& st) {
    if (!outage) {
      HLOG_WARN("etcd: {} failed ({}); retrying with backoff, cached descriptors keep serving", what,
                st.message());
    } else {
      HLOG_DEBUG("etcd: {} failed again: {}", what, st.message());
    }
    outage = true;
    outage_.store(true);
    wait = backoff;
    backoff = std::min(backoff * 2, options_.backoff_max);
  };
  etcd::Client::CallOptions co;
  co.retries = 0;  // this loop does its own backoff
  while (sleepFor(wait)) {
    if (lease_.load() == 0) {
      int64_t id = 0, granted = 0;
      Status st = client_.leaseGrant(options_.lease_ttl_s, id, granted, co);
      if (!st.ok()) {
        failed("lease grant", st);
        continue;
      }
      HLOG_WARN("etcd: lease lost; new lease {:x} granted, re-publishing segment '{}'", id, local_name_);
      lease_.store(id);
      need_publish_.store(true);
      next_keepalive = Clock::now() + interval;
    }
    if (need_publish_.load()) {
      Status st = publish(/*claim=*/false);
      if (!st.ok()) {
        if (lease_.load() == 0) {  // the put found the lease gone: grant a new one now
          wait = milliseconds(0);
          continue;
        }
        failed("re-publishing the local segment", st);
        continue;
      }
      republished_.fetch_add(1);
      HLOG_INFO("etcd: segment '{}' re-published", local_name_);
    }
    if (Clock::now() >= next_keepalive) {
      int64_t ttl = 0;
      const int64_t lease = lease_.load();
      Status st = client_.leaseKeepAlive(lease, ttl, co);
      if (!st.ok()) {
        failed("lease keepalive", st);
        continue;
      }
      if (ttl <= 0) {
        int64_t expected = lease;
        lease_.compare_exchange_strong(expected, 0);
        wait = milliseconds(0);
        continue;
      }
      next_keepalive = Clock::now() + interval;
    }
    if (outage) HLOG_INFO("etcd: reachable again at {}", client_.endpointsText());
    outage = false;
    outage_.store(false);
    backoff = kFirstBackoff;
    wait = std::chrono::duration_cast<milliseconds>(next_keepalive - Clock::now());
    if (wait.count() < 0) wait = milliseconds(0);
  }
}

}  // namespace hawser
