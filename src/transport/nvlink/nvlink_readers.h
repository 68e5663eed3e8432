// The readers' area of an nvlink owner's region table: where initiators
// announce the registrations their copies in flight use, so that the owner's
// withdrawal of a region waits for them (a hazard handshake, as shm's
// registration table does: shm_table.h).
//
// The owner's memfd: the region table (kTableSlots words, one per exported
// region: its gen while it is registered, 0 once it is not), then, at
// kReadersOffset, the readers' area: a 64-byte header {used}, kReaderSlots
// slots {pid, start} of 64 bytes each, and, page-aligned, one bitmap of
// kTableSlots bits per reader slot. Every word is read and written with
// atomic operations (the mapping is shared between processes).
//
// A reader slot belongs to one stream worker of one initiator process,
// claimed at its first copy with that owner (a free slot, or one whose
// process is gone). Before a group of copies is issued, the worker sets the
// bit of each table slot the group copies to or from (in its own bitmap:
// only it writes there), fences, then checks that each slot's word still
// holds the gen its task was made for; it clears a bit once no group of its
// own in flight uses that table slot any more (their copies completed). The
// owner's withdrawal stores 0 in the slot's word, fences, then waits until
// no live process's reader slot has that bit set. Either the worker's check
// sees the 0 (and issues nothing), or the owner sees the bit (and waits for
// the copies): no copy into or out of a region runs after its withdrawal
// returned. A table slot goes to a new registration only after that wait,
// so a bit seen during one belongs to the withdrawn registration (or to a
// check that is about to fail).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace hawser::nvlink {

// Slots of the owner's region table (8 bytes each; the memfd is sparse).
inline constexpr size_t kTableSlots = 65536;
// Reader slots: stream workers of initiator processes copying with one owner.
inline constexpr uint32_t kReaderSlots = 4096;

struct ReadersHeader {
  uint64_t used;  // reader slots ever claimed: the owner scans [0, used)
  uint64_t pad[7];
};
struct ReaderSlot {
  uint64_t pid;    // the initiator process holding it; 0: free. With kHolderToken set: the token of its
                   // connection to the owner's socket (an initiator in another pid namespace)
  uint64_t start;  // that process's start time (processStartTime): a reused pid is not it
  uint64_t pad[6]; // a cache line each
};
static_assert(sizeof(ReadersHeader) == 64 && sizeof(ReaderSlot) == 64);

// A holder named by a token, not a pid: alive until the owner frees its slots
// (its connection to the owner's socket closed: freeHolder).
inline constexpr uint64_t kHolderToken = uint64_t{1} << 63;

inline constexpr size_t kTableBytes = kTableSlots * sizeof(uint64_t);
inline constexpr size_t kBitmapWords = kTableSlots / 64;
inline constexpr size_t kReadersOffset = kTableBytes;  // page-aligned: mapped apart
inline constexpr size_t kBitmapsOffset =
    (kReadersOffset + sizeof(ReadersHeader) + kReaderSlots * sizeof(ReaderSlot) + 4095) / 4096 * 4096;
// The whole memfd, and the readers' area (mapped read-write by initiators).
inline constexpr size_t kTableFileBytes = kBitmapsOffset + size_t{kReaderSlots} * kBitmapWords * sizeof(uint64_t);
inline constexpr size_t kReadersBytes = kTableFileBytes - kReadersOffset;
static_assert(kReadersOffset % 4096 == 0);

// Owner side, over a mapping of the readers' area: waits until no reader
// slot of a live process has the bit of table slot `slot` set (its word was
// zeroed and fenced by the caller). `gen`: the registration withdrawn (for
// the warning a stuck reader earns after a second, and every five after).
// `waits` counts the withdrawal as it starts waiting.
void waitForReaders(void* readers, uint32_t slot, uint64_t gen, std::atomic<uint64_t>& waits);

// Owner side: frees the reader slots held by `holder` (kHolderToken | a
// connection's token): that initiator is gone, its copies with it.
void freeHolder(void* readers, uint64_t holder);

// One stream worker's reader slot in one owner's readers' area. Used by
// that worker's thread alone once claimed.
class Reader {
 public:
  // Claims a free slot (or one of a process gone) of the area at `readers`
  // for this process (named by its pid, or by `holder` where the owner
  // cannot see it: another pid namespace); false when every slot is held.
  bool claim(void* readers, uint64_t holder = 0);
  // Gives the slot back (no copy of it is in flight).
  void release();
  // A group about to copy with table slot `s`: its bit is set (the caller
  // fences, then checks the slot's word).
  void enter(uint32_t s);
  // That group's copies completed (or it issued none).
  void leave(uint32_t s);
  int slot() const { return slot_; }

 private:
  void* readers_ = nullptr;
  int slot_ = -1;
  std::atomic<uint64_t>* bits_ = nullptr;  // this slot's bitmap
  std::unordered_map<uint32_t, uint32_t> uses_;  // table slot -> groups in flight using it
};

}  // namespace hawser::nvlink
