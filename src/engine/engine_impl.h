// The engine behind hawser::TransferEngine: a facade over objects that each
// own their state and its lock, plus the wiring between them (init,
// shutdown, the installed transports, selection). The objects:
//   open_segments.h    OpenSegments: open segments, their views and peers
//   batch_table.h      BatchTable: batches by id, the orphans transferSync left
//   plan_table.h       PlanTable: prepared block plans
//   memory_registrar.h MemoryRegistrar: registrations in flight, per-region attrs
//   notify.h           NotifyInbox / NotifyOutbox: notifications received, sent
//   signal_board.h     SignalBoard: signals received and waited for
// The facade's methods live in one file each:
//   engine_impl.cpp   init, shutdown, installed transports, local descriptor, stats
//   registration.cpp  registerMemory / unregisterMemory
//   segments.cpp      descriptors fetched and decoded into peers; the segment calls
//   selection.cpp     which transport serves a request (the table is in selection.h)
//   batches.cpp       allocate, submit, status, wait, cancel, free, transferSync
//   notifications.cpp sendNotify, getNotifies, notification status (notify.h: the queues)
//   signals.cpp       submits with a signal, waitSignal (signal_board.h: the receiver's side)
//   block_requests.cpp, block_api.cpp  block requests checked, posted; plans
//
// Lock order (the one place it is written; docs/architecture.md points here).
// A lock may be held while taking one listed after it, never the reverse:
//   1. MemoryRegistrar reg_mu_    (serialises register / unregister / installTransport;
//                                  held while the registry, every transport's register
//                                  calls and the store's publish run)
//   2. BatchTable orphan_mu_      (reaping frees batches under it)
//   3. BatchTable Shard mu        (a shard of the batch table; exclusive while
//                                  a batch is freed)
//   4. Batch submit_mu_           (submit, post, cancel, free; under it: a transport's
//                                  prepare / post / cancel / idle, a BlockRunner's mu_,
//                                  NotifyOutbox mu_ (track), RouteFallbacks mu_)
//   5. MemoryRegistrar attrs_mu_  (under it: the registry's mu_, for a snapshot)
//   6. MemoryRegistry mu_, and each object's own leaf mutex
// Leaves (nothing else is taken under them): OpenSegments mu_ (descriptors are
// fetched and decoded into peers outside it; views are dropped outside it),
// PlanTable plan_mu_ (plans re-checked outside it), Batch notify_mu_,
// RouteFallbacks mu_, the metrics families' mutexes. NotifyInbox, NotifyOutbox
// and SignalBoard keep their own locks and call no engine object under them.
// No engine lock is held while waiting for a batch, a notification or a signal.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/config.h"
#include "base/metrics.h"
#include "base/registry.h"
#include "base/traffic_metrics.h"
#include "base/transport.h"
#include "engine/batch.h"
#include "engine/batch_table.h"
#include "engine/memory_registrar.h"
#include "engine/open_segments.h"
#include "engine/plan_table.h"
#include "engine/notify.h"
#include "engine/route_fallbacks.h"
#include "engine/signal_board.h"
#include "engine/selection.h"
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
              uint16_t rpc_port, const EngineOptions& options);
  void shutdown();

  Status registerMemory(const std::vector<BufferEntry>& buffers);
  Status unregisterMemory(const std::vector<void*>& addrs);

  Status openSegment(const std::string& name, SegmentID& out);
  Status closeSegment(SegmentID id);
  Status segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out);
  Status probeSegment(const std::string& name);
  Status registerFileSegment(const std::string& name, const std::vector<FileDesc>& files);
  Status unregisterFileSegment(const std::string& name);

  Status allocateBatch(size_t capacity, BatchID& out);
  // notify: null, or the notification to send once these requests completed.
  // signal: null, or the signal these requests count toward (signals.cpp).
  Status submit(BatchID id, const std::vector<TransferRequest>& reqs, const Notification* notify = nullptr,
                const Signal* signal = nullptr);
  Status taskStatus(BatchID id, size_t task, TransferStatus& st);
  Status batchStatus(BatchID id, TransferStatus& st);
  Status wait(BatchID id, std::chrono::milliseconds timeout);
  Status cancel(BatchID id);
  // settle: wait a moment (50 ms at most) for transports still letting go
  // of slices whose tasks ended, before answering kBatchBusy.
  Status freeBatch(BatchID id, bool settle = true) { return batches_.free(id, settle); }
  Status transferSync(const std::vector<TransferRequest>& reqs, std::chrono::milliseconds timeout,
                      std::vector<TransferStatus>* statuses, std::chrono::milliseconds cancel_wait,
                      const Notification* notify = nullptr);

  // notifications.cpp
  Status sendNotify(SegmentID target, const Notification& n);
  Status getNotifies(std::vector<ReceivedNotification>& out, bool with_failures = false);

  // signals.cpp
  Status waitSignal(const std::string& peer, const std::string& name, uint64_t expected,
                    std::chrono::milliseconds timeout, SignalResult& out);
  Status notifyStatus(BatchID id, std::vector<NotifyStatus>& out);

  SegmentDesc localDescriptor() const;
  std::vector<std::string> transportNames() const;
  EngineStats stats();
  std::vector<TransportDiagnosis> diagnose() const;
  Status explainRoute(SegmentID id, const std::string& local_location, RouteExplanation& out);

  // Block requests and plans (block_requests.cpp checks, block_api.cpp posts).
  Status submitBlocks(BatchID id, OpCode op, SegmentID target, const BlockSource& src, size_t* task_id,
                      const Signal* signal = nullptr);
  Status submitStrided(BatchID id, OpCode op, SegmentID target, const StridedBlocks& b, size_t* task_id);
  Status prepareBlocks(OpCode op, SegmentID target, const BlockSource& src, PlanID& out);
  Status prepareStrided(OpCode op, SegmentID target, const StridedBlocks& b, PlanID& out);
  Status postPlan(BatchID id, PlanID plan, size_t* task_id, const Signal* signal = nullptr);
  Status planInfo(PlanID plan, PlanInfo& out) const;
  Status releasePlan(PlanID plan);

  // Installs one more transport after init (tests, embedders): it gets the
  // memory registered so far and takes part in selection by its cost rank
  // for segments opened from then on. Not safe against concurrent calls.
  Status installTransport(std::unique_ptr<Transport> t);

  // For tests and embedders (engine/access.h).
  Config& config() { return config_; }
  MemoryRegistry& registry() { return registry_; }
  const MemoryRegistry& registry() const { return registry_; }
  MetadataStore* store() { return store_.get(); }
  const std::string& segmentName() const { return segment_name_; }
  uint16_t rpcPort() const { return rpc_.port(); }
  bool initialized() const { return initialized_; }
  const std::string& hostId() const { return host_id_; }

 private:
  Status checkInit() const;
  void sortTransports();
  TransportContext transportContext();
  // Undoes a partly done init(): listener stopped, transports shut down.
  void abandonInit();
  std::shared_ptr<Batch> findBatch(BatchID id) const { return batches_.find(id); }
  // submit() to a batch found (or just allocated) by the caller: `id` is its
  // id; `posted_at` (optional): when the requests were committed.
  // `direct`: whether the requests may be moved at once by their transport
  // (Transport::moveDirect) before any I/O is posted: kTasks (submit): their
  // tasks are then committed COMPLETED; kNoTasks (transferSync): no task is
  // committed. `moved` (optional) says whether they were.
  enum class Direct { kNo, kTasks, kNoTasks };
  Status submitTo(Batch& batch, BatchID id, const std::vector<TransferRequest>& reqs, const Notification* notify,
                  const Signal* signal, std::chrono::steady_clock::time_point* posted_at = nullptr,
                  Direct direct = Direct::kNo, bool* moved = nullptr);
  // notifications.cpp: checks a notification and finds where its target
  // listens (a memory segment's owner engine).
  Status notifyTarget(const SegmentView& view, const Notification& n, std::string& host, uint16_t& port) const;
  // The rpc listener of the engine owning memory segment `view`, for `what`
  // (a notification or signal of `bytes` bytes).
  Status listenerOf(const SegmentView& view, const std::string& what, size_t bytes, std::string& host,
                    uint16_t& port) const;
  Status startNotifications();
  Status startSignals();
  // signals.cpp: checks a signal's submit (`others`: the name of a second
  // segment its requests target, "" when all target `view`'s) and finds
  // where its receiver listens.
  Status signalTarget(const SegmentView& view, const std::string& others, const Signal& signal, std::string& host,
                      uint16_t& port) const;
  // Where engine `name` listens, for the signal board's probes.
  Status resolveListener(const std::string& name, std::string& host, uint16_t& port);

  // segments.cpp
  Transport* schemeOwner(const std::string& name) const;
  Status fetchSegment(const std::string& name, SegmentDesc& out);
  std::shared_ptr<const SegmentView> makeView(SegmentDesc desc) const;
  // The open segments' views (open_segments.h).
  std::shared_ptr<const SegmentView> segmentView(SegmentID id) const { return segments_.view(id); }
  // Re-fetches a segment's descriptor (owner registered more memory) and
  // rebuilds its view; nullptr when that fails.
  std::shared_ptr<const SegmentView> refreshSegment(SegmentID id) { return segments_.refresh(id); }
  // The view to submit to: refreshed first if the store says it changed.
  // A store that tracks changes (etcd watch, p2p change notices) flags a
  // stale descriptor (owner restarted or re-registered); a segment whose
  // name a transport resolves (file://) is not the store's.
  std::shared_ptr<const SegmentView> currentView(SegmentID id) {
    return segments_.current(id, [this](const SegmentView& v) { return viewStale(v); });
  }
  // Whether the store says `v`'s descriptor may have changed.
  bool viewStale(const SegmentView& v) {
    if (v.scheme_owned) return false;
    const SegmentDesc& d = *v.desc;
    // Unchanged at the store's count now: nothing to ask (no lock taken).
    const uint64_t count = store_->changeCount();
    if (count != 0 && v.unchanged_at.count.load(std::memory_order_relaxed) == count) return false;
    if (store_->mayHaveChanged(d.name, d.generation)) return true;
    if (count != 0) v.unchanged_at.count.store(count, std::memory_order_relaxed);
    return false;
  }

  // block_requests.cpp / block_api.cpp
  Status startPlan(OpCode op, SegmentID target, BlockPlan& plan);
  Status buildBlocks(OpCode op, SegmentID target, const BlockSource& src, BlockPlan& plan);
  Status checkBlocks(const BlockSource& src, BlockPlan& plan, bool& refresh);
  Status buildStrided(OpCode op, SegmentID target, const StridedBlocks& b, BlockPlan& plan);
  // `buffer`: the remote buffer of the block that chose it (-1: none).
  Status blockRoute(const SegmentView& view, uint32_t local_kind, uint32_t remote_kind, int buffer,
                    const RouteContract& contract, RouteChoice& out);
  // Blocks of kinds of memory or a remote buffer (`q`) the request's route
  // was not checked against: checks it (`loc` names the local memory in
  // errors). `routed`: the queries it served before, where a costlier route
  // may take over (joinRoutes); null: none may. Kept out of checkBlocks' loop.
  [[gnu::noinline]] Status routeBlock(const SegmentView& view, const RouteQuery& q, const RouteContract& contract,
                                      const std::string& loc, std::vector<RouteQuery>* routed, const Route*& route,
                                      BlockPlan& plan);
  // After checkBlocks' loop, for a request whose runs lie in several remote
  // buffers: the route checked against each distinct one.
  Status routeBuffers(const BlockSource& src, BlockPlan& plan, const Route*& route);
  // Blocks of one request that `route` served so far (`before`) and blocks
  // of `q` that selection sends to `chosen`: true when one of the two
  // serves them all (the costlier, where the cheaper only declines some of
  // their remote buffers); `route` and the plan's fallback then say which.
  bool joinRoutes(const SegmentView& view, const std::vector<RouteQuery>& before, const RouteQuery& q,
                  const Route& chosen, const RouteContract& contract, const Route*& route, BlockPlan& plan);
  // A prepared plan posted after memory was unregistered: its regions are
  // still the registrations they were, or every run is found again (in
  // memory registered since) and `plan` becomes a copy holding the regions
  // and registrations of now, which replaces prepared plan `id`; else
  // kNotRegistered naming the first run no longer registered.
  Status refreshLocal(PlanID id, std::shared_ptr<const BlockPlan>& plan);
  Status postBlocks(BatchID id, std::shared_ptr<const BlockPlan> plan, size_t* task_id,
                    const Signal* signal = nullptr);
  Status addPlan(BlockPlan&& plan, PlanID& out);
  Counters blockStats() const;

  Config config_;
  // Metrics of this engine and its transports (docs/metrics.md); the
  // traffic table made at init (metrics.max_peers).
  std::shared_ptr<metrics::Registry> metrics_ = std::make_shared<metrics::Registry>();
  std::unique_ptr<metrics::TrafficTable> traffic_;
  MemoryRegistry registry_;
  rpc::Server rpc_;
  std::unique_ptr<MetadataStore> store_;
  NotifyInbox inbox_;
  NotifyOutbox outbox_;
  SignalBoard signals_;
  uint64_t incarnation_ = 0;  // new at every init: peers tell a restarted engine from the one before
  size_t notify_max_bytes_ = 0;
  std::vector<std::unique_ptr<Transport>> transports_;  // installed, cheapest first
  std::vector<TransportDiagnosis> diagnoses_;            // every transport of the build
  std::vector<std::pair<std::string, Transport*>> schemes_;  // segment-name schemes of installed transports
  bool initialized_ = false;
  std::string server_name_, host_, host_id_, segment_name_;
  std::string forced_transport_;
  size_t slices_per_task_ = 0;
  size_t max_capacity_ = 0;
  uint32_t wait_spin_us_ = 0;     // batch.wait_spin_us
  bool recycle_batches_ = true;  // batch.recycle
  std::unique_ptr<WaitSpin> wait_spin_;  // shared by the batches (engine/batch.h)

  // Registrations in flight and each region's transport attrs.
  MemoryRegistrar registrar_{registry_, transports_, [this] { return store_->publishLocal(); }};

  // Route contracts and fallbacks (docs/routes.md): the transports of the
  // build that did not install here (each as a Route without a transport),
  // the engine's contract (config route.*), the fallbacks counted.
  std::vector<Route> absent_;
  Contract contract_;
  std::unique_ptr<RouteFallbacks> fallbacks_;
  // The contract of a request: its own when set, else the engine's;
  // `source` says which (for messages).
  Contract contractOf(const RouteContract& c, const char** source) const {
    if (source) *source = c.set ? "the request" : "config route.transports/route.require";
    return c.set ? Contract{c.transports, c.require} : contract_;
  }

  // Open segments: descriptors fetched (segments.cpp: fetchSegment) and
  // decoded into peers (makeView), refreshed when the store says so
  // (currentView).
  OpenSegments segments_{[this](const std::string& name, SegmentDesc& out) { return fetchSegment(name, out); },
                         [this](SegmentDesc desc) { return makeView(std::move(desc)); },
                         [this] { batches_.cool(true, false); }};

  // Batches and the orphans transferSync left.
  BatchTable batches_;

  // Block requests: tunables, prepared plans, the pump, counters.
  BlockSettings block_settings_;
  BlockCounters block_counters_;
  PlanTable plans_{block_counters_};
  std::unique_ptr<BlockPump> pump_;
  std::shared_ptr<RunArrays> run_arrays_ = std::make_shared<RunArrays>();  // kept by the runners too

  // Engine counters (stats(); the batch table counts batches and reaped orphans).
  metrics::Counter n_tasks_, n_refused_, n_sync_timeouts_;  // per-thread shards: every submit counts
};

// Adds the engine's own counters (s.engine) and the rpc listener's refused
// frames to s.metrics (engine_metrics.cpp).
void appendEngineMetrics(EngineStats& s, uint64_t rpc_refused_frames);

// Reads /proc/sys/kernel/random/boot_id: two engines with the same host id
// run on one kernel (any containers of it); whether a same-host transport
// reaches the other (shm, nvlink) its openPeer says.
std::string localHostId();

}  // namespace hawser
