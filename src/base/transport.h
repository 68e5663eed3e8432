// The Transport interface: what every transport (tcp, shm, rdma, file,
// nvlink) implements. A transport lives in src/transport/<name>/ and is
// reached by the engine only through this interface and its factory.
//
// Required: name, caps, install, openPeer, newSubBatch, and on the sub-batch
// prepare, post, cancel, idle. Everything else has a default.
//
// Flow for one submitTransfer:
// 1. When a segment is opened (or its descriptor changes) the engine asks
//    each installed transport whose caps fit the segment for a PeerHandle:
//    the peer's descriptor decoded once (addresses, keys, limits). A transport
//    that cannot reach the peer says why (kNotSupported + reason); the reason
//    shows in errors and in `hawser doctor`.
// 2. Per request the engine picks the cheapest transport whose caps cover it
//    (engine/selection.h has the table) and groups requests by transport.
// 3. For each group, the transport's SubBatch::prepare() checks what only the
//    transport knows and cuts slices into a PreparedWork. No I/O. Each task
//    brings its local region, found when the engine checked the request,
//    with what this transport learned when it registered the region
//    (Task::region().registration). If any prepare fails or the batch lacks
//    slice capacity, the engine drops every PreparedWork (RAII: nothing was
//    posted) and the batch is as it was.
// 4. Otherwise post() each PreparedWork. post() cannot fail: a failure to
//    post becomes a slice failure.
// Completion: the transport calls Task::completeSlice() once per slice, from
// any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/channel_registry.h"
#include "base/metrics.h"
#include "base/registry.h"
#include "base/route.h"
#include "base/segment_desc.h"
#include "base/task.h"
#include "hawser/stats.h"
#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

class Config;
class MemoryRegistry;

// Kinds of memory, as a bit set.
enum MemoryKind : uint32_t {
  kHostMemory = 1u << 0,  // "cpu:N"
  kGpuMemory = 1u << 1,   // "cuda:N"
};
// The kind of a location string ("cpu:0" -> kHostMemory).
MemoryKind memoryKindOf(const std::string& location);
// The GPU ordinal of a "cuda:N" location; -1 for any other text. With
// hostNodeOf, the one place a location is parsed: the registry keeps a
// region's (Region::gpu, LocalRegion::gpu).
int gpuOrdinalOf(const std::string& location);
// The NUMA node of a "cpu:N" location; -1 for any other text.
int hostNodeOf(const std::string& location);

struct TransportCaps {
  bool memory_segments = false;            // serves memory segments of peers
  bool file_segments = false;              // serves file segments
  uint32_t local_memory = kHostMemory;     // kinds it moves at the initiator's end
  uint32_t remote_memory = kHostMemory;    // kinds it moves at the target's end (memory segments)
  bool same_host_only = false;             // both ends must share a kernel (same host id)
  int cost_rank = 100;                     // lower is preferred (engine/selection.h)
  // A segment name scheme this transport resolves itself ("file://"); empty: none.
  std::string segment_scheme;
  // Its sub-batches move a block request's runs as windows (SubBatch::prepareRuns)
  // rather than as a task per run.
  bool run_windows = false;
  // The route properties (hawser/types.h RouteProperty, docs/routes.md) it
  // gives a request with host memory at both ends, and one with GPU memory
  // at either end. A route contract may require them.
  uint32_t host_properties = 0;
  uint32_t gpu_properties = 0;
  // It may decline single remote buffers of a peer it opened
  // (Transport::declinesBuffer): selection asks before choosing it.
  bool buffer_declines = false;
  // It may move a submit at once (Transport::moveDirect): the engine offers
  // submits to it (one clock read and one call each); to others, never.
  bool moves_direct = false;
};

// A cheaper form of a transport for some of the requests it serves, with a
// route of its own in selection (file: GPUDirect Storage, "gds", for GPU
// memory): its name (in fallbacks, messages and the doctor) and its caps
// (what it moves, its rank, the properties it gives).
struct TransportVariant {
  std::string name;
  TransportCaps caps;
};

// What the engine gives a transport at install time.
struct TransportContext {
  Config* config = nullptr;
  MemoryRegistry* registry = nullptr;  // this engine's registered memory
  // The control-plane listener (the engine's rpc server): a transport
  // registers its calls and connection kinds here.
  ChannelRegistry* rpc = nullptr;
  std::string server_name;             // local_server_name given to init
  std::string host;                    // advertised host
  uint16_t rpc_port = 0;
  // Where the transport's own counters go (base/transport_metrics.h): the
  // engine's registry; a context made elsewhere (tests) has its own.
  std::shared_ptr<metrics::Registry> metrics = std::make_shared<metrics::Registry>();
  // A fallback from the transport's variant found out only as I/O runs
  // (file: cuFile refused a file): a request to `segment` went `to` instead
  // of `from` because of `why`. The engine counts and logs it as it does
  // fallbacks found at submit. Unset in contexts made elsewhere (tests).
  std::function<void(const std::string& segment, const std::string& from, const std::string& to,
                     const RouteDecline& why)>
      fallback;
};

