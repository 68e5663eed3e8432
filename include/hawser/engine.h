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
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hawser/stats.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class EngineImpl;
namespace detail {
struct EngineAccess;  // tests reach the engine's internals through an internal header
}

// Given to init(): what the caller sets in code rather than the environment.
struct EngineOptions {
  // Tunables by key ("tcp.connections" -> "4"); they win over HAWSER_*
  // environment variables. `hawser config` lists every key with its default.
  // An unknown key or a bad value fails init() with kInvalidArgument naming both
  // (hawser/config.h: the table, the rules, configValue()).
  std::map<std::string, std::string> config;
};

class TransferEngine {
 public:
  TransferEngine();
  ~TransferEngine();  // stops serving; waits (bounded) for in-flight work
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // metadata_uri, one of five forms (src/metadata/store.cpp):
  //   "p2p" (or "")    no service: peers answer for their own segments;
  //   "P2PHANDSHAKE"   the same, under Mooncake's name;
  //   "etcd://host:port[,host:port]"   etcd (plain HTTP, several endpoints);
  //   "etcds://host:port[,host:port]"  etcd over TLS (config etcd.ca_file, ...);
  //   "http://host:port/path"          Mooncake's HTTP metadata server
  //                                    (path usually /metadata; docs/metadata.md).
  // local_server_name: this engine's name in metadata; with p2p, segments are
  //   named "host:port" and this name keys file path maps.
  // host: address to listen on and to advertise ("" = 127.0.0.1).
  // rpc_port: 0 picks a free port, readable with rpcPort().
  Status init(const std::string& metadata_uri, const std::string& local_server_name,
              const std::string& host = "", uint16_t rpc_port = 0);
  Status init(const std::string& metadata_uri, const std::string& local_server_name, const std::string& host,
              uint16_t rpc_port, const EngineOptions& options);

  uint16_t rpcPort() const;
  // The name peers pass to openSegment to reach this engine's memory.
  std::string segmentName() const;

