// MetadataStore on Mooncake's HTTP metadata server ("http://host:port/path",
// Mooncake's default path being /metadata), so that its users keep their
// server (its Go and Python examples, or mooncake_master
// --enable_http_metadata_server). The protocol, as those servers speak it:
//   GET    <url>?key=K          200 + the value | 404 (absent)
//   PUT    <url>?key=K  (body)  200: stored
//   DELETE <url>?key=K          200 | 404 (absent; the Go server answers 200)
// Values are hawser's descriptor JSON (metadata/descriptor.h) under
//   <prefix>/segments/<name>   memory segment of a live engine
//   <prefix>/files/<name>      file segment
// (prefix: metadata.prefix, default "hawser"; Mooncake's own engines use
// mooncake/..., so both can share one server without meeting).
//
// The protocol has no leases, no listing and no compare-and-swap:
//   - an engine's key is written at start (refusing a name a live engine
//     holds: its owner answers a ping) and deleted at a clean stop; a crashed
//     engine's key stays until its name is claimed again (as with Mooncake);
//   - change tracking polls: a background thread re-reads each fetched
//     segment every metadata.http_poll_ms and flags it changed when its
//     value differs, so mayHaveChanged() answers without a round trip;
//   - listing is not supported; file segment edits are read-then-write.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "metadata/http_client.h"
#include "metadata/store.h"

namespace hawser {

struct HttpStoreOptions {
  std::string prefix = "hawser";                     // metadata.prefix
  std::chrono::milliseconds timeout{3000};           // metadata.http_timeout_ms
  std::chrono::milliseconds connect_timeout{1000};   // metadata.http_timeout_ms / 3, at most 1 s
  std::chrono::milliseconds poll{1000};              // metadata.http_poll_ms
};

class HttpStore : public MetadataStore {
 public:
  // url: "http://host:port/path" (checked by makeHttpStore).
  HttpStore(std::string url, HttpStoreOptions options);
  ~HttpStore() override;

  // A GET of a key nobody writes: kUnavailable naming the URL when the
  // server does not answer, kMetadataError when it answers something else
  // than 200 or 404.
  Status connect();

  Status start(const std::string& local_name, std::function<SegmentDesc()> local) override;
  void stop() override;
  Status publishLocal() override;
  Status getSegment(const std::string& name, SegmentDesc& out) override;
  bool mayHaveChanged(const std::string& name, uint64_t generation) override;
  Status putFileSegment(const SegmentDesc& desc) override;
  Status removeSegment(const std::string& name) override;
  Status listSegments(std::vector<SegmentDesc>& out) override;

  std::string where() const override;
  Status getEntry(const std::string& name, SegmentEntry& out) override;
  Status registerFileSegment(const SegmentDesc& desc, bool replace) override;
  Status updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) override;
  Status removeEntry(const std::string& name, bool force) override;

  const std::string& url() const { return url_; }
  std::string segmentKey(const std::string& name) const { return options_.prefix + "/segments/" + name; }
  std::string fileKey(const std::string& name) const { return options_.prefix + "/files/" + name; }

  // One protocol call each. get: `found` false on 404. del: `found` false on 404.
  Status get(const std::string& key, std::string& value, bool& found);
  Status put(const std::string& key, const std::string& value);
  Status del(const std::string& key, bool& found);

 private:
  Status call(const std::string& method, const std::string& key, const std::string* body, http::Response& res);
  Status publish(bool claim);
  void pollLoop();

  const std::string url_;
  const HttpStoreOptions options_;
  http::Client http_;
  std::string local_name_;
  std::function<SegmentDesc()> local_;
  std::atomic<bool> started_{false};
  std::mutex publish_mu_;

  // Change tracking: what was fetched, by segment name.
  struct Fetched {
    std::string key;
    std::string value;     // as fetched
    bool changed = false;  // the poller saw another value (or none)
  };
  std::mutex state_mu_;
  std::map<std::string, Fetched> fetched_;
  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool stopping_ = false;
  std::thread poller_;
};

// The factory makeMetadataStore() calls for "http://" URIs: checks the URI
// (kInvalidArgument naming it), reads the tunables and checks that the
// server answers (kUnavailable naming the URL).
Status makeHttpStore(const std::string& uri, Config& config, std::unique_ptr<MetadataStore>& out);

}  // namespace hawser
