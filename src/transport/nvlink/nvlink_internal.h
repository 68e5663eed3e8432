// Internals of the nvlink transport shared by its .cpp files (not an
// interface for anyone else).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/posted_units.h"
#include "base/transport.h"
#include "gpu/batch_copy.h"
#include "gpu/copy_stream.h"
#include "gpu/cuda_api.h"
#include "base/segment_desc.h"
#include "gpu/vmm.h"
#include "local/peer_death_watcher.h"
#include "transport/nvlink/nvlink_readers.h"
#include "transport/nvlink/nvlink_transport.h"

namespace hawser::nvlink {

inline constexpr const char* kTableName = "hawser-nvlink-regions";

struct Counters {
  std::atomic<uint64_t> exported_regions{0};      // gauge: regions this engine exports
  std::atomic<uint64_t> exported_allocations{0};  // gauge: IPC handles behind them (legacy handles and VMM ranges)
  std::atomic<uint64_t> vmm_exported{0};          // gauge: of those, CUDA virtual memory ranges shared by fd
  std::atomic<uint64_t> vmm_fds_passed{0};        // owner: physical allocations' fds passed to peers
  std::atomic<uint64_t> vmm_imported{0};          // peer: VMM ranges imported and mapped here (of handles_opened)
  std::atomic<uint64_t> handles_opened{0};        // peers' allocations opened here
  std::atomic<uint64_t> handles_closed{0};
  std::atomic<uint64_t> owner_deaths{0};          // owners seen exiting
  std::atomic<uint64_t> slices_completed{0};
  std::atomic<uint64_t> slices_failed{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> peer_copies{0};           // slices between two different GPUs
  std::atomic<uint64_t> withdrawn_refusals{0};    // slices refused: the owner unregistered the buffer
  std::atomic<uint64_t> withdrawals_waited{0};    // owner: withdrawals that waited for peers' copies in flight
  gpu::CopyCounters copy;                         // how windows were copied (gpu_copy_*)
  std::atomic<uint64_t> plan_cache_hits{0};       // windows launched from a run list kept on the GPU
  std::atomic<uint64_t> plan_cache_misses{0};     // prepared plans' windows whose run list was (re)made
  std::atomic<uint64_t> plan_cache_bytes{0};      // gauge: device memory the kept run lists hold
  // Where a group's time goes (initiator; sums of nanoseconds over
  // `groups_issued`): queued (posted -> its stream thread takes it),
  // checking (owners, registrations, mappings, the runs collected),
  // launching (run list, kernel or copies, event), on the GPU (launched ->
  // seen done) and ending (its tasks or runs completed).
  std::atomic<uint64_t> groups_issued{0};
  std::atomic<uint64_t> groups_inline{0};  // of those, issued by the posting thread (nvlink.issue_inline)
  std::atomic<uint64_t> groups_polled{0};  // groups ended by a waiting caller's thread (Transport::poll)
  std::atomic<uint64_t> group_queued_ns{0};
  std::atomic<uint64_t> group_check_ns{0};
  std::atomic<uint64_t> group_launch_ns{0};
  std::atomic<uint64_t> group_gpu_ns{0};
  std::atomic<uint64_t> group_end_ns{0};
};

// This process's start time (clock ticks since boot, /proc/<pid>/stat field
// 22) and pid namespace: with the pid, they name a process for good.
uint64_t processStartTime(int64_t pid);  // 0 when the process does not exist (or exited: a zombie)
uint64_t pidNamespace();                 // inode of /proc/self/ns/pid (0 unknown)

// Runs fn on a short-lived thread (so GPU contexts made current for it never
// touch the caller's thread) and returns its status.
Status onOwnThread(const std::function<Status()>& fn);

// ---- owner side -------------------------------------------------------------

// The regions this engine exports, their IPC handles (one per allocation)
// and the shared table that says which are still registered, with the
// readers' area where peers announce their copies (nvlink_readers.h).
class Exports {
 public:
  static Status create(std::shared_ptr<Counters> counters, std::unique_ptr<Exports>& out);
  ~Exports();
  int tableFd() const { return fd_; }
  const std::atomic<uint64_t>* table() const { return table_; }
  // Exports [addr, addr + len) of GPU `device` (bus id `bus`); fills attrs:
  // a legacy IPC handle for memory of cuMemAlloc (cudaMalloc), a VMM range
  // (its allocations' fds, passed over the socket) for mapped memory.
  Status add(void* addr, size_t len, int device, const std::string& bus, nlohmann::json& attrs);
  // Duplicates of the fds of VMM range `id` (the caller closes them), for a peer.
  Status pieces(uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out);
  // The peer of connection `token` left: the reader slots it named by
  // that token are free (nvlink_socket.h: kTokenReader).
  void readerLeft(uint64_t token);
  // Withdraws the region registered at `addr`: no peer issues a copy on it
  // from here on, and this returns once no copy a live peer issued before
  // is still running.
  void remove(uint64_t addr);
  // The engine shuts down: withdraws every region (and waits likewise).
  void close();

