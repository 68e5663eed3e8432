// The shm transport: host memory of another process on the same host, no
// network hop. Memory whose pages are shareable (a memfd or a file mapped
// shared; hawser::allocateHostMemory gives such memory) is mapped once by
// the peer and copied with memcpy; other memory is copied by the kernel from
// one address space to the other (process_vm_readv/writev, "cross-memory
// attach").
//
// Target: publishes its pid, a random nonce, the address of a word holding
// that nonce (the probe) and the name of its local socket (shm_socket.h,
// shm_server.h), which hands a trusted initiator its registration table
// (shm_table.h, a memfd listing its remote-accessible host memory, rewritten
// on every register/unregister), a pidfd of itself, and the file of each
// shareable registration. The target takes no part in a copy.
//
// Initiator: openPeer connects to the socket (kNotSupported with the reason
// where it cannot: another network namespace, a socket directory not
// shared), says hello with the nonce, maps the table and each shareable
// registration the descriptor lists; reads the probe word with
// process_vm_readv at the pid SO_PEERCRED names in this pid namespace (EPERM,
// or a pid not visible from here: no cross-memory attach; the peer is then
// served only if all its memory is mapped, else the engine falls back to the
// next transport). Each task is cut into slices of at
// most shm.split_bytes and bound to the registration that holds its range
// (its generation in the table); consecutive slices of one prepare (a block
// request's window of runs) are grouped, up to shm.max_iov of them and
// shm.split_bytes in all, and each group is moved by one
// process_vm_readv/writev call with an iovec per slice, by one of
// shm.threads workers (or copied with memcpy from/to the mapping), after
// announcing it in the peer's table (the target's unregister waits for it).
// A submit of up to shm.inline_bytes (or a block request's first window) is
// neither cut nor handed over: the submitting thread copies it in post(),
// the same way, with a reader slot the peer lends it.
// A peer that exits (its pidfd becomes readable, or a copy answers ESRCH) is
// marked dead at once: its table is unmapped, its slices fail kUnavailable.
//
// Files: shm_transport.cpp (install, the descriptor and its decoder),
// shm_workers.cpp (the copy workers, and the copies a submitter makes
// itself), shm_peer.cpp (opening a peer, its pidfd watched by
// local::PeerDeathWatcher, its registrations mapped), shm_sub_batch.cpp,
// shm_table.{h,cpp} (the registration table), shm_socket.{h,cpp} and
// shm_server.{h,cpp} (the local socket), shm_backing.{h,cpp} (which memory
// is shareable). Trust model, tunables and figures: docs/shm.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/metrics.h"

#include "base/transport.h"
#include "local/peer_death_watcher.h"
#include "transport/shm/shm_table.h"

namespace hawser {

namespace shm {
// A peer's shm part of its descriptor (transports.shm), as decodePeerDesc
// reads it: where its local socket is and which process listens there.
struct PeerDesc {
  std::string socket;  // its local socket's path
  uint64_t nonce = 0;  // what a hello to that socket must carry
  uint64_t probe = 0;  // an address of the owner's to try cross-memory attach on
  int32_t pid = 0;     // the owner (> 0)
};
// The descriptor decoder (kNotSupported): not a memory segment (reason
// kRefused), no transports.shm (kPeerLacksTransport), or one of another
// version (kDescVersion) or with a field missing or malformed, named
// (kPeerIncompatible).
Status decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why);

struct Peer;
struct Slice;
struct Group;
struct Scratch;
struct Work;
class SubBatchImpl;
class Server;
struct Reg;
}  // namespace shm

struct ShmSettings {
  uint32_t threads = 0;             // shm.threads (0: min(4, CPUs))
  uint64_t split_bytes = 512 << 10; // shm.split_bytes
  uint64_t inline_bytes = 1 << 20;  // shm.inline_bytes
  uint32_t max_iov = 1024;          // shm.max_iov (IOV_MAX)
  std::string socket_dir;           // shm.socket_dir ("": abstract namespace)
  bool shared_mappings = true;      // shm.shared_mappings
};

// decodePeerDesc as the engine's list of transports names it (beside the
// factory, makeShmTransport; engine/transport_list.h).
Status decodeShmPeer(const SegmentDesc& seg, RouteDecline& why);

