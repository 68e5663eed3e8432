// MetadataStore on etcd v3 (HTTP/JSON gateway, see etcd_client.h).
//
// Key layout (prefix from metadata.prefix, default "hawser"):
//   <prefix>/segments/<name>  memory segment of a live engine (name =
//                             local_server_name), attached to the engine's
//                             lease: kept alive every TTL/3, revoked at stop(),
//                             gone within the TTL when the process dies.
//   <prefix>/files/<name>     file segment, persistent (no lease).
// Values are descriptor JSON (metadata/descriptor.h).
//
// Background threads (only after start()):
//   keepalive — renews the lease; when the lease is lost (etcd restarted with
//               a fresh data dir, expired during an outage) it grants a new
//               one and re-publishes the local segment; retries with backoff
//               while etcd is unreachable.
//   watch     — one watch on <prefix>/ keeps the latest mod_revision of every
//               key, so mayHaveChanged() answers without a round trip; after a
//               break it resyncs (range, then watch from the next revision).
//               It also re-publishes the local key if someone deletes it.
// While etcd is unreachable mayHaveChanged() says "no" for what was fetched,
// so cached descriptors keep serving transfers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metadata/etcd_client.h"
#include "metadata/etcd_store_options.h"
#include "metadata/store.h"

namespace hawser {

class EtcdStore : public MetadataStore {
 public:
  // One key as stored (for tools: owner, lease, revisions).
  using Entry = SegmentEntry;

  EtcdStore(std::vector<etcd::Endpoint> endpoints, EtcdStoreOptions options);
  ~EtcdStore() override;

  // Checks that some endpoint answers as etcd (kUnavailable/kTimeout naming
  // every endpoint otherwise).
  Status connect();

  Status start(const std::string& local_name, std::function<SegmentDesc()> local) override;
  void stop() override;
  Status publishLocal() override;
  Status getSegment(const std::string& name, SegmentDesc& out) override;
  bool mayHaveChanged(const std::string& name, uint64_t generation) override;
  Status putFileSegment(const SegmentDesc& desc) override;
  Status removeSegment(const std::string& name) override;
  Status listSegments(std::vector<SegmentDesc>& out) override;

  // Administration (store.h). getEntry: kSegmentNotFound when neither key exists.
  std::string where() const override;
  Status getEntry(const std::string& name, Entry& out) override;
  Status listEntries(std::vector<Entry>& out) override;
  // replace=false: createFileSegment; true: putFileSegment.
  Status registerFileSegment(const SegmentDesc& desc, bool replace) override;
  // Read-modify-write of a file segment, compare-and-swap on mod_revision,
  // retried on conflict (bounded) so concurrent edits are not lost.
  Status updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) override;
  // A memory segment's key (an engine's, under its lease) only with `force`.
  Status removeEntry(const std::string& name, bool force) override;

  // Creates a file segment; kInvalidArgument if the name is taken (memory or file).
  Status createFileSegment(const SegmentDesc& desc);
  // Removes one key; `is_file` picks the namespace. kSegmentNotFound if absent.
  Status removeKey(const std::string& name, bool is_file);

  // Introspection for tests and `doctor`.
  int64_t leaseId() const { return lease_.load(); }
  bool watchSynced() const { return synced_.load(); }
  uint64_t republishCount() const { return republished_.load(); }
  const std::string& prefix() const { return options_.prefix; }
  etcd::Client& client() { return client_; }
  std::string segmentKey(const std::string& name) const { return options_.prefix + "/segments/" + name; }
  std::string fileKey(const std::string& name) const { return options_.prefix + "/files/" + name; }

 private:
  static constexpr int kMaxCasAttempts = 16;
  static constexpr std::chrono::milliseconds kFirstBackoff{200};

  struct KeyState {
    int64_t revision = 0;  // mod_revision, or the revision that deleted it
    bool present = false;
  };
  struct Fetched {
    std::string rel;  // "segments/x" or "files/x"
    int64_t mod_revision = 0;
    uint64_t generation = 0;
  };

  // Puts this engine's descriptor under its lease. Serialized.
  Status publish(bool claim);
  // Claim-on-start: refuses a name held by a live engine elsewhere.
  Status claimName(const std::string& value);
  void keepaliveLoop();
  void watchLoop();
  void applyEvent(int64_t revision, const etcd::WatchEvent& ev);
  void requestRepublish();
  std::string relOf(const std::string& key) const;  // strips "<prefix>/"
  bool sleepFor(std::chrono::milliseconds d);       // false when stopping
  Status getBoth(const std::string& name, std::vector<std::optional<etcd::KeyValue>>& out);

  EtcdStoreOptions options_;
  etcd::Client client_;

  std::string local_name_;
  std::function<SegmentDesc()> local_;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> need_publish_{false};
  std::atomic<bool> wake_{false};  // wakes the keepalive thread early (a publish request)
  std::atomic<bool> outage_{false};  // the keepalive thread cannot reach etcd
  std::atomic<uint64_t> republished_{0};
  std::mutex publish_mu_;

  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::thread keepalive_thread_;
  std::thread watch_thread_;

  std::mutex state_mu_;
  std::map<std::string, KeyState> latest_;     // by rel key
  std::map<std::string, Fetched> fetched_;     // by segment name
  std::atomic<bool> synced_{false};
};

// The factory makeMetadataStore() calls for "etcd://" URIs: parses the URI
// strictly (kInvalidArgument naming it), reads the tunables, and checks that
// etcd answers (kUnavailable / kTimeout naming the endpoints).
Status makeEtcdStore(const std::string& uri, Config& config, std::unique_ptr<MetadataStore>& out);
// Same, typed, for tools that use the etcd-only operations.
Status makeEtcdStoreTyped(const std::string& uri, Config& config, std::unique_ptr<EtcdStore>& out);

}  // namespace hawser
