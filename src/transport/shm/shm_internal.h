// Internals of the shm transport shared by its .cpp files (not an interface
// for anyone else): peers, slices and their groups, the sub-batch, and how
// slices end.
#pragma once

#include <chrono>
#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/cache_line.h"
#include "base/log.h"
#include "base/transport.h"
#include "transport/shm/shm_table.h"
#include "transport/shm/shm_transport.h"

namespace hawser::shm {

// 3: the table, the peer's pidfd and its shareable memory come over its local socket
inline constexpr uint32_t kDescVersion = 3;
inline constexpr uint32_t kMaxThreads = 64;
inline constexpr uint32_t kMaxIov = 1024;  // shm.max_iov at most (IOV_MAX)
// Submitting threads copying one peer's slices at once (shm.inline_bytes);
// more hand theirs to the copy threads.
inline constexpr uint32_t kInlineReaders = 64;

// A registration of the peer mapped into this process (its file, passed
// over the socket): `base` is where the peer's address `addr` lies here.
struct Mapping {
  uint64_t gen = 0, addr = 0, length = 0;
  char* base = nullptr;
  void* map = nullptr;  // what mmap gave (page-aligned)
  size_t map_len = 0;
  ~Mapping();
};

// One target process, shared by every handle on it.
struct Peer {
  ShmTransport* owner = nullptr;
  int64_t pid = 0;        // in this pid namespace, for cross-memory attach; 0: not visible from here
  int64_t own_pid = 0;    // in its own (what its descriptor says; names it in messages)
  uint64_t nonce = 0;
  int pidfd = -1;         // passed by the peer: its exit, whatever the pid namespaces
  uint64_t death_watch = 0;  // its id in the transport's PeerDeathWatcher (0: not watched)
  int sock = -1;          // our connection to its socket (closed: our reader slots are freed)
  uint64_t token = 0;     // the peer's name for that connection (owns our reader slots)
  bool cma = false;       // cross-memory attach works (else only mapped registrations are served)
  std::string cma_why;    // why not
  RouteReason cma_reason = RouteReason::kNone;  // the same, as a route reason
  std::atomic<bool> dead{false};
  std::mutex mu;
  std::shared_ptr<TableView> table;  // null once the peer is gone
  // The same table for the submitting threads that copy (inline readers),
  // read without `mu` or a reference count: set at connect, cleared at
  // markDead. A reader is marked busy before it reads this; the table the
  // dead peer had (`retired`, under mu) is dropped, and unmapped, once no
  // inline reader is busy: by markDead, else by the last one giving back.
  std::atomic<const TableView*> live_table{nullptr};
  std::shared_ptr<TableView> retired;
  std::mutex map_mu;                 // the socket's requests, and maps
  std::map<uint64_t, std::weak_ptr<Mapping>> maps;  // by generation
  // The reader slot in its table of each of our copy threads (claimed at
  // its first copy; -1: none yet). Only that thread touches its entry.
  int slots[kMaxThreads];
  // The reader slots of submitting threads that copy their own slices
  // (shm.inline_bytes): one is lent for a post (busy), claimed in the table
  // at its first use; a reader's slot is touched only by its borrower.
  // A line pair each (base/cache_line.h): submitting threads borrowing at
  // once share none.
  struct alignas(kFalseSharingBytes) InlineReader {
    std::atomic<bool> busy{false};
    int slot = -1;
  };
  InlineReader inline_readers[kInlineReaders];

  Peer() { std::fill(std::begin(slots), std::end(slots), -1); }