class ShmTransport final : public Transport {
 public:
  ShmTransport();
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  TransportCaps caps() const override;
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  // Remote-accessible host memory goes into the registration table.
  Status registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                        nlohmann::json& attrs) override;
  Status unregisterMemory(void* addr, size_t length) override;
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  // Requests of up to shm.inline_bytes in all to a registration mapped
  // here, announced and copied on the calling thread; declined (false) when
  // the registration is not mapped, the peer is gone or withdrew it, or no
  // reader slot is free: the batch's path then says why.
  bool moveDirect(PeerHandle& peer, int buffer, std::span<const TransferRequest> reqs, uint64_t bytes) override;
  void diagnose(TransportDiagnosis& out) const override;
  Counters stats() const override;

  static Status loadSettings(const Config& config, ShmSettings& out);
  const ShmSettings& settings() const { return settings_; }
  void countMapping() { counts_->mappings.fetch_add(1, std::memory_order_relaxed); }

 private:
  friend class shm::SubBatchImpl;
  void enqueue(std::vector<shm::Group*>& groups);
  void cancelQueued(shm::SubBatchImpl* sb);
  void work(unsigned worker);
  // Copies the groups of `w` on the calling thread (a submitter: shm.inline_bytes);
  // true when some went to the copy threads (no inline reader was free).
  bool copyHere(shm::Work& w);
  // A thread waiting for `sb` takes its first queued group and copies it
  // (SubBatch::assist); false when none was queued.
  bool assist(shm::SubBatchImpl* sb);
  // Moves group `g` on the calling thread with `table`, the peer's (null:
  // the peer is gone), announced in reader slot `slot` of it (-1: none was
  // free); `scratch`: iovecs for cross-memory attach (unused by mappings).
  void runGroup(shm::Group* g, const shm::TableView* table, int slot, shm::Scratch* scratch);
  // A group whose registration is mapped here (announced in `slot`).
  void copyMapped(shm::Group* g, const shm::TableView& table, int slot);
  // The watcher saw the process of `p` exit.
  void peerGone(const std::shared_ptr<shm::Peer>& p);
  // Connects to the peer's socket and maps its table: a new Peer.
  Status connectPeer(const SegmentDesc& seg, const std::string& socket, uint64_t nonce, uint64_t probe,
                     int64_t own_pid, std::shared_ptr<shm::Peer>& out, RouteDecline& why);
  // The registrations of `seg`'s buffers, the shareable ones mapped;
  // kNotSupported when one is not mapped and cross-memory attach cannot reach it.
  Status bindRegistrations(shm::Peer& p, const SegmentDesc& seg, std::vector<shm::Reg>& out, RouteDecline& why);

  ShmSettings settings_;
  bool installed_ = false;
  std::atomic<bool> stopping_{false};
  uint64_t nonce_ = 0;
  std::string cma_here_;  // why process_vm_readv does not work in this process ("": it does)
  shm::TableWriter table_;
  std::unique_ptr<shm::Server> server_;

  // Workers and their queue.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<shm::Group*> queue_;
  std::vector<std::thread> workers_;

  // Peers by "pid/nonce"; the watcher waits on their pidfds.
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::weak_ptr<shm::Peer>> peers_;
  local::PeerDeathWatcher deaths_;

  // Those counted per copy are sharded (metrics::Counter: a cache line per
  // thread's shard), so that threads copying at once share no line.
  struct Counts {
    metrics::Counter slices_completed;
    metrics::Counter slices_failed;
    metrics::Counter bytes_read;
    metrics::Counter bytes_written;
    metrics::Counter copy_calls;  // process_vm_readv/writev calls (each moves a group of slices)
    metrics::Counter refused;     // not in the target's live table
    std::atomic<uint64_t> peers_opened{0};
    std::atomic<uint64_t> peers_refused{0};  // openPeer said no (CMA refused, wrong process)
    std::atomic<uint64_t> peers_gone{0};     // peers seen exiting
    std::atomic<uint64_t> peers_mapped{0};   // peer handles (openPeer: one per descriptor version) with every buffer mapped
    std::atomic<uint64_t> peers_cma{0};      // peer handles with some buffer over cross-memory attach
    std::atomic<uint64_t> mappings{0};       // registrations of peers mapped here
    metrics::Counter mapped_slices;  // slices copied with memcpy through a mapping
    metrics::Counter inline_slices;  // slices copied by their submitting thread (shm.inline_bytes)
    metrics::Counter waiter_slices;  // slices copied by a thread waiting for their batch (SubBatch::assist)
    metrics::Counter direct_requests;  // requests moved at once, no slice made (moveDirect)
  };
  std::unique_ptr<Counts> counts_;
};

}  // namespace hawser
