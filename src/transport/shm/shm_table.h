// The shm transport's registration table: the ranges a target exposes
// (registered, remote-accessible host memory), each with the generation of
// its registration, in a memfd the target writes and initiators of the same
// host map, so that an initiator checks each copy against the target's live
// registrations, not only against the descriptor it holds (which may be
// stale).
//
// Layout: a 64-byte header, then `capacity` entries {addr, length, gen} sorted
// by addr (mapped read-only by initiators); then, page-aligned, the readers'
// area: a 128-byte header and kReaderSlots slots {owner, hazard} of 128
// bytes that initiators write (mapped read-write by them; 128, not 64: two
// threads writing the two lines of one 128-byte pair still slow each other,
// base/cache_line.h). The writer (one process,
// under its own mutex) publishes a change of the entries as a seqlock: seq
// odd while the entries change, even when they are consistent. Readers retry
// while seq is odd or moved during their lookup. Every word is read and
// written with atomic operations (the mapping is shared between processes;
// atomics on a shared mapping are lock-free).
//
// Generations: every add() numbers the registration (1, 2, ...; never 0,
// never reused by this table), so a range withdrawn and registered again at
// the same address is another registration, which an initiator tells apart.
//
// Withdrawal waits for copies in flight (a hazard-pointer handshake): a copy
// thread of an initiator holds a reader slot; before each copy it writes the
// generation it copies under into its slot's `hazard`, then checks (after a
// full fence) that the entry of that generation is still in the table, and
// clears `hazard` once the copy returned. remove() takes the entry out of the
// table, fences, then waits until no slot of a live reader holds that
// generation. A slot's owner is a token the target gave the initiator's
// connection to its socket (shm_socket.h), not a pid (pids mean nothing
// across pid namespaces): the connection closes when the initiator's process
// ends, and the target then frees every slot of that token. Either the initiator's check sees the removal (and copies
// nothing), or remove() sees the hazard (and waits for the copy): no copy on
// a range starts after remove() began, or runs after it returned.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "hawser/status.h"

namespace hawser::shm {

inline constexpr uint64_t kTableMagic = 0x6873776172746162ull;  // "hswartab"
inline constexpr uint32_t kTableVersion = 4;  // 3: slots are owned by tokens; 4: 128-byte slots
inline constexpr uint32_t kTableCapacity = 65536;  // ranges one target can expose
inline constexpr uint32_t kReaderSlots = 4096;     // initiator copy threads one target serves at once

struct TableHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t capacity;
  uint64_t nonce;  // the owner's, also in its descriptor: ties table and process together
  uint64_t seq;    // seqlock: odd while changing
  uint64_t count;  // entries in use
  uint64_t closed; // 1 once the owner's engine shut down (nothing is exposed any more)
  uint64_t pad[2];
};
static_assert(sizeof(TableHeader) == 64);

struct TableEntry {
  uint64_t addr;
  uint64_t length;
  uint64_t gen;  // the registration's generation (never 0)
  uint64_t reserved;
};
static_assert(sizeof(TableEntry) == 32);

// The readers' area (initiators write it).
struct ReadersHeader {
  uint64_t used;  // slots ever claimed: the writer scans [0, used)
  uint64_t pad[15];
};
struct ReaderSlot {
  uint64_t owner;   // the token of the initiator holding the slot; 0: free
  uint64_t hazard;  // the generation one of its copies runs under; 0: none
  uint64_t pad[14];  // a line pair each: copy threads do not share lines, or their prefetched neighbours
};
static_assert(sizeof(ReadersHeader) == 128 && sizeof(ReaderSlot) == 128);

// Header and entries (what a lookup reads).
inline constexpr size_t tableBytes(uint32_t capacity) { return sizeof(TableHeader) + capacity * sizeof(TableEntry); }
// Where the readers' area starts (page-aligned: mapped apart), and the whole file.
inline constexpr size_t readersOffset(uint32_t capacity) { return (tableBytes(capacity) + 4095) / 4096 * 4096; }
inline constexpr size_t readersBytes() { return sizeof(ReadersHeader) + kReaderSlots * sizeof(ReaderSlot); }
inline constexpr size_t fileBytes(uint32_t capacity) { return readersOffset(capacity) + readersBytes(); }