// One peer (segment) as one transport sees it: its descriptor decoded once.
// The engine keeps it with the open segment and gives it to every task that
// targets the segment (Task::peer()); it lives while any task uses it.
class PeerHandle {
 public:
  virtual ~PeerHandle() = default;
  // How this transport reaches the peer, for the route explanation (e.g.
  // shm: "shared mappings for 2 of 2 buffers"); "" when there is one way only.
  virtual std::string mechanism() const { return ""; }
};

// ---- block requests as windows of runs ---------------------------------------
// A transport whose caps() say run_windows gets a block request's runs a
// window at a time (SubBatch::prepareRuns), with what the engine found when
// the plan was made (the local regions, the remote buffer of every run), and
// no task per run: the cost of a run is what the transport itself spends.

// One run: contiguous on both sides, inside one local region and one
// remote buffer.
struct RunRef {
  uint64_t local = 0;
  uint64_t remote = 0;
  uint64_t length = 0;
  int32_t buffer = -1;  // remote buffer index (memory segments), -1 for file segments
  uint32_t region = 0;  // index into RunWindow::regions
};

// Told as the runs of a window end (any thread; several calls per window,
// as many runs in all as the window has).
class RunSink {
 public:
  // `n` runs ended: `completed` of them COMPLETED, moving `bytes`; the
  // other n - completed ended `state` with `error`.
  virtual void runsEnded(size_t n, size_t completed, uint64_t bytes, TransferState state, const Status& error) = 0;

 protected:
  ~RunSink() = default;
};

// A window's runs, written when first asked for: a transport that serves a
// window from what it kept of an earlier post never asks.
class RunSource {
 public:
  virtual std::span<const RunRef> runs() = 0;

 protected:
  ~RunSource() = default;
};

struct RunWindow {
  OpCode op = OpCode::kRead;
  PeerHandle* peer = nullptr;  // the transport's handle on the target segment
  const SegmentDesc* segment = nullptr;
  size_t count = 0;              // runs in the window
  RunSource* source = nullptr;   // the runs (any thread; one at a time)
  // The local regions, found once when the block request was checked, each
  // with this transport's registration of it (LocalRegion::registration).
  std::span<const LocalRegion> regions;
  RunSink* sink = nullptr;
  // Set when the runs come from a prepared plan (posted any number of
  // times): window [first, first + count) of `plan` has the same runs, local
  // regions and remote buffers at every post, so a transport may keep what
  // it derived from them (a run list in device memory) while `plan` lives.
  std::weak_ptr<const void> plan;
  uint64_t first = 0;
  // Posted by the thread that submitted the block request (its first
  // window), which a transport may use to move the window itself; later
  // windows come from the engine's pump, which other requests wait for.
  bool on_submitter = false;
  std::span<const RunRef> runs() const { return source->runs(); }
};

// Slices cut by prepare() and not yet posted. Destroying it posts nothing.
class PreparedWork {
 public:
  virtual ~PreparedWork() = default;
  size_t slices = 0;  // how many slices it holds (counted against the batch)
};

