#include "metadata/etcd_store.h"

#include <algorithm>
#include <cctype>

#include "base/config.h"
#include "base/log.h"
#include "rpc/rpc.h"

namespace hawser {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kMaxCasAttempts = 16;
constexpr milliseconds kPingTimeout{500};
constexpr milliseconds kFirstBackoff{200};
constexpr milliseconds kRevokeTimeout{2000};

std::string b64(const std::string& s) { return etcd::base64Encode(s); }

nlohmann::json rangeOp(const std::string& key) { return {{"request_range", {{"key", b64(key)}}}}; }
nlohmann::json deleteOp(const std::string& key) { return {{"request_delete_range", {{"key", b64(key)}}}}; }
nlohmann::json absentCmp(const std::string& key) {
  return {{"key", b64(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
}

Status badConfig(const std::string& key, const std::string& value, const std::string& why) {
  return Status(Code::kInvalidArgument,
                key + " (env " + Config::envName(key) + ") = '" + value + "': " + why);
}

// kvs of responses[i].response_range, or empty.
std::optional<etcd::KeyValue> rangeResult(const nlohmann::json& reply, size_t i, bool& malformed) {
  malformed = false;
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.is_array() || responses.size() <= i) return std::nullopt;
  const auto& rr = responses[i].value("response_range", nlohmann::json::object());
  auto kvs = rr.find("kvs");
  if (kvs == rr.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  etcd::KeyValue kv;
  if (!etcd::parseKv((*kvs)[0], kv)) {
    malformed = true;
    return std::nullopt;
  }
  return kv;
}

}  // namespace

Status checkSegmentName(const std::string& name) {
  if (name.empty()) return Status(Code::kInvalidArgument, "segment name is empty");
  if (name.size() > 255)
    return Status(Code::kInvalidArgument, "segment name '" + name.substr(0, 32) + "...' is longer than 255 bytes");
  for (unsigned char c : name) {
    if (c == '/' || std::isspace(c) || std::iscntrl(c))
      return Status(Code::kInvalidArgument,
                    "segment name '" + name + "' contains '/', whitespace or a control character");
  }
  return Status::OK();
}

Status etcdOptionsFromConfig(Config& config, EtcdStoreOptions& out) {
  out = EtcdStoreOptions{};
  out.prefix = config.getString("metadata.prefix", "hawser");
  if (out.prefix.empty()) return badConfig("metadata.prefix", out.prefix, "must not be empty");
  if (out.prefix.back() == '/') return badConfig("metadata.prefix", out.prefix, "must not end with '/'");
  for (unsigned char c : out.prefix) {
    if (std::isspace(c) || std::iscntrl(c))
      return badConfig("metadata.prefix", out.prefix, "contains whitespace or a control character");
  }
  auto intIn = [&](const char* key, int64_t def, int64_t lo, int64_t hi, int64_t& v) -> Status {
    v = config.getInt(key, def);
    if (v < lo || v > hi)
      return badConfig(key, std::to_string(v), "must be in " + std::to_string(lo) + ".." + std::to_string(hi));
    return Status::OK();
  };
  int64_t v = 0;
  Status st = intIn("etcd.lease_ttl_s", 10, 2, 86400, v);
  if (!st.ok()) return st;
  out.lease_ttl_s = v;
  if (!(st = intIn("etcd.timeout_ms", 3000, 10, 600000, v)).ok()) return st;
  out.client.timeout = milliseconds(v);
  if (!(st = intIn("etcd.connect_timeout_ms", 1000, 10, 600000, v)).ok()) return st;
  out.client.connect_timeout = milliseconds(v);
  if (!(st = intIn("etcd.retries", 2, 0, 10, v)).ok()) return st;
  out.client.retries = static_cast<int>(v);
  if (!(st = intIn("etcd.backoff_max_ms", 2000, 10, 600000, v)).ok()) return st;
  out.backoff_max = milliseconds(v);
  return Status::OK();
}

EtcdStore::EtcdStore(std::vector<etcd::Endpoint> endpoints, EtcdStoreOptions options)
    : options_(std::move(options)), client_(std::move(endpoints), options_.client) {}

EtcdStore::~EtcdStore() { stop(); }

Status EtcdStore::connect() { return client_.probe(); }

std::string EtcdStore::relOf(const std::string& key) const {
  const std::string p = options_.prefix + "/";
  if (key.compare(0, p.size(), p) != 0) return std::string();
  return key.substr(p.size());
}

bool EtcdStore::sleepFor(milliseconds d) {
  std::unique_lock<std::mutex> lk(wake_mu_);
  wake_cv_.wait_for(lk, d, [&] { return stopping_.load() || wake_.load(); });
  wake_.store(false);
  return !stopping_.load();
}

void EtcdStore::requestRepublish() {
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    need_publish_.store(true);
    wake_.store(true);
  }
  wake_cv_.notify_all();
}

// ---- local segment: lease + publish ---------------------------------------

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
    bool same_endpoint = dec.ok() && old.host == mine.host && old.rpc_port == mine.rpc_port;
    if (dec.ok() && !same_endpoint && !old.host.empty() && old.rpc_port != 0) {
      std::string reply;
      Status ping = rpc::call(old.host, old.rpc_port, rpc::kPing, std::string(), reply, kPingTimeout);
      bool alive = ping.ok() || (ping.code() != Code::kUnavailable && ping.code() != Code::kTimeout);
      if (alive) {
        return Status(Code::kInvalidArgument,
                      "local_server_name '" + local_name_ + "' is already published in etcd by a live engine at " +
                          old.host + ":" + std::to_string(old.rpc_port) + " (pid " + std::to_string(old.pid) +
                          "); stop it or pick another name");
      }
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

// ---- watch: change tracking -------------------------------------------------

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
      auto it = latest_.find("segments/" + local_name_);
      own_missing = it == latest_.end() || !it->second.present;
    }
    if (own_missing && !stopping_.load()) requestRepublish();
    synced_.store(true);
    backoff = kFirstBackoff;
    bool compacted = false;
    st = client_.watch(
        prefix, rev + 1, stopping_, [] {},
        [this](int64_t r, const std::vector<etcd::WatchEvent>& evs) {
          for (const auto& ev : evs) applyEvent(r, ev);
        },
        compacted);
    synced_.store(false);
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

// ---- lookups ----------------------------------------------------------------

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

// ---- file segments ----------------------------------------------------------

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
  if (!reply.value("succeeded", false)) {
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
  if (reply.value("succeeded", false)) return Status::OK();
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
  int64_t deleted = 0;
  for (const auto& r : reply.value("responses", nlohmann::json::array()))
    deleted += etcd::jsonInt(r.value("response_delete_range", nlohmann::json::object()), "deleted");
  if (deleted == 0) {
    return Status(Code::kSegmentNotFound, "segment '" + name + "' not found in etcd at " + client_.endpointsText());
  }
  return Status::OK();
}

// ---- factory ----------------------------------------------------------------

Status makeEtcdStoreTyped(const std::string& uri, Config& config, std::unique_ptr<EtcdStore>& out) {
  std::vector<etcd::Endpoint> eps;
  Status st = etcd::parseUri(uri, eps);
  if (!st.ok()) return st;
  EtcdStoreOptions opt;
  st = etcdOptionsFromConfig(config, opt);
  if (!st.ok()) return st;
  auto store = std::make_unique<EtcdStore>(std::move(eps), std::move(opt));
  st = store->connect();
  if (!st.ok()) return st;
  out = std::move(store);
  return Status::OK();
}

Status makeEtcdStore(const std::string& uri, Config& config, std::unique_ptr<MetadataStore>& out) {
  std::unique_ptr<EtcdStore> s;
  Status st = makeEtcdStoreTyped(uri, config, s);
  if (!st.ok()) return st;
  out = std::move(s);
  return Status::OK();
}

}  // namespace hawser
