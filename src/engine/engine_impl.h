// The engine behind hawser::TransferEngine.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "base/config.h"
#include "base/registry.h"
#include "base/transport.h"
#include "hawser/engine.h"
#include "metadata/descriptor.h"
#include "metadata/store.h"
#include "rpc/rpc.h"

namespace hawser {

class EngineImpl {
 public:
  EngineImpl();
  ~EngineImpl();

  Status init(const std::string& metadata_uri, const std::string& server_name, const std::string& host,
              uint16_t rpc_port);
  void shutdown();

  Status registerMemory(const std::vector<BufferEntry>& buffers);
  Status unregisterMemory(const std::vector<void*>& addrs);

  Status openSegment(const std::string& name, SegmentID& out);
  Status closeSegment(SegmentID id);
  Status segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out);
  Status registerFileSegment(const std::string& name, const std::vector<FileDesc>& files);
  Status unregisterFileSegment(const std::string& name);

  Status allocateBatch(size_t capacity, BatchID& out);
  Status submit(BatchID id, const std::vector<TransferRequest>& reqs);
  Status taskStatus(BatchID id, size_t task, TransferStatus& st);
  Status batchStatus(BatchID id, TransferStatus& st);
  Status wait(BatchID id, std::chrono::milliseconds timeout);
  Status cancel(BatchID id);
  Status freeBatch(BatchID id);

  // Installs an extra transport, most preferred (tests and embedders).
  Status installTransport(std::unique_ptr<Transport> t);

  SegmentDesc localDescriptor() const;
  std::vector<std::string> transportNames() const;

  Config& config() { return config_; }
  MemoryRegistry& registry() { return registry_; }
  rpc::Server& rpcServer() { return rpc_; }
  MetadataStore* store() { return store_.get(); }
  const std::string& segmentName() const { return segment_name_; }
  uint16_t rpcPort() const { return rpc_.port(); }
  bool initialized() const { return initialized_; }

 private:
  struct OpenSegment {
    std::string name;
    std::shared_ptr<const SegmentDesc> desc;
    int refs = 0;
  };

  Status checkInit() const;
  TransportContext transportContext();
  // Undoes a partly done init(): listener stopped, transports shut down.
  void abandonInit();
  std::shared_ptr<Batch> findBatch(BatchID id) const;
  std::shared_ptr<const SegmentDesc> segmentDesc(SegmentID id) const;
  // Re-fetches a memory segment's descriptor (owner registered more memory).
  std::shared_ptr<const SegmentDesc> refreshSegment(SegmentID id);
  Status fetchSegment(const std::string& name, SegmentDesc& out);
  Transport* selectTransport(const SegmentDesc& seg, const std::string& local_location) const;

  Config config_;
  MemoryRegistry registry_;
  rpc::Server rpc_;
  std::unique_ptr<MetadataStore> store_;
  std::vector<std::unique_ptr<Transport>> transports_;
  bool initialized_ = false;
  std::string server_name_, host_, host_id_, segment_name_;
  std::string forced_transport_;
  size_t slices_per_task_ = 0;

  std::mutex reg_mu_;  // serialises registrations
  mutable std::mutex attrs_mu_;
  std::map<uint64_t, nlohmann::json> buffer_attrs_;  // per region: transport attrs

  mutable std::mutex seg_mu_;
  std::map<SegmentID, OpenSegment> segments_;
  std::map<std::string, SegmentID> segment_ids_;
  SegmentID next_segment_ = 1;

  mutable std::shared_mutex batch_mu_;
  std::unordered_map<BatchID, std::shared_ptr<Batch>> batches_;
  BatchID next_batch_ = 1;
};

// Reads /proc/sys/kernel/random/boot_id + this network namespace: two
// engines with the same host id share memory reachability (shm, CMA).
std::string localHostId();

}  // namespace hawser
