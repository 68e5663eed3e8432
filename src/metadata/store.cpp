#include "metadata/store.h"

#include <fmt/format.h>

#include "metadata/p2p_store.h"
#if HAWSER_HAVE_ETCD
#include "metadata/etcd_store.h"
#include "metadata/http_store.h"
#endif

namespace hawser {

namespace {

Status notSupported(const MetadataStore& s, const char* verb) {
  return {Code::kNotSupported, fmt::format("{}: {} is not supported by this metadata store", s.where(), verb)};
}

}  // namespace

Status MetadataStore::listEntries(std::vector<SegmentEntry>&) { return notSupported(*this, "listing entries"); }
Status MetadataStore::getEntry(const std::string&, SegmentEntry&) { return notSupported(*this, "reading an entry"); }
Status MetadataStore::registerFileSegment(const SegmentDesc&, bool) {
  return notSupported(*this, "registering a file segment");
}
Status MetadataStore::updateFileSegment(const std::string&, const std::function<Status(SegmentDesc&)>&) {
  return notSupported(*this, "editing a file segment");
}
Status MetadataStore::removeEntry(const std::string&, bool) { return notSupported(*this, "removing an entry"); }

Status makeMetadataStore(const std::string& uri, Config& config, rpc::Server* rpc,
                         std::unique_ptr<MetadataStore>& out) {
  if (uri.empty() || uri == "p2p" || uri == "P2PHANDSHAKE") {
    auto p2p = std::make_unique<P2pStore>(config, rpc);
    Status s = p2p->loadConfig();
    if (!s.ok()) return s;
    out = std::move(p2p);
    return Status::OK();
  }
  if (uri.rfind("etcd://", 0) == 0 || uri.rfind("etcds://", 0) == 0) {
#if HAWSER_HAVE_ETCD
    return makeEtcdStore(uri, config, out);
#else
    return {Code::kNotSupported, fmt::format("metadata_uri '{}': this build has no etcd support", uri)};
#endif
  }
  if (uri.rfind("http://", 0) == 0) {
#if HAWSER_HAVE_ETCD  // libcurl: the same HTTP client
    return makeHttpStore(uri, config, out);
#else
    return {Code::kNotSupported, fmt::format("metadata_uri '{}': this build has no HTTP (libcurl) support", uri)};
#endif
  }
  return {Code::kInvalidArgument,
          fmt::format("metadata_uri '{}' is not supported: use \"p2p\", \"etcd://host:port[,host:port]\", "
                      "\"etcds://host:port[,host:port]\" (etcd over TLS) or \"http://host:port/metadata\" "
                      "(Mooncake's HTTP metadata server)",
                      uri)};
}

}  // namespace hawser
