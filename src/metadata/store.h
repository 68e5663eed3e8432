// Where segment descriptors live. "p2p": each engine serves its own over its
// rpc listener, file segments are kept in-process (and loadable from JSON).
// "etcd://": keys under <prefix>/segments/<name> and <prefix>/files/<name>;
// "http://": the same keys on Mooncake's HTTP metadata server (http_store.h).
#pragma once

#include <atomic>
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

// One stored segment as an administrator sees it: what `hawser segment list`
// and `show` print, including entries whose descriptor does not decode.
struct SegmentEntry {
  std::string name;
  bool is_file = false;
  std::string key;              // where it is stored (etcd key; "" with p2p)
  int64_t mod_revision = 0;     // etcd: revisions of the key
  int64_t create_revision = 0;
  int64_t lease = 0;            // etcd memory segments: the owning engine's lease
  Status decode;                // why `desc` could not be decoded, if so
  SegmentDesc desc;
};

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
  // A count that moves on every change of what mayHaveChanged() reads (a
  // change notice, a watch event, a fetch): a caller told "no" at count N
  // may take "no" without asking again while the count is still N, and
  // every thread submitting to a segment then reads a line nobody writes
  // instead of taking the store's lock. 0: this store does not count (ask
  // every time).
  uint64_t changeCount() const { return changes_.load(std::memory_order_acquire); }

 protected:
  // A store that counts says so once, in its constructor,
  void countChanges() { changes_.store(1, std::memory_order_relaxed); }
  // and calls this after each change, once the change is visible to
  // mayHaveChanged() (under the store's lock).
  void noteChange() {
    if (changes_.load(std::memory_order_relaxed) != 0) changes_.fetch_add(1, std::memory_order_release);
  }

 public:

  // The name peers use to open this engine's memory: p2p -> "host:port";
  // named stores -> the server name.
  virtual std::string localSegmentName(const std::string& server_name, const std::string& host,
                                       uint16_t port) const {
    return server_name;
  }

  virtual Status putFileSegment(const SegmentDesc& desc) = 0;
  virtual Status removeSegment(const std::string& name) = 0;
  virtual Status listSegments(std::vector<SegmentDesc>& out) = 0;

  // ---- Administration (hawser segment, through hawser::MetadataAdmin) -------
  // These work on a store that was never start()ed. The defaults answer
  // kNotSupported.

  // Where the segments live, for messages ("etcd etcd://h:p (prefix 'hawser')").
  virtual std::string where() const { return "metadata"; }
  // Every stored segment, with its raw state; one that does not decode is
  // listed with `decode` set.
  virtual Status listEntries(std::vector<SegmentEntry>& out);
  // One segment; kSegmentNotFound when absent. A descriptor that does not
  // decode is Ok with out.decode set.
  virtual Status getEntry(const std::string& name, SegmentEntry& out);
  // Stores a file segment. replace=false: create-if-absent, kInvalidArgument
  // when the name is taken; replace=true: overwrites a file segment (never a
  // memory segment of that name).
  virtual Status registerFileSegment(const SegmentDesc& desc, bool replace);
  // Atomic read-modify-write of one file segment: `edit` changes the
  // descriptor (its error aborts, nothing written). etcd: compare-and-swap on
  // the key's mod_revision, retried on conflict; p2p: under an exclusive
  // flock of the file segments JSON file. kSegmentNotFound when absent;
  // kInvalidArgument when the name is a memory segment.
  virtual Status updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit);
  // Removes a file segment; a memory segment's key (etcd: an engine's, under
  // its lease) only with `force`, else kInvalidArgument naming the owner.
  virtual Status removeEntry(const std::string& name, bool force);

 private:
  std::atomic<uint64_t> changes_{0};
};

// Builds the store for a metadata URI: "p2p", "etcd://h:p[,h:p]" or
// "http://h:p/path" (Mooncake's HTTP metadata server).
// kInvalidArgument on a malformed URI; kUnavailable if etcd cannot be reached.
Status makeMetadataStore(const std::string& uri, Config& config, rpc::Server* rpc,
                         std::unique_ptr<MetadataStore>& out);

}  // namespace hawser