 private:
  Exports() = default;
  struct Alloc {
    gpu::cu::IpcMemHandle handle;
    uint64_t size = 0;
    int refs = 0;
    uint64_t vmm = 0;                      // a VMM range's id (0: a legacy handle)
    std::vector<gpu::vmm::Piece> pieces;   // its physical allocations' fds
  };
  struct Region {
    uint64_t base = 0;
    uint32_t slot = 0;
    uint64_t vmm_size = 0;  // its VMM range's size (0: legacy): the key of allocs_ with base
  };
  // Exports the VMM range holding [addr, +len) (once per range).
  Status addVmm(void* addr, size_t len, int device, uint64_t& base, uint64_t& size, uint64_t& id);
  // Under mu_: takes the region at `addr` out of the table; its slot and gen.
  bool withdrawLocked(uint64_t addr, uint32_t& slot, uint64_t& gen);
  // Fences, waits for the peers' copies of every withdrawn slot, then frees the slots.
  void waitAndFree(const std::vector<std::pair<uint32_t, uint64_t>>& withdrawn);
  std::shared_ptr<Counters> counters_;
  int fd_ = -1;
  std::atomic<uint64_t>* table_ = nullptr;
  void* readers_ = nullptr;  // the readers' area (nvlink_readers.h), in the same mapping
  std::mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, Alloc> allocs_;  // by (allocation base, VMM range size or 0)
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> vmm_ids_;  // VMM range id -> its key in allocs_
  uint64_t next_vmm_ = 0;
  std::map<uint64_t, Region> regions_; // by region start
  std::vector<uint32_t> free_;
  uint32_t next_slot_ = 0;
  uint64_t gen_ = 0;
};

// ---- peer side --------------------------------------------------------------

struct Owner;

// One opened allocation of an owner (or, for an owner in this process, the
// allocation itself). Closed when the last view listing it goes, or once no
// copy uses it after the owner exited. Closes run on the watcher's thread
// (a task posted to the transport's PeerDeathWatcher).
struct Mapping {
  ~Mapping();
  // The mapped base; false once closed (or closing).
  bool acquire(uint64_t& base);
  void release();
  // The owner exited: close as soon as no copy uses it.
  void doom();

  std::shared_ptr<local::PeerDeathWatcher> watcher;
  std::shared_ptr<Counters> counters;
  uint64_t dptr = 0;  // base of the allocation in this process
  int device = -1;    // local ordinal of the GPU holding it
  uint64_t vmm_size = 0;  // a VMM range imported here (0: a legacy IPC handle opened)
  bool direct = false;  // the owner is this process: nothing was opened

