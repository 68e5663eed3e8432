// hawser — the transfer engine.
//
//   hawser::TransferEngine engine;
//   engine.init("p2p", "node-a", "127.0.0.1", 0);
//   engine.registerLocalMemory(buf, len, "cpu:0", true);
//   hawser::SegmentID seg;  engine.openSegment("127.0.0.1:5000", seg);
//   hawser::BatchID b;      engine.allocateBatchID(16, b);
//   engine.submitTransfer(b, {{hawser::OpCode::kRead, buf, seg, remote_addr, len}});
//   engine.waitTransfer(b, std::chrono::seconds(10));
//   engine.freeBatchID(b);
//
// Every call returns a Status; nothing throws on bad input. All methods are
// thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class EngineImpl;

class TransferEngine {
 public:
  TransferEngine();
  ~TransferEngine();  // stops serving; waits (bounded) for in-flight work
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // metadata_uri: "p2p" (default, no service) or "etcd://host:port[,host:port]".
  // local_server_name: this engine's name in metadata; with p2p, segments are
  //   named "host:port" and this name keys file path maps.
  // host: address to listen on and to advertise ("" = 127.0.0.1).
  // rpc_port: 0 picks a free port, readable with rpcPort().
  Status init(const std::string& metadata_uri, const std::string& local_server_name,
              const std::string& host = "", uint16_t rpc_port = 0);

  uint16_t rpcPort() const;
  // The name peers pass to openSegment to reach this engine's memory.
  std::string segmentName() const;

  Status registerLocalMemory(void* addr, size_t length, const std::string& location = "cpu:0",
                             bool remote_accessible = true);
  // All or nothing: either every entry is registered or none is.
  Status registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers);
  Status unregisterLocalMemory(void* addr);
  Status unregisterLocalMemoryBatch(const std::vector<void*>& addrs);

  // Memory segment ("host:port", or a name in etcd), or a file segment
  // ("file:///abs/path" or a registered file segment name).
  Status openSegment(const std::string& name, SegmentID& out);
  Status closeSegment(SegmentID id);
  // The buffers of an open segment (refreshed from metadata), e.g. to learn
  // the remote addresses to target.
  Status segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out);

  // Publishes a named file segment made of `files` (concatenated in order).
  Status registerFileSegment(const std::string& name, const std::vector<FileDesc>& files);
  Status unregisterFileSegment(const std::string& name);

  // A batch holds at most `capacity` tasks (and capacity * slices_per_task slices).
  Status allocateBatchID(size_t capacity, BatchID& out);
  // All or nothing: every request is validated before any byte moves.
  // Task ids continue across submits: the first request of a later submit
  // gets the id after the last one of the earlier submit.
  Status submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests);
  Status getTransferStatus(BatchID batch, size_t task_id, TransferStatus& status);
  // Aggregate over all tasks of the batch (state ranked, bytes summed).
  Status getBatchTransferStatus(BatchID batch, TransferStatus& status);
  // Blocks until every task of the batch is terminal (Ok, whatever the task
  // states) or the timeout passes (kTimeout).
  Status waitTransfer(BatchID batch, std::chrono::milliseconds timeout);
  // Cancels what has not completed; tasks end CANCELED (or FAILED).
  Status cancelTransfer(BatchID batch);
  // kBatchBusy while any task is unfinished or any I/O still references memory.
  Status freeBatchID(BatchID batch);

  // Names of installed transports, in preference order.
  std::vector<std::string> transports() const;

  EngineImpl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace hawser
