// The embedded "p2p" metadata store: no service to run.
//
// Memory segments are named "host:port"; a descriptor is fetched from that
// peer's rpc listener (method kGetSegment), which builds it from the owner's
// registry on demand — registration costs nothing per call.
// File segments live in-process; with config "file_segments" (env
// HAWSER_FILE_SEGMENTS) naming a JSON file {"version":"1.0","segments":[...]}
// they are loaded from it at start and saved back on change.
#pragma once

#include <map>
#include <mutex>

#include "metadata/store.h"

namespace hawser {

class P2pStore : public MetadataStore {
 public:
  P2pStore(Config& config, rpc::Server* rpc);

  Status start(const std::string& local_name, std::function<SegmentDesc()> local) override;
  void stop() override;
  Status publishLocal() override { return Status::OK(); }
  Status getSegment(const std::string& name, SegmentDesc& out) override;
  std::string localSegmentName(const std::string& server_name, const std::string& host,
                               uint16_t port) const override;
  Status putFileSegment(const SegmentDesc& desc) override;
  Status removeSegment(const std::string& name) override;
  Status listSegments(std::vector<SegmentDesc>& out) override;

 private:
  Status save();

  Config& config_;
  rpc::Server* rpc_;
  std::string local_name_;
  std::function<SegmentDesc()> local_;
  std::string file_path_;
  std::mutex mu_;
  std::map<std::string, SegmentDesc> files_;
};

// Reads / writes the p2p file-segment JSON file (shared with `hawser segment`).
Status loadFileSegments(const std::string& path, std::map<std::string, SegmentDesc>& out);
Status saveFileSegments(const std::string& path, const std::map<std::string, SegmentDesc>& segs);

}  // namespace hawser