 private:
  void closeLocked();
  std::mutex mu_;
  int users_ = 0;
  bool doomed_ = false;
  bool closed_ = false;
};

// What a descriptor says of one buffer, for nvlink.
struct BufferInfo {
  bool exported = false;
  bool no_handle = false;  // not usable because its owner published no IPC handle for it
  bool other_pidns = false;  // not usable: a legacy IPC handle of an owner in another pid namespace
  RouteReason socket_reason = RouteReason::kNone;  // not usable: a VMM range whose owner's socket is out of reach
  uint64_t vmm = 0;        // its owner's VMM range id (0: a legacy IPC handle)
  std::string why;        // when not usable: why
  std::string handle;     // the 64 bytes of the IPC handle ("vmm:<id>" for a VMM range): the mapping's cache key
  uint64_t base = 0;      // the allocation in the owner's address space
  uint64_t size = 0;
  int device = -1;        // local ordinal of its GPU
  uint32_t slot = 0;
  uint64_t gen = 0;
};

// Reads attrs.nvlink of one buffer of a peer's descriptor (peer-written):
// true with b's handle, base, size, slot and gen and the GPU's PCI `bus`
// ("" when not published) when the buffer is GPU memory whose published
// allocation [base, base+size) holds it and whose slot lies in the table;
// else false with b.why saying why.
// Fuzzed by tests/fuzz/descriptor_fuzz.cpp and, through decodePeerDesc,
// tests/fuzz/peer_descriptor_fuzz.cpp.
bool decodeBufferAttrs(const BufferDesc& bd, BufferInfo& b, std::string& bus);

// A peer's nvlink part of its descriptor, as decodePeerDesc reads it: its
// owner process (transports.nvlink) and what each buffer's attrs.nvlink says.
struct PeerDesc {
  int64_t pid = 0;      // the owner (> 0), in its pid namespace
  uint64_t start = 0;   // its start time (a reused pid is not it)
  uint64_t pidns = 0;   // its pid namespace
  int table_fd = -1;    // its region table's fd, in that process
  std::string socket;   // its local socket ("": an owner of an earlier release publishes none)
  uint64_t nonce = 0;   // what a hello to that socket carries
  bool readers = false;  // its table file has the readers' area (kReaderSlots slots)
  struct Buffer {
    BufferInfo info;  // decodeBufferAttrs's answer
    std::string bus;
    bool usable = false;
  };
  std::vector<Buffer> buffers;  // one per buffer of the segment
};
// The descriptor decoder (kNotSupported): not a memory segment (reason
// kRefused), no or an empty transports.nvlink (kPeerLacksTransport), or one
// with a field missing or malformed, named (kPeerIncompatible). A buffer
// nvlink cannot move is no refusal: its Buffer says why.
Status decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why);

// One owner process, shared by every view of its segment.
struct Owner {
  ~Owner();
  // Still registered by the owner (its table says so).
  bool valid(uint32_t slot, uint64_t gen) const {
    return slot < kTableSlots && table[slot].load(std::memory_order_acquire) == gen;
  }
  // The live mapping of `b`'s allocation, opened here when none is (on a
  // stream worker's thread: it switches that thread's GPU context).
  Status open(const BufferInfo& b, std::shared_ptr<Mapping>& out, bool& switched);
  // A live cached mapping of handle `h`, or null.
  std::shared_ptr<Mapping> cached(const std::string& h);
  // The owner exited: every mapping closes once idle.
  void died();
  // Whether the owner's process has exited (its pidfd, else its pid and start time).
  bool exited() const;
  // Stream worker `worker`'s reader slot in the owner's readers' area,
  // claimed on first use (that worker's thread alone uses it). Null with OK
  // when the owner has no readers' area (an earlier release: its
  // withdrawals do not wait for copies); kUnavailable when every slot is held.
  Status reader(size_t worker, Reader*& out);

  int64_t pid = 0;
  uint64_t start = 0;
  bool self = false;
  int pidfd = -1;
  int sock = -1;       // the owner's local socket (nvlink_socket.h), -1 for an owner of an earlier release
  uint64_t token = 0;  // this process's name in the owner's readers' area across pid namespaces
  bool other_pidns = false;  // the owner runs in another pid namespace: `pid` means nothing here
  std::string socket;  // its name
  RouteReason socket_reason = RouteReason::kNone;  // why it could not be reached (VMM memory is then declined)
  std::string socket_why;
  std::string name;  // "process N"
  const std::atomic<uint64_t>* table = nullptr;
  size_t table_bytes = 0;  // mapped here (0: the table is this process's own)
  void* readers = nullptr;  // the owner's readers' area, mapped read-write here (null: it has none)
  std::atomic<bool> dead{false};
  // The transport's watcher of owners' exits, and this owner's id there (0: not watched).
  std::shared_ptr<local::PeerDeathWatcher> watcher;
  uint64_t death_watch = 0;
  std::shared_ptr<Counters> counters;

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<Mapping>> mappings_;  // by handle
  std::mutex readers_mu_;
  std::vector<std::unique_ptr<Reader>> readers_;  // by stream worker
};

// Closes a legacy IPC mapping (vmm_size 0), or unmaps and frees an imported VMM range.
void closeMapping(uint64_t dptr, int device, uint64_t vmm_size, Counters* counters);
// Watches `o`'s process (its pidfd; without one, its pid and start time,
// polled): once it exits, o->died() runs on the watcher's thread.
void watchOwner(local::PeerDeathWatcher& watcher, const std::shared_ptr<Owner>& o);

// The engine's handle on one segment: its buffers decoded once, their
// mappings resolved on first use.
class PeerRef final : public PeerHandle {
 public:
  std::shared_ptr<Owner> owner;
  std::string segment;
  std::vector<BufferInfo> bufs;  // by descriptor buffer index
  // The mapping of buffer i (opened on first use); on a worker thread.
  Status mapping(size_t i, Mapping*& out, bool& switched);
  void adopt(size_t i, std::shared_ptr<Mapping> m);
  // Which mechanism its buffers got (the route explanation).
  std::string mechanism() const override;

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Mapping>> maps_;
};

// ---- prepared plans' windows kept on the GPU --------------------------------

// A prepared plan's window as a run list in device memory: made at the
// window's first post, launched directly at later ones, with no per-run
// work on the host. Valid while the plan lives and every remote buffer it
// copies is still mapped where it was (checked at each post, per buffer).
struct CachedWindow {
  ~CachedWindow();  // frees the list (no launch of it is in flight: launches hold the entry)
  std::weak_ptr<const void> plan;
  uint64_t first = 0;
  size_t nruns = 0;
  gpu::CopyStream::DevicePieces pieces;
  std::vector<std::pair<uint32_t, uint64_t>> bases;  // remote buffer -> where its allocation was mapped
  std::shared_ptr<Counters> counters;
  uint64_t used = 0;  // the cache's clock at the last use
};

// The kept windows of one transport, bounded by nvlink.plan_cache bytes of
// device memory: entries of plans released are dropped first, then the least
// recently used.
class WindowCache {
 public:
  // The entry of window `first` of `plan`, if kept (and the plan alive).
  std::shared_ptr<CachedWindow> find(const std::weak_ptr<const void>& plan, uint64_t first);
  void insert(std::shared_ptr<CachedWindow> w, uint64_t budget);
  // An entry found stale (a buffer remapped or withdrawn).
  void drop(const CachedWindow* w);
  void clear();

