// Pure slicing logic of the file transport (no I/O), unit-tested on its own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hawser/status.h"

namespace hawser::file {

// The part of a request that falls in one backing file.
struct FileSpan {
  uint32_t file = 0;      // index of the backing file in the segment
  uint64_t file_off = 0;  // offset inside that file
  uint64_t len = 0;
  uint64_t req_off = 0;   // offset inside the request (and its local buffer)
};

// Intersects the logical range [offset, offset + length) with the files laid
// end to end (file i covers [sum of lengths before i, + lengths[i])).
// kOutOfRange (message: the range and the segment's span) unless the files
// cover every byte; kInvalidArgument for a zero length.
Status coverRange(std::span<const uint64_t> file_lengths, uint64_t offset, uint64_t length,
                  std::vector<FileSpan>& out);

// One slice: a contiguous piece of one file.
struct Piece {
  uint64_t file_off = 0;
  uint64_t len = 0;
  uint64_t req_off = 0;
  bool buffered = false;  // an unaligned write head/tail, written through the page cache
};

// Cuts a span into slices of at most `max_io` bytes at absolute file offsets
// that are multiples of `max_io` (so only the first and last slices of an
// unaligned request are unaligned). With `write_align` > 1 (an O_DIRECT
// write), the head up to the first `write_align` boundary and the tail after
// the last one become their own `buffered` slices when they are not aligned.
// `max_io` must be a positive multiple of `write_align` when both apply.
void cutSpan(const FileSpan& span, uint64_t max_io, uint64_t write_align, std::vector<Piece>& out);

// The page size assumed for alignment when the file system does not say.
inline constexpr uint64_t kPage = 4096;

inline uint64_t alignDown(uint64_t v, uint64_t a) { return a > 1 ? v - v % a : v; }
inline uint64_t alignUp(uint64_t v, uint64_t a) { return a > 1 ? alignDown(v + a - 1, a) : v; }

}  // namespace hawser::file
