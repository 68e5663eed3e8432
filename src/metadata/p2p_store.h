// The embedded "p2p" metadata store: no service to run.
//
// Memory segments are named "host:port"; a descriptor is fetched from that
// peer's rpc listener (method kGetSegmentCall), which builds it from the owner's
// registry on demand — registration costs nothing per call.
// Peers that fetched a descriptor are told when it changes (registration
// or unregistration): the owner sends kSegmentChangedCall from a background
// thread, and the peer's next submit to that segment re-fetches it.
// File segments live in-process; with config "file_segments" (env
// HAWSER_FILE_SEGMENTS) naming a JSON file {"version":"1.0","segments":[...]}
// they are loaded from it at start and saved back on change.
#pragma once

#include <chrono>
#include <map>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "metadata/p2p_file_segments.h"
#include "metadata/store.h"
#include "rpc/rpc.h"

namespace hawser {

// The p2p store's control methods on the engine's rpc listener.
inline const rpc::Channel kGetSegmentCall = rpc::channel("metadata.get_segment");          // requester name -> descriptor
inline const rpc::Channel kSegmentChangedCall = rpc::channel("metadata.segment_changed");  // owner name

class P2pStore : public MetadataStore {
 public:
  P2pStore(Config& config, rpc::Server* rpc);
  // Reads file_segments and rpc.timeout_ms (makeMetadataStore calls it
  // before handing the store out): kInvalidArgument on a bad value.
  Status loadConfig();

  Status start(const std::string& local_name, std::function<SegmentDesc()> local) override;
  void stop() override;
  Status publishLocal() override;
  Status getSegment(const std::string& name, SegmentDesc& out) override;
  bool mayHaveChanged(const std::string& name, uint64_t generation) override;
  std::string localSegmentName(const std::string& server_name, const std::string& host,
                               uint16_t port) const override;
  Status putFileSegment(const SegmentDesc& desc) override;
  Status removeSegment(const std::string& name) override;
  Status listSegments(std::vector<SegmentDesc>& out) override;

  // Administration: on the file segments JSON file (config file_segments,
  // edits under its flock) when there is one, else on this process's own.
  std::string where() const override;
  Status listEntries(std::vector<SegmentEntry>& out) override;
  Status getEntry(const std::string& name, SegmentEntry& out) override;
  Status registerFileSegment(const SegmentDesc& desc, bool replace) override;
  Status updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) override;
  // p2p stores no memory segments: `force` changes nothing.
  Status removeEntry(const std::string& name, bool force) override;

 private:
  Status save();
  std::string filePath() const;  // the file segments JSON file, "" for none
  std::string location() const;  // filePath() or "this process", for messages
  Status notFound(const std::string& name) const;
  Status readFiles(FileSegmentMap& out);
  Status editFiles(const std::function<Status(FileSegmentMap&, bool& dirty)>& edit);

  Config& config_;
  std::chrono::milliseconds rpc_timeout_{5000};  // rpc.timeout_ms, read by loadConfig()
  rpc::Server* rpc_;
  std::string local_name_;
  std::function<SegmentDesc()> local_;
  std::string file_path_;  // file_segments, read by loadConfig()
  std::mutex mu_;
  FileSegmentMap files_;

  // Change notices.
  void notifier();
  std::mutex sub_mu_;
  std::condition_variable sub_cv_;
  std::set<std::string> subscribers_;  // peers ("host:port") that fetched our descriptor
  std::set<std::string> changed_;      // segments whose owner said they changed
  bool dirty_ = false, stopping_ = false;
  std::thread notifier_;
};

}  // namespace hawser
