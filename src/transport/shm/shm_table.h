// The shm transport's registration table: the ranges a target exposes
// (registered, remote-accessible host memory), in a memfd the target writes
// and initiators of the same host map read-only, so that an initiator checks
// each copy against the target's live registrations, not only against the
// descriptor it holds (which may be stale).
//
// Layout: a 64-byte header, then `capacity` entries {addr, length} sorted by
// addr. The writer (one process, under its own mutex) publishes a change as
// a seqlock: seq odd while the entries change, even when they are
// consistent. Readers retry while seq is odd or moved during their lookup.
// Every word is read and written with atomic operations (the mapping is
// shared between processes; atomics on a shared mapping are lock-free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "hawser/status.h"

namespace hawser::shm {

inline constexpr uint64_t kTableMagic = 0x6873776172746162ull;  // "hswartab"
inline constexpr uint32_t kTableVersion = 1;
inline constexpr uint32_t kTableCapacity = 65536;  // ranges one target can expose

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
};

inline constexpr size_t tableBytes(uint32_t capacity) { return sizeof(TableHeader) + capacity * sizeof(TableEntry); }

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

  // kCapacityExceeded when the table is full (kTableCapacity ranges).
  Status add(uint64_t addr, uint64_t length);
  void remove(uint64_t addr);
  // The engine shuts down: empties the table and marks it closed.
  void close();
  size_t size() const;

 private:
  void publishLocked();
  int fd_ = -1;
  void* map_ = nullptr;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> ranges_;  // addr -> length
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
// one exposed range and `seq` is the sequence number it was read under.
bool lookupOnce(const void* map, uint64_t addr, uint64_t len, bool& in, uint64_t& seq);

// An initiator's read-only mapping of a peer's table. Unmapped at destruction.
class TableView {
 public:
  ~TableView();
  // Opens /proc/<pid>/fd/<fd>, maps it and checks magic, version and nonce.
  static Status open(int64_t pid, int fd, uint64_t nonce, std::unique_ptr<TableView>& out);
  // Whether [addr, addr+len) lies inside one exposed range now; `seq` (optional)
  // gets the table's sequence number the answer was read under.
  bool contains(uint64_t addr, uint64_t len, uint64_t* seq = nullptr) const;
  uint64_t seq() const;
  // Whether the owner's engine shut down (its process may live on).
  bool closed() const;

 private:
  TableView() = default;
  const void* map_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace hawser::shm