 private:
  void evictLocked(uint64_t budget);
  std::mutex mu_;
  uint64_t bytes_ = 0, clock_ = 0;
  std::map<std::pair<const void*, uint64_t>, std::shared_ptr<CachedWindow>> map_;
};

// ---- data path --------------------------------------------------------------

enum GroupState : uint8_t {
  kGroupPrepared = 0,
  kGroupQueued = 1,     // on a worker's queue (cancel() may take it)
  kGroupCommitted = 2,  // taken by the worker: issued, or failing
  kGroupCanceled = 3,
};

class StreamWorker;

// One copy: a stripe of a task, or a run of a block request's window.
struct Item {
  Task* task = nullptr;  // the task it is a slice of; null for a window's run
  PeerRef* peer = nullptr;
  uint32_t buf = 0;      // remote buffer index
  bool is_read = false;
  bool issued = false;   // worker thread: its copy was queued
  char* local = nullptr;
  uint64_t remote = 0;   // the owner's address
  uint64_t len = 0;
};

// What a stream worker queues with one CopyStream::copyRuns (one launch of
// the copy kernel, or the copy engines' calls): copies of one sub-batch, on
// one local GPU. Taken back as a whole by cancel() while queued.
//
// A window of runs on one GPU (the common case) is the window's own runs,
// not copied: `runs` .. `runs + nruns`, all to `peer`. Otherwise `items`.
struct Group {
  SubBatchImpl* sb = nullptr;
  StreamWorker* worker = nullptr;
  RunSink* sink = nullptr;  // the window these copies are runs of (tasks otherwise)
  std::vector<Item> items;
  const RunRef* runs = nullptr;
  size_t nruns = 0;
  PeerRef* peer = nullptr;  // of `runs`
  bool is_read = false;     // of `runs`
  RunSource* source = nullptr;              // the window's runs, when `runs` is not set yet
  std::shared_ptr<CachedWindow> cached;    // a prepared plan's window kept on the GPU
  std::weak_ptr<const void> plan;          // to keep the window's run list once made
  uint64_t first = 0;
  std::atomic<uint8_t> state{kGroupPrepared};
  std::chrono::steady_clock::time_point posted;  // handed to its stream thread
  size_t size() const { return runs || cached ? nruns : items.size(); }
};

struct Work final : PreparedWork {
  std::vector<std::unique_ptr<Group>> groups;
};

class SubBatchImpl final : public SubBatch {
 public:
  explicit SubBatchImpl(NvlinkTransport* owner) : owner_(owner) {}
  ~SubBatchImpl() override;
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  Status prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) override;
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override { return outstanding.load(std::memory_order_acquire) == 0; }

  std::atomic<int64_t> outstanding{0};  // groups posted and not yet let go of

 private:
  NvlinkTransport* owner_;
  std::mutex mu_;
  PostedUnits<Group> groups_;        // posted groups
  std::vector<StreamWorker*> used_;  // workers this sub-batch posted to
};

// Ends items [first, first + n) of `g` (none COMPLETED) with `state`: their
// tasks' slices, or the window's runs in one call.
void endItems(Group& g, size_t first, size_t n, TransferState state, const Status& why);