  Status registerLocalMemory(void* addr, size_t length, const std::string& location = "*",
                             bool remote_accessible = true);
  // All or nothing: either every entry is registered or none is.
  Status registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers);
  Status unregisterLocalMemory(void* addr);
  Status unregisterLocalMemoryBatch(const std::vector<void*>& addrs);
  // Ok when [addr, addr+length) lies inside one region this engine
  // registered; kNotRegistered naming the range otherwise.
  Status checkRegistered(const void* addr, size_t length) const;

  // Memory segment ("host:port", or a name in etcd), or a file segment
  // ("file:///abs/path" or a registered file segment name).
  Status openSegment(const std::string& name, SegmentID& out);
  Status closeSegment(SegmentID id);
  // The buffers of an open segment (refreshed from metadata), e.g. to learn
  // the remote addresses to target. Memory segments: in the order their
  // owner registered them (the first registered first).
  Status segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out);
  // Fetches the segment's descriptor now, bypassing what openSegment cached:
  // with p2p from the peer itself (so Ok means it answers), with etcd from
  // the store (where a dead engine's segment lasts until its lease ends).
  // The error (kUnavailable, kSegmentNotFound, kTimeout, ...) says why not.
  Status probeSegment(const std::string& name);

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
  // Blocks until every task of the batch is terminal and the notification of
  // every notifying submit is settled (Ok, whatever the task states), or the
  // timeout passes (kTimeout).
  Status waitTransfer(BatchID batch, std::chrono::milliseconds timeout);
  // Cancels what has not completed; tasks end CANCELED (or FAILED).
  Status cancelTransfer(BatchID batch);
  // kBatchBusy while any task is unfinished or any I/O still references memory.
  Status freeBatchID(BatchID batch);

  // Submits `requests` as one batch and waits for it. When `timeout`
  // (counted from when the requests were handed to the transports) passes
  // first, the batch is canceled and its tasks waited for, at most
  // `cancel_wait`; the batch is freed (if I/O the kernel or a device cannot
  // stop still references memory, the engine frees it once that ends: never
  // leaked, never freed under I/O; stats() counts such "orphan_batches").
  // `statuses` (optional) receives one status per request. Ok when every
  // task COMPLETED; else the first failed task's error, or kTimeout.
  Status transferSync(const std::vector<TransferRequest>& requests, std::chrono::milliseconds timeout,
                      std::vector<TransferStatus>* statuses = nullptr,
                      std::chrono::milliseconds cancel_wait = std::chrono::seconds(5));

  // ---- block requests (docs/blocks.md) ----
  // One request of many blocks to `target`: one task of `batch` (its id in
  // *task_id), with one status. Every block is checked as submitTransfer
  // checks a request; an error names the block ("blocks[17]: ..."), and
  // blocks whose destinations overlap are refused. All or nothing.
  Status submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                      size_t* task_id = nullptr);
  Status submitBlocks(BatchID batch, OpCode op, SegmentID target, const BlockArrays& blocks,
                      size_t* task_id = nullptr);
  // The list under `route` (route.set: instead of the engine's contract), as
  // BlockArrays::route and StridedBlocks::route carry theirs.
  Status submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                      const RouteContract& route, size_t* task_id = nullptr);
  // A strided layout: checked in O(1) when its span lies in one local
  // region and one remote buffer, whatever the count.
  Status submitStrided(BatchID batch, OpCode op, SegmentID target, const StridedBlocks& blocks,
                       size_t* task_id = nullptr);
  // Prepare once, post many: everything submitBlocks checks is checked
  // here, once. postPlan adds one task to `batch` and does no per-block
  // work beyond moving the bytes (unless memory was unregistered since the
  // plan was made: then the plan's local blocks are checked again).
  Status prepareBlocks(OpCode op, SegmentID target, std::span<const Block> blocks, PlanID& out);
  Status prepareBlocks(OpCode op, SegmentID target, const BlockArrays& blocks, PlanID& out);
  // A plan keeps the contract it was prepared under.
  Status prepareBlocks(OpCode op, SegmentID target, std::span<const Block> blocks, const RouteContract& route,
                       PlanID& out);
  Status prepareStrided(OpCode op, SegmentID target, const StridedBlocks& blocks, PlanID& out);
  Status postPlan(BatchID batch, PlanID plan, size_t* task_id = nullptr);
  Status planInfo(PlanID plan, PlanInfo& out) const;
  // Tasks already posted from the plan are not affected.
  Status releasePlan(PlanID plan);

  // ---- Notifications ----------------------------------------------------
  // A notification goes to the engine that owns a memory segment and waits
  // in that engine's receiving queue until it drains it with getNotifies.
  // Per sender and receiver, notifications are delivered in the order they
  // were issued (submitTransfer with one, sendNotify), whatever order their
  // transfers finish in. The queue is bounded (config notify.queue_depth):
  // a notification that finds it full is refused, and the sender learns it
  // (kCapacityExceeded naming the receiver) — nothing is dropped silently.

  // As submitTransfer, and once every request of this submit COMPLETED
  // (written bytes are then in the target's memory), `notify` is sent to the
  // segment of requests[0]. When a request fails, it is never sent. Its
  // outcome: getNotifyStatus. kInvalidArgument for an empty request list, a
  // file segment target or a notification over notify.max_message_bytes.
  Status submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests, const Notification& notify);
  // Sends `notify` to the owner of memory segment `target` and waits for it
  // to be queued there (after any notification issued earlier to that peer).
  // kCapacityExceeded when the receiver's queue is full, kUnavailable when it
  // cannot be reached, kSegmentNotFound for a segment that is not open.
  Status sendNotify(SegmentID target, const Notification& notify);
  // Moves every notification received so far into `out` (replacing its
  // contents), oldest first.
  Status getNotifies(std::vector<ReceivedNotification>& out);
  // One entry per notifying submit of the batch, in submit order. waitTransfer
  // also waits until each is settled (delivered, not sent, or failed).
  Status getNotifyStatus(BatchID batch, std::vector<NotifyStatus>& out);
  // transferSync, then `notify` to the segment of requests[0] once every
  // request completed; Ok only when the transfer completed and the
  // notification was delivered (else why not, e.g. kCapacityExceeded).
  Status transferSync(const std::vector<TransferRequest>& requests, const Notification& notify,
                      std::chrono::milliseconds timeout, std::vector<TransferStatus>* statuses = nullptr,
                      std::chrono::milliseconds cancel_wait = std::chrono::seconds(5));

  // As getNotifies; with_failures: also the news that a notifying submit to
  // this engine failed (kind NotifyKind::kFailed: its request failed or was
  // canceled, or its sender died or became unreachable), in the place of the
  // notification it would have been. Every notifying submit to this engine
  // ends here as exactly one of the two (docs/signals.md). Without it (the
  // call above, Mooncake's and NIXL's), failures are dropped when drained.
  Status getNotifies(std::vector<ReceivedNotification>& out, bool with_failures);

  // ---- Signals (docs/signals.md) ------------------------------------------
  // As submitTransfer, and the requests count toward signal `signal` at the
  // engine that owns their segment (all of them must target that one memory
  // segment): once every request of this submit ended, that engine learns
  // whether they all COMPLETED (then they count as landed) or why not.
  // Several submits may carry the same signal. kInvalidArgument for an empty
  // request list or name, requests to several segments or a file segment.
  Status submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests, const Signal& signal);
  // As submitBlocks/postPlan; the block request counts as one request.
  Status submitBlocks(BatchID batch, OpCode op, SegmentID target, std::span<const Block> blocks,
                      const Signal& signal, size_t* task_id = nullptr);
  Status postPlan(BatchID batch, PlanID plan, const Signal& signal, size_t* task_id = nullptr);
  // Waits until `expected` requests of signal `name` from the engine whose
  // segment is `peer` landed here (COMPLETED), one of them cannot land
  // (FAILED, with the reason, the sender and the first failed request's
  // error), or `timeout` passes (TIMEOUT). A peer that died or cannot be
  // reached fails the wait within signal.peer_timeout_ms (docs/signals.md:
  // the bounds). A COMPLETED or FAILED answer consumes the signal: a later
  // wait on the name starts from nothing. kInvalidArgument for an empty peer
  // or name or expected 0.
  Status waitSignal(const std::string& peer, const std::string& name, uint64_t expected,
                    std::chrono::milliseconds timeout, SignalResult& out);

  // Names of installed transports, cheapest first.
  std::vector<std::string> transports() const;
  // Names of the transports this build has, installed here or not: what
  // config `transport` accepts besides "auto" (and "nvmeof", listed too
  // where "file" is: the reference's name for it). Needs no init(). A name
  // listed that init() then refuses is one that cannot run on this host
  // (kNoTransport); one not listed is refused as a bad value.
  static std::vector<std::string> builtTransports();
  // Counters of the engine and of every installed transport (frees, first,
  // orphan batches whose I/O has ended).
  EngineStats stats() const;
  // Every transport this build has: installed or why not, what it moves,
  // what it found. Valid after init() (before it: empty).
  std::vector<TransportDiagnosis> diagnose() const;
  // Which transport a request from local memory at `local_location` to the
  // open segment `segment` would take, and why.
  Status explainRoute(SegmentID segment, const std::string& local_location, RouteExplanation& out);

 private:
  friend struct detail::EngineAccess;
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace hawser
