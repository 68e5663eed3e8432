// EtcdStore: construction, shared helpers and the factory. The store's
// concepts live in etcd_store_publish.cpp (the local segment: lease,
// keepalive, publish), etcd_store_watch.cpp (change tracking),
// etcd_store_lookup.cpp (reads) and etcd_store_files.cpp (file segments and
// the admin verbs).
#include "metadata/etcd_store.h"

#include "base/config.h"

namespace hawser {

using std::chrono::milliseconds;

EtcdStore::EtcdStore(std::vector<etcd::Endpoint> endpoints, EtcdStoreOptions options)
    : options_(std::move(options)), client_(std::move(endpoints), options_.client) {
  countChanges();
}

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

std::string EtcdStore::where() const {
  return std::string("etcd ") + (options_.client.security.tls ? "etcds://" : "etcd://") + client_.endpointsText() +
         " (prefix '" + options_.prefix + "')";
}

// ---- factory ----------------------------------------------------------------

Status makeEtcdStoreTyped(const std::string& uri, Config& config, std::unique_ptr<EtcdStore>& out) {
  std::vector<etcd::Endpoint> eps;
  bool tls = false;
  Status st = etcd::parseUri(uri, eps, &tls);
  if (!st.ok()) return st;
  EtcdStoreOptions opt;
  st = etcdOptionsFromConfig(config, opt);
  if (!st.ok()) return st;
  st = etcdSecurityFromConfig(config, uri, tls, opt.client.security);
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