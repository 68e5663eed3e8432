// The Transport interface: what every transport (tcp, shm, rdma, file,
// nvlink) implements, and the Task the engine hands to it.
//
// Flow for one submitTransfer: the engine validates every request (segment,
// local range, remote range for memory segments), picks a transport per
// request, then for each transport involved calls prepare() on that
// transport's sub-batch with its tasks. prepare() validates what only the
// transport knows (files, keys), cuts slices and keeps them pending; it must
// not start any I/O. If every prepare() succeeds and the batch has capacity
// for the slices, the engine calls submit() on each (which cannot fail: a
// failure to post becomes a slice failure); otherwise discard() on each, and
// the batch is as it was.
//
// Completion: the transport calls Task::completeSlice() once per slice, from
// any thread. The engine aggregates.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hawser/status.h"
#include "hawser/types.h"
#include "base/task.h"

namespace hawser {

class Config;
class MemoryRegistry;
struct SegmentDesc;
namespace rpc {
class Server;
}

// A transport's per-batch state. Opaque to the engine.
class SubBatch {
 public:
  virtual ~SubBatch() = default;
};

struct TransportCaps {
  bool memory_segments = false;  // serves memory segments of peers
  bool file_segments = false;    // serves file segments
  bool host_memory = true;       // can move host memory
  bool gpu_memory = false;       // can move GPU memory (local side)
  bool same_host_only = false;   // both ends must be on one host
  bool needs_polling = false;    // completions advance only in poll()
};

// What the engine gives a transport at install time.
struct TransportContext {
  Config* config = nullptr;
  MemoryRegistry* registry = nullptr;   // this engine's registered memory
  rpc::Server* rpc = nullptr;           // control-plane listener (handlers, streams)
  std::string server_name;              // local_server_name given to init
  std::string host;                     // advertised host
  uint16_t rpc_port = 0;
  std::string host_id;                  // identifies this host (boot id)
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  virtual TransportCaps caps() const = 0;

  // Called once, after the rpc listener is up. A transport that cannot run
  // here (no NIC, no library) returns kNotSupported and is not installed.
  virtual Status install(const TransportContext& ctx) = 0;
  // Stops threads, closes connections. In-flight slices complete FAILED/CANCELED.
  virtual void shutdown() {}

  // Attributes published under descriptor "transports.<name>" (e.g. NIC list).
  virtual void describe(nlohmann::json& attrs) const;

  // Memory registration: called for every region, in every installed
  // transport. `attrs` is published under the buffer's "attrs.<name>".
  virtual Status registerMemory(void* addr, size_t length, const std::string& location,
                                bool remote_accessible, nlohmann::json& attrs);
  virtual Status unregisterMemory(void* addr, size_t length);

  // Can this transport serve a request to `seg` from local memory at `location`?
  virtual bool canServe(const SegmentDesc& seg, const std::string& local_location) const = 0;
  // The engine closed its last handle to `seg` (drop cached files, endpoints).
  virtual void closeSegment(const SegmentDesc& /*seg*/) {}

  virtual Status allocateSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) = 0;
  // Validate, cut slices (setSliceCount on each task), keep them pending.
  // `slices` receives the number of slices cut. No I/O.
  virtual Status prepare(SubBatch& sb, std::span<Task* const> tasks, size_t& slices) = 0;
  // Post everything pending. Cannot fail: posting errors complete slices FAILED.
  virtual void submit(SubBatch& sb) = 0;
  // Drop everything pending (a sibling transport's prepare failed).
  virtual void discard(SubBatch& sb) = 0;
  // Progress completions (only needed when caps().needs_polling).
  virtual void poll(SubBatch& /*sb*/) {}
  // Cancel every unfinished slice of the sub-batch.
  virtual void cancel(SubBatch& sb) = 0;
  // True when no I/O of the sub-batch still references memory (so the batch
  // may be freed and its buffers reused).
  virtual bool idle(SubBatch& sb) = 0;
  virtual void freeSubBatch(std::unique_ptr<SubBatch> sb) = 0;
};

// Factory signature each transport exposes: std::unique_ptr<Transport> makeXTransport();

}  // namespace hawser