// The target's side: owns the memfd and its writable mapping.
class TableWriter {
 public:
  TableWriter() = default;
  ~TableWriter();
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  // Creates the memfd ("hawser-shm-<pid>") and maps it. kNotSupported when
  // the kernel cannot (no memfd).
  Status create(uint64_t nonce);
  int fd() const { return fd_; }

  // Exposes [addr, addr + length) as a new registration; `gen` gets its
  // generation. kCapacityExceeded when the table is full (kTableCapacity ranges).
  Status add(uint64_t addr, uint64_t length, uint64_t& gen);
  // Withdraws the range registered at `addr`: no initiator starts a copy on
  // it from here on, and this returns once no copy that had started is still
  // running (a slot whose reader left is not waited for).
  // Returns the generation withdrawn (0: nothing was registered there).
  uint64_t remove(uint64_t addr);
  // The engine shuts down: empties the table, marks it closed and waits for
  // every copy in flight.
  void close();
  size_t size() const;
  // Readers: an initiator connected (its slots are owned by `token`), or
  // left (its connection closed: its process, or its engine's handle on
  // this one, ended); leaving frees its slots.
  void readerJoined(uint64_t token);
  void readerLeft(uint64_t token);
  // Withdrawals that had to wait for an initiator's copy.
  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }

 private:
  struct Range {
    uint64_t length = 0;
    uint64_t gen = 0;
  };
  void publishLocked();
  // Waits until no live reader holds `gen` (0: any generation).
  void waitForReaders(uint64_t gen);
  bool live(uint64_t token) const;
  int fd_ = -1;
  void* map_ = nullptr;
  mutable std::mutex mu_;
  std::map<uint64_t, Range> ranges_;  // by addr
  uint64_t next_gen_ = 1;
  std::atomic<uint64_t> waits_{0};
  mutable std::mutex readers_mu_;
  std::set<uint64_t> readers_;  // live tokens
};

// The reader's decode steps over a mapping of tableBytes(kTableCapacity)
// bytes that the peer writes (and so may fill with anything); each word is
// read atomically. Fuzzed by tests/fuzz/shm_table_fuzz.cpp.
//
// Whether the mapping's header is the peer's table: magic, version,
// capacity and nonce.
bool tableHeaderMatches(const void* map, uint64_t nonce);
// One lookup: false when the writer was mid-update (seq odd, or moved
// during the lookup); else `in` says whether [addr, addr+len) lies inside
// one exposed range (then `entry` is that range, with its generation) and
// `seq` is the sequence number it was read under.
bool lookupOnce(const void* map, uint64_t addr, uint64_t len, bool& in, TableEntry& entry, uint64_t& seq);

// An initiator's mapping of a peer's table: header and entries read-only,
// the readers' area read-write. Unmapped at destruction.
class TableView {
 public:
  ~TableView();
  // Maps the table file `fd` (the target passed it; not closed here) and
  // checks magic, version and nonce.
  static Status open(int fd, uint64_t nonce, std::unique_ptr<TableView>& out);
  // Whether [addr, addr+len) lies inside one exposed range now; `entry`
  // gets that range and its generation.
  bool find(uint64_t addr, uint64_t len, TableEntry& entry) const;
  // Whether the owner's engine shut down (its process may live on).
  bool closed() const;

  // A free reader slot for one copy thread of the reader `token`; -1 when
  // every slot is held.
  int claimSlot(uint64_t token) const;
  void releaseSlot(int slot) const;
  // Announces a copy under registration `gen` (the entry at `entry_addr`)
  // in `slot`, then checks that registration is still exposed: true, and the
  // copy may run until leave(); false when it was withdrawn (nothing stays
  // announced).
  bool enter(int slot, uint64_t entry_addr, uint64_t gen) const;
  void leave(int slot) const;

 private:
  TableView() = default;
  ReaderSlot* slot(int i) const;
  const void* map_ = nullptr;
  void* readers_ = nullptr;
};

}  // namespace hawser::shm