// A transport's part of one engine batch. The engine destroys it only when
// idle() (or after the transport's shutdown()).
class SubBatch {
 public:
  virtual ~SubBatch() = default;
  // Validates, cuts slices (Task::setSliceCount on each task) into `out`. No I/O.
  virtual Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) = 0;
  // Transports with caps().run_windows: validates a window of runs into
  // `out` (no I/O), as prepare() does tasks; post() then moves it and every
  // run ends through w.sink exactly once. `w` and what it points to stay
  // valid until every run has ended. Default: kNotSupported.
  virtual Status prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out);
  // Posts what prepare() cut. Cannot fail: posting errors complete slices FAILED.
  virtual void post(std::unique_ptr<PreparedWork> work) = 0;
  // Cancels every unfinished slice; they end CANCELED (or FAILED).
  virtual void cancel() = 0;
  // True when no I/O of the sub-batch still references memory.
  virtual bool idle() const = 0;
  // A thread about to wait for this sub-batch's tasks (transferSync,
  // waitTransfer) runs one piece of its work that is queued and no
  // transport thread has taken yet, rather than sleeping while a transport
  // thread wakes for it; true when it ran one (the waiter calls again).
  // Called with the batch's submit lock held, as post() is. Default: none.
  virtual bool assist() { return false; }
  // The batch was freed and is kept for reuse (engine/batch_table.h), this
  // sub-batch idle: readies it for the batch's next use and returns true,
  // or false, and the engine destroys it (the default). The next use may
  // have another capacity than newSubBatch was given (at most the tasks the
  // batch was made with): a sub-batch that depends on it returns false.
  virtual bool reuse() { return false; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  virtual TransportCaps caps() const = 0;

  // Called once, after the rpc listener is up. A transport that cannot run
  // on this host (no NIC, no library, kernel feature missing) returns
  // kNotSupported with the reason; any other error fails the engine's init.
  virtual Status install(const TransportContext& ctx) = 0;
  // Stops threads, closes connections. In-flight slices complete FAILED/CANCELED.
  virtual void shutdown() {}

  // Attributes published under descriptor "transports.<name>" (e.g. NIC list).
  virtual void describe(nlohmann::json& attrs) const;

  // Memory registration: called for every region, in every installed
  // transport, with the region as the registry will keep it (its GPU
  // parsed once: Region::gpu). `attrs` is published under the buffer's
  // "attrs.<name>". What the transport learned (its MR keys, an export, a
  // cuFile buffer) it may return in `out`: the registry keeps it with the
  // region, and the engine hands it back with every task
  // (Task::region().registration) and window of runs
  // (RunWindow::regions[i].registration) whose local memory lies there,
  // found once at submit or when a plan is checked, so that the data path
  // never looks the region up again. Default: registerMemory, nothing kept.
  virtual Status registerRegion(const Region& region, nlohmann::json& attrs, std::shared_ptr<const Registration>& out);
  // The older form, for transports whose data path needs nothing per
  // local region (shm: its table serves peers, never its own tasks).
  // Default: nothing to do.
  virtual Status registerMemory(void* addr, size_t length, const std::string& location,
                                bool remote_accessible, nlohmann::json& attrs);
  // Tears down what registration set up, before it returns: the caller may
  // free the memory then. A task or plan may still hold the registration
  // object (Registration) afterwards.
  virtual Status unregisterMemory(void* addr, size_t length);

  // Resolves a segment name of caps().segment_scheme into a descriptor.
  virtual Status resolveSegment(const std::string& name, SegmentDesc& out);

  // Decodes `seg` for this transport. kNotSupported with the reason when
  // this transport cannot reach it; the handle otherwise.
  virtual Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) = 0;
  // openPeer, classifying a refusal (base/route.h): the engine calls this
  // one, and counts and explains a fallback by `why.reason`. A transport
  // that knows why it declines overrides it (its openPeer then calls it).
  // Default: openPeer; a refusal is RouteReason::kRefused with its message.
  virtual Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why);
  // Transports whose caps say buffer_declines: why it cannot move remote
  // buffer `buffer` (an index into the segment's buffers) of a peer it
  // opened (kNone: it can), e.g. GPU memory without an IPC handle. Asked on
  // the submit path before the transport is chosen: a lookup, no I/O.
  // Default: kNone.
  virtual RouteDecline declinesBuffer(const PeerHandle& peer, int buffer) const;
  // The variant it offers on segments it serves (false: none; the default).
  // Its route shares the transport's peer handle and sub-batches: the
  // transport tells the variant's requests apart itself.
  virtual bool variant(TransportVariant& out) const;
  // Why the variant cannot serve requests to `peer` (a handle this transport
  // opened) now; kNone: it can. Asked on the submit path for requests the
  // variant fits by its caps: a lookup, no I/O.
  virtual RouteDecline variantDeclines(const PeerHandle& peer) const;
  // Why install() said kNotSupported, classified: kNoDevice where the host
  // lacks the device, else kNotInstalled (the default).
  virtual RouteReason absentReason() const;
  // Why it does not give `property` (one RouteProperty bit) to a request
  // with memory of `kinds` (MemoryKind bits at both ends), for the message
  // of a request a route contract forbids. Default: reason kNone, text
  // "<name> does not give <property>".
  virtual RouteDecline lacks(uint32_t property, uint32_t kinds) const;

  virtual Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) = 0;

  // Optional (docs/architecture.md, "Transfers moved directly"): moves
  // every request of a submit, `reqs` (each checked and routed to this
  // transport, all to remote buffer `buffer` of `peer`, a handle it opened;
  // `bytes` their lengths summed), on the calling thread, before it
  // returns, and returns true; or moves none of them and returns false,
  // and the engine posts them as tasks, whose path reports whatever went
  // wrong. For a transport that can move small requests at once with no
  // queue and no failure to report (shm through a mapping): no slice or
  // completion is built for them (their tasks, if any, are committed
  // COMPLETED). Default: false.
  virtual bool moveDirect(PeerHandle& peer, int buffer, std::span<const TransferRequest> reqs, uint64_t bytes);

  // Optional: a caller waiting for a batch this transport carries polls
  // through it (for batch.wait_spin_us): make progress on completions from
  // the calling thread where that saves a wake-up. Returns at once; never
  // blocks. Default: nothing.
  virtual void poll() {}

  // For `hawser doctor`: what it moves and what it found here.
  virtual void diagnose(TransportDiagnosis& out) const;
  // Counters for stats(), bench and metrics.
  virtual Counters stats() const;
};

}  // namespace hawser