  std::shared_ptr<TableView> view() {
    std::lock_guard lk(mu);
    return table;
  }
  // Copy thread `worker`'s reader slot in `t` (-1: the table has none free).
  int slotFor(unsigned worker, const TableView& t) {
    if (slots[worker] < 0) slots[worker] = t.claimSlot(token);
    return slots[worker];
  }
  // Lends a submitting thread an inline reader and the peer's table: the
  // reader's index (give it back with giveInline), the table in `t` and
  // the reader's slot in it in `slot` (-1: the table has none free); -1
  // when all kInlineReaders are lent, -2 when the peer is dead.
  int borrowInline(const TableView*& t, int& slot) {
    static std::atomic<uint32_t> next_hint{0};
    thread_local const uint32_t hint = next_hint.fetch_add(1, std::memory_order_relaxed);
    for (uint32_t k = 0; k < kInlineReaders; ++k) {
      const uint32_t i = (hint + k) % kInlineReaders;
      InlineReader& r = inline_readers[i];
      // Busy first, then the table (both seq_cst, as markDead's clear and
      // scan): either markDead sees this reader busy, or this sees null.
      if (r.busy.load(std::memory_order_relaxed) || r.busy.exchange(true, std::memory_order_seq_cst)) continue;
      t = live_table.load(std::memory_order_seq_cst);
      if (!t) {
        giveInline(static_cast<int>(i));
        return -2;
      }
      if (r.slot < 0) r.slot = t->claimSlot(token);
      slot = r.slot;
      return static_cast<int>(i);
    }
    return -1;
  }
  void giveInline(int i) {
    inline_readers[i].busy.store(false, std::memory_order_seq_cst);
    if (dead.load(std::memory_order_seq_cst)) dropRetired();
  }
  // Whether the process has exited (its pidfd is readable).
  bool exited() const {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  // The mapping of registration `gen` (its file asked for over the socket
  // the first time); null and `why` when the peer does not share it.
  std::shared_ptr<Mapping> mapping(uint64_t gen, std::string& why);
  // The process is gone: unmap its table (once no copy uses it).
  void markDead() {
    if (dead.exchange(true)) return;
    live_table.store(nullptr, std::memory_order_seq_cst);
    {
      std::lock_guard lk(mu);
      retired = std::move(table);
    }
    dropRetired();
    HLOG_INFO("shm: peer process {} exited; its registration table is unmapped once no copy reads it", pid);
  }
  // The dead peer's table, dropped once no inline reader is busy.
  void dropRetired() {
    std::shared_ptr<TableView> t;
    std::lock_guard lk(mu);
    if (!retired) return;
    for (const InlineReader& r : inline_readers)
      if (r.busy.load(std::memory_order_seq_cst)) return;
    t = std::move(retired);
  }
};

// A registration of the target as the descriptor a request was made with
// names it: its range and its generation in the target's table (0: the
// descriptor names none).
struct Reg {
  uint64_t addr = 0, length = 0, gen = 0;
  bool shared = false;          // the target offers it to map (attrs.shm.shared)
  std::shared_ptr<Mapping> map; // mapped here: copied with memcpy; null: cross-memory attach
};

// The engine's handle on one segment (one descriptor version): its process,
// and the registration each of its buffers is (attrs.shm.gen). A request to
// buffer i is bound to regs[i]: every task (and every window of a block
// request) made with this descriptor checks the same registration.
class PeerRef final : public PeerHandle {
 public:
  PeerRef(std::shared_ptr<Peer> p, std::vector<Reg> r) : peer(std::move(p)), regs(std::move(r)) {}
  std::string mechanism() const override;
  const std::shared_ptr<Peer> peer;
  const std::vector<Reg> regs;
};
// regs of a PeerRef: the shm generation of each buffer of `seg`.
std::vector<Reg> registrationsOf(const SegmentDesc& seg);
// The registration of remote buffer `bi` of the peer (an empty one, gen 0,
// when none). By reference: a copy would count references to its mapping,
// a cache line every thread submitting to this peer shares.
inline const Reg& regOf(const PeerRef& ref, int bi) {
  static const Reg kNone{};
  return bi >= 0 && static_cast<size_t>(bi) < ref.regs.size() ? ref.regs[static_cast<size_t>(bi)] : kNone;
}

class SubBatchImpl;

// The slices of one run of a block request's window that is longer than
// shm.split_bytes: the run ends when its last slice does.
struct RunPieces {
  std::atomic<uint32_t> left{0};
  uint64_t length = 0;
  std::mutex mu;  // the first failure of a slice
  bool failed = false;
  TransferState state = TransferState::kFailed;
  Status why;
};

// At most shm.split_bytes of one task (or of one run of a window): one
// iovec pair of a copy. Bound to the registration its request was made for
// (`gen`, the target's range [reg_addr, +reg_len)).
struct Slice {
  Task* task = nullptr;        // a task's slice; else a run's:
  RunSink* sink = nullptr;     //   its window
  RunPieces* pieces = nullptr; //   null: the slice is the whole run
  SubBatchImpl* sb = nullptr;
  Peer* peer = nullptr;
  char* local = nullptr;
  uint64_t remote = 0;
  uint64_t len = 0;
  uint64_t gen = 0;
  uint64_t reg_addr = 0, reg_len = 0;
  char* map_base = nullptr;  // the registration mapped here (where reg_addr lies); null: cross-memory attach
  bool is_read = false;
};

// Consecutive slices of one prepare moved by one process_vm_readv/writev
// call (an iovec pair each): same peer, same direction, same registration;
// at most shm.max_iov of them and shm.split_bytes in all (a slice of that
// size goes alone), so small runs cost a call per shm.split_bytes, as
// contiguous bytes do.
struct Group {
  Slice* first = nullptr;
  uint32_t n = 0;
};

struct Work final : PreparedWork {
  bool on_submitter = false;  // copied by the posting thread (shm.inline_bytes), not cut
  bool spare = false;         // prepareInline's: kept by its sub-batch for the next once copied
  std::unique_ptr<Slice[]> chunk;
  std::unique_ptr<Group[]> groups;
  size_t capacity = 0;        // chunk's and groups' length (at least slices)
  size_t ngroups = 0;
  std::unique_ptr<RunPieces[]> pieces;
};

// A copy thread's iovec arrays and per-slice outcomes (shm.max_iov each).
struct Scratch {
  explicit Scratch(size_t n) : local(n), remote(n), err(n) {}
  std::vector<iovec> local, remote;
  std::vector<int> err;
};

class SubBatchImpl final : public SubBatch {
 public:
  explicit SubBatchImpl(ShmTransport* owner) : owner_(owner) {}
  ~SubBatchImpl() override;
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  Status prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) override;
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override { return outstanding.load(std::memory_order_acquire) == 0; }
  bool assist() override;
  bool reuse() override;

