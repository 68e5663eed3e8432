// Storage I/O sized by the disk, not by the block: the pure logic (no I/O)
// that turns the runs of one prepare() -- many small pieces of a file, often
// contiguous or nearly so in the file while scattered in memory (a paged KV
// cache offloaded to disk) -- into few large I/Os, unit-tested on its own
// (tests/unit/file_coalesce_test.cpp).
//
// Terms: a *part* is what one run (one task) asks of one backing file; an
// *extent* is one I/O; a *member* is the piece of a part one extent carries
// (it completes the part's task only with its extent).
//
// The rule: parts sorted by file offset form *chains*: each next part starts
// at or after the end of the chain, at most `max_gap` bytes later (reads: the
// gap is read and discarded; writes: `max_gap` is 0, only exactly adjacent
// parts chain, so a write never touches a byte nobody asked for). A chain is
// cut as one span by cutSpan (file_plan.h): at absolute multiples of `max_io`,
// and for an O_DIRECT write its unaligned head and tail become their own
// (buffered) extents. Each piece of the cut is an extent carrying the parts
// it intersects, trimmed to their bytes (an extent never starts or ends in a
// gap; a piece wholly inside a gap is dropped).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

namespace hawser::file {

// What one run asks of one file: [file_off, +len) of the file <-> [mem, +len)
// of memory. `index` is the caller's name for it.
struct RunPart {
  uint64_t file_off = 0;
  uint64_t len = 0;
  uint64_t mem = 0;
  uint32_t index = 0;
};

// The piece of part `index` one extent carries.
struct Member {
  uint32_t index = 0;
  uint64_t file_off = 0;
  uint64_t len = 0;
  uint64_t mem = 0;
};

// One I/O: [file_off, +len) of the file (from its first member's first byte
// to its last member's last byte), carrying members[first, +count), in file
// order, never overlapping; a read's may leave gaps between them.
struct Extent {
  uint64_t file_off = 0;
  uint64_t len = 0;
  uint32_t first = 0;
  uint32_t count = 0;
  bool buffered = false;  // an unaligned head/tail of an O_DIRECT write: through the page cache
};

struct CoalesceRule {
  uint64_t max_io = 1 << 20;  // positive; a multiple of write_align when that is > 1
  uint64_t write_align = 1;   // > 1: an O_DIRECT write (cutSpan's rule for heads and tails)
  uint64_t max_gap = 0;       // reads: the largest gap one extent reads through; writes: 0
  bool join = true;           // false: no chains, every part is cut alone (one run per I/O)
};

// Sorts `parts` by file offset (stable: equal offsets keep their order) and
// appends the extents and their members. Overlapping parts never share an
// extent.
void coalesce(std::vector<RunPart>& parts, const CoalesceRule& rule, std::vector<Extent>& extents,
              std::vector<Member>& members);

// Whether every member may go straight between its memory and an O_DIRECT
// descriptor as one iovec: address aligned to `mem_align`, file offset and
// length to `off_align` (the kernel checks each iovec of a direct I/O).
bool directAligned(std::span<const Member> ms, uint64_t mem_align, uint64_t off_align);

// The iovecs of one extent: one per member (members adjacent in the file and
// in memory share one), and for each gap between two members one that reads
// the gap into `discard` (which must hold the largest gap). iovecsNeeded()
// counts them without building them (at most kMaxIovecs go in one I/O).
size_t iovecsNeeded(std::span<const Member> ms);
void buildIovecs(std::span<const Member> ms, void* discard, std::vector<iovec>& out);
inline constexpr size_t kMaxIovecs = 1024;  // UIO_MAXIOV

// The iovecs that remain of `all` after the first `done` bytes (a short I/O
// resumed for the rest).
void iovecsAfter(std::span<const iovec> all, uint64_t done, std::vector<iovec>& out);

}  // namespace hawser::file
