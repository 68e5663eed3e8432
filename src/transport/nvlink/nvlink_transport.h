// The nvlink transport: GPU memory between processes of one host, through
// CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle), copied by the GPUs'
// copy engines over NVLink (or PCIe where there is none). docs/nvlink.md.
//
// Owner (the segment's process): registering GPU memory exports one IPC
// handle per allocation (cuMemGetAddressRange gives its base; several regions
// of one allocation share the handle) and publishes it, with the region's
// offset in it, under the buffer's attrs.nvlink. Each exported region also
// holds a slot of a small shared table (a memfd) whose word says whether the
// region is still registered: peers check it before every copy, so memory
// the owner withdrew is refused even by a peer holding an old descriptor.
// Peers announce in the table's readers' area the slots their copies in
// flight use, and a withdrawal (unregisterLocalMemory, shutdown) waits for
// those copies: none runs after it returned (nvlink_readers.h).
// describe() publishes the pid, its start time and pid namespace (liveness)
// and the table's fd.
//
// Peer (the initiator): per owner process, one Owner record: a pidfd that
// says when the owner exits, and the owner's table mapped read-only (its
// readers' area read-write). Each
// allocation's handle is opened once (lazy peer access) in the context of
// the GPU that holds it, on first use, and cached; it is closed when no
// descriptor view lists it any more (the owner unregistered it) or as soon
// as no copy uses it once the owner has exited. Copies run on
// nvlink.streams streams per local GPU, each driven by its own thread, a
// group at a time (gpu::CopyStream::copyRuns): a block request's window of
// runs is one group on its GPU's first stream, copied by one launch of
// hawser's gather/scatter kernel (or the copy engines for large runs), and a
// prepared plan's window posted again is launched from a run list kept on
// the GPU; tasks larger than nvlink.stripe_size are striped over the
// streams. Owners and registrations are checked once per buffer of a group.
// An owner in this very process is addressed directly (no IPC).
//
// Memory of CUDA's virtual memory management (cuMemCreate/cuMemMap, as
// PyTorch's expandable segments allocate it) has no legacy IPC handle: its
// physical allocations are exported as POSIX fds and passed over the
// owner's local socket (nvlink_socket.h, gpu/vmm.h); the peer imports and
// maps them in a reservation of its own. The socket also hands peers the
// table and a pidfd, so an owner in another pid namespace is served (VMM
// memory only: legacy handles do not open there).
//
// Files: nvlink_transport.cpp (install, export, peers, stats),
// nvlink_socket.cpp (the local socket: owner's server, peer's requests),
// nvlink_peer.cpp (owners, opened handles, the liveness watcher),
// nvlink_readers.cpp (the table's readers' area: copies announced, waited for),
// nvlink_sub_batch.cpp (prepare, prepareRuns, post, cancel),
// nvlink_stream_worker.cpp (the stream workers: check, launch, end groups),
// nvlink_window_cache.cpp (prepared plans' run lists kept on the GPU).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/transport.h"
#include "gpu/batch_copy.h"

namespace hawser {

namespace local {
class PeerDeathWatcher;
}  // namespace local

namespace nvlink {
class Exports;
class Server;
class WindowCache;
class StreamWorker;
class SubBatchImpl;
struct Counters;
struct Owner;
}  // namespace nvlink

// nvlink::decodePeerDesc as the engine's list of transports names it (beside
// the factory, makeNvlinkTransport; engine/transport_list.h).
Status decodeNvlinkPeer(const SegmentDesc& seg, RouteDecline& why);

struct NvlinkSettings {
  uint32_t streams = 4;             // nvlink.streams (per local GPU)
  uint64_t stripe_size = 64ull << 20;  // nvlink.stripe_size
  uint32_t stream_depth = 4;        // nvlink.stream_depth (copies queued per stream)
  bool spin_wait = true;            // nvlink.spin_wait
  bool issue_inline = true;         // nvlink.issue_inline
  uint64_t plan_cache = 64ull << 20;  // nvlink.plan_cache (device bytes of kept run lists)
  gpu::CopySettings copy;           // gpu.copy_*: how windows of runs are copied
  std::string socket_dir;           // nvlink.socket_dir ("": the abstract namespace)
};

class NvlinkTransport final : public Transport {
 public:
  NvlinkTransport();
  ~NvlinkTransport() override;

  const char* name() const override { return "nvlink"; }
  TransportCaps caps() const override;
  // kNotSupported (with the driver's reason) where no CUDA driver is loaded.
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  // Exports remote-accessible GPU regions; host memory is left alone.
  // Keeps nothing with the region: a task's GPU is its region's
  // (Task::region().gpu), found at submit.
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override;
  Status unregisterMemory(void* addr, size_t length) override;
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) override;
  RouteReason absentReason() const override;
  RouteDecline declinesBuffer(const PeerHandle& peer, int buffer) const override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  // A waiting caller ends the groups whose copies are done (batch.wait_spin_us):
  // a copy shorter than the stream thread's wake-up ends without one.
  void poll() override;
  void diagnose(TransportDiagnosis& out) const override;
  Counters stats() const override;

  const NvlinkSettings& settings() const { return settings_; }
  static Status loadSettings(const Config& config, NvlinkSettings& out);

 private:
  friend class nvlink::SubBatchImpl;
  friend struct nvlink::Owner;
  // The stream workers of local GPU `device`, started on first use.
  Status workers(int device, std::vector<nvlink::StreamWorker*>& out);
  // The local ordinal of the GPU with PCI bus id `bus` ("" or unknown: -1).
  int ordinalOfBus(const std::string& bus) const;

  NvlinkSettings settings_;
  bool installed_ = false;
  std::atomic<bool> stopping_{false};
  std::vector<std::string> buses_;  // PCI bus id of each local GPU (lower case)
  uint64_t start_time_ = 0;  // this process's (describe)
  uint64_t pidns_ = 0;
  std::shared_ptr<nvlink::Counters> counters_;
  std::unique_ptr<nvlink::WindowCache> cache_;
  std::unique_ptr<nvlink::Exports> exports_;
  std::unique_ptr<nvlink::Server> server_;  // the local socket (nvlink_socket.h)
  uint64_t nonce_ = 0;                      // peers' hello must carry it (published by describe)
  std::shared_ptr<local::PeerDeathWatcher> watcher_;  // owners' exits; mappings closed on its thread
  std::mutex workers_mu_;
  std::map<int, std::vector<std::unique_ptr<nvlink::StreamWorker>>> workers_;
  size_t next_worker_ = 0;  // under workers_mu_: the next stream worker's number
  std::atomic<uint32_t> rr_{0};  // spreads tasks over a GPU's streams
  std::mutex owners_mu_;
  std::map<std::string, std::weak_ptr<nvlink::Owner>> owners_;  // "pid:start time:table fd" (one per engine)
};

}  // namespace hawser