  std::atomic<int64_t> outstanding{0};  // slices queued or being copied

 private:
  // Cuts the groups of work.chunk[0, work.slices), of at most `limit` bytes.
  void group(Work& work, uint64_t limit) const;
  // prepare() of a submit the submitting thread copies: a slice a task.
  Status prepareInline(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out);
  ShmTransport* owner_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Work>> posted_;
  // The work of the last submit its thread copied, for the next: touched
  // only by submits (prepareInline, post), under the batch's submit lock.
  std::unique_ptr<Work> spare_;
};

// Ends slices, each exactly once. A slice of a task cut in several ends at
// once; tasks of one slice that completed, and whole runs of a window that
// completed, are gathered and reported together (Task::completeWhole, one
// RunSink call for many runs) by flush() or at destruction. Nothing of a
// slice is touched once it ended, nor its sub-batch after its last slice:
// everything needed is read first.
class Ends {
 public:
  Ends() = default;
  Ends(const Ends&) = delete;
  ~Ends() { flush(); }
  void end(Slice* s, TransferState state, uint64_t bytes, const Status& why);
  void flush();

 private:
  void flushWhole();
  // When the slices ended: read once, at the first (they end together).
  std::chrono::steady_clock::time_point now() {
    if (now_ == std::chrono::steady_clock::time_point{}) now_ = std::chrono::steady_clock::now();
    return now_;
  }
  std::chrono::steady_clock::time_point now_{};
  // Whole tasks gathered (of one sub-batch), and the bytes each moved.
  static constexpr size_t kWhole = 64;
  Task* whole_[kWhole];
  uint64_t whole_bytes_[kWhole];
  size_t whole_n_ = 0;
  SubBatchImpl* whole_sb_ = nullptr;
  SubBatchImpl* sb_ = nullptr;
  RunSink* sink_ = nullptr;
  size_t runs_ = 0;
  uint64_t bytes_ = 0;
};

// Ends every slice of `g` the same way; `why(slice)` names its range.
template <class Why>
void endAll(Group* g, TransferState state, Code code, Why why) {
  Slice* const first = g->first;
  const uint32_t n = g->n;  // g is not touched once its last slice ended
  Ends ends;
  for (uint32_t i = 0; i < n; ++i) ends.end(&first[i], state, 0, Status(code, why(first[i])));
}

std::string cmaRefusal(int64_t pid, int err);

}  // namespace hawser::shm