// One CUDA stream of one local GPU and the thread that drives it: issues up
// to `depth` groups (one copyRuns each), then waits for the oldest one.
class StreamWorker {
 public:
  // `index`: its number in the transport (its reader slot in each owner's table).
  // `issue_inline` (nvlink.issue_inline): a group posted while this stream
  // is idle is issued by the posting thread (issueHere).
  StreamWorker(size_t index, int device, uint32_t depth, std::shared_ptr<Counters> counters,
               const gpu::CopySettings& copy, bool spin_wait, bool issue_inline, WindowCache* cache,
               uint64_t cache_budget);
  ~StreamWorker();
  Status start();
  // Fails what is queued, waits for what was issued, joins.
  void stop();
  void post(Group* g);
  // A waiting caller's turn (Transport::poll): ends the groups in flight
  // whose copies are done, on the calling thread (its GPU context restored
  // after), unless the stream's thread is at it. A group a completion posts
  // meanwhile is queued for the stream's thread. Never blocks.
  void pollHere();
  // Drops `sb`'s canceled groups from the queue; how many it dropped.
  size_t purge(const SubBatchImpl* sb);
  int device() const { return device_; }

 private:
  struct Pending {
    Group* g;
    uint64_t ticket = 0;
    uint64_t bytes = 0;    // of its issued items
    size_t issued = 0;
    std::vector<Mapping*> maps;  // acquired for its copies
    // The owners' table slots its copies were announced under (cleared
    // once they completed: an owner's withdrawal waits for them).
    std::vector<std::pair<Reader*, uint32_t>> hazards;
    std::shared_ptr<CachedWindow> list;  // the run list its launch reads
    std::chrono::steady_clock::time_point launched;
  };
  // What one (peer, buffer) of a group holds while it is issued.
  struct Memo {
    bool seen = false;
    uint64_t base = 0;  // where its allocation is mapped here
    Status bad;         // why its copies cannot be made
  };
  void run();
  // Issues `g` on the calling thread (its GPU context restored after) when
  // the stream is idle: nothing queued, room in flight, its thread neither
  // issuing nor polling. The stream's thread is then woken only to see the
  // group end, while the GPU copies: the wake-up is off the request's path.
  bool issueHere(Group* g);
  void issue(Group* g);
  // Fill runs_ with the group's copies (the ones whose buffer can be
  // copied); the others end at once.
  void collectItems(Group* g, Pending& p, int& peer_device);
  void collectRuns(Group* g, Pending& p, int& peer_device);
  // A kept window: its buffers checked and mapped where they were; false
  // (nothing held) when it must be made again.
  bool reuse(Group* g, Pending& p);
  // Queues the group's copies: from its kept run list, or from runs_ (and
  // keeps the list when the group asks for it).
  Status queue(Group* g, Pending& p, int peer_device, gpu::CopyReport& rep);
  // Checks the owner of `peer` and the registration of its buffer `buf`,
  // and acquires its mapping (kept in p.maps): `m` and `base`, or `bad`
  // saying why not (`remote`, `len`: the copy that asked, for the message).
  void lookUp(PeerRef* peer, uint32_t buf, uint64_t remote, uint64_t len, Pending& p, Mapping*& m, uint64_t& base,
              Status& bad, int& peer_device);
  void finish(Pending& p);
  // Lets go of what `p` held for its copies (mappings, announcements): they
  // completed, or none was issued.
  void release(Pending& p);
  // The group is done with: the sub-batch may free it from here on.
  void letGo(Group* g);

  const size_t index_;
  const int device_;
  const uint32_t depth_;
  const bool issue_inline_;
  std::shared_ptr<Counters> counters_;
  gpu::CopySettings copy_;
  WindowCache* const cache_;
  const uint64_t cache_budget_;
  std::unique_ptr<gpu::CopyStream> stream_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Group*> queue_;
  std::atomic<bool> queued_{false};  // queue_ is not empty (read without mu_ while polling)
  bool stop_ = false;
  bool started_ = false;
  Status start_status_;
  // Who issues, polls or finishes holds issue_mu_ (taken before mu_): the
  // stream's thread, or a poster in issueHere. The stream, what is in
  // flight on it and the scratch below are used under it only.
  std::mutex issue_mu_;
  bool kicked_ = false;                // under mu_: a poster issued; poll for its end
  std::deque<Pending> inflight_;
  std::vector<gpu::CopyRun> runs_;
  std::vector<Memo> memo_;             // under issue_mu_
};

}  // namespace hawser::nvlink
