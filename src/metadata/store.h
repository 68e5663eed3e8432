// Where segment descriptors live. "p2p": each engine serves its own over its
// rpc listener, file segments are kept in-process (and loadable from JSON).
// "etcd://": keys under <prefix>/segments/<name> and <prefix>/files/<name>.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "metadata/descriptor.h"

namespace hawser {

class Config;
namespace rpc {
class Server;
}

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;

  // Engine calls this once it knows its own segment; `local` returns the
  // current descriptor of this engine's memory (called whenever it is needed).
  virtual Status start(const std::string& local_name, std::function<SegmentDesc()> local) = 0;
  virtual void stop() = 0;
  // The local memory segment changed (registration). Incremental stores may
  // rewrite only what changed; p2p does nothing (served on demand).
  virtual Status publishLocal() = 0;

  // Fetch a segment's descriptor by name (memory or file).
  virtual Status getSegment(const std::string& name, SegmentDesc& out) = 0;
  // Has the named segment changed since `generation`? (cheap check; default: unknown=true)
  virtual bool mayHaveChanged(const std::string& /*name*/, uint64_t /*generation*/) { return true; }

  // The name peers use to open this engine's memory: p2p -> "host:port";
  // named stores -> the server name.
  virtual std::string localSegmentName(const std::string& server_name, const std::string& host,
                                       uint16_t port) const {
    return server_name;
  }

  virtual Status putFileSegment(const SegmentDesc& desc) = 0;
  virtual Status removeSegment(const std::string& name) = 0;
  virtual Status listSegments(std::vector<SegmentDesc>& out) = 0;
};

// Builds the store for a metadata URI: "p2p" or "etcd://h:p[,h:p]".
// kInvalidArgument on a malformed URI; kUnavailable if etcd cannot be reached.
Status makeMetadataStore(const std::string& uri, Config& config, rpc::Server* rpc,
                         std::unique_ptr<MetadataStore>& out);

}  // namespace hawser
