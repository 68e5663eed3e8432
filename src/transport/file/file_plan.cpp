#include "transport/file/file_plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace hawser::file {

Status coverRange(std::span<const uint64_t> file_lengths, uint64_t offset, uint64_t length,
                  std::vector<FileSpan>& out) {
  out.clear();
  if (length == 0) return {Code::kInvalidArgument, "length is 0"};
  uint64_t span = 0;
  for (uint64_t l : file_lengths) {
    if (span + l < span) return {Code::kOutOfRange, "the segment's file lengths overflow 64 bits"};
    span += l;
  }
  if (offset + length < offset || offset + length > span)
    return {Code::kOutOfRange,
            fmt::format("range [{}, {}) (target_offset {}, length {}) is not covered by the segment's {} file(s), "
                        "which span [0, {})",
                        offset, offset + length < offset ? UINT64_MAX : offset + length, offset, length,
                        file_lengths.size(), span)};
  const uint64_t end = offset + length;
  uint64_t base = 0;
  for (size_t i = 0; i < file_lengths.size() && base < end; ++i) {
    const uint64_t flen = file_lengths[i];
    const uint64_t fend = base + flen;
    if (flen > 0 && fend > offset) {
      uint64_t lo = std::max(offset, base);
      uint64_t hi = std::min(end, fend);
      out.push_back(FileSpan{static_cast<uint32_t>(i), lo - base, hi - lo, lo - offset});
    }
    base = fend;
  }
  return Status::OK();
}

static void cutAtMaxIo(uint64_t file_off, uint64_t len, uint64_t req_off, uint64_t max_io,
                       std::vector<Piece>& out) {
  uint64_t off = file_off;
  const uint64_t end = file_off + len;
  while (off < end) {
    uint64_t next = max_io ? std::min(end, alignDown(off, max_io) + max_io) : end;
    out.push_back(Piece{off, next - off, req_off + (off - file_off), false});
    off = next;
  }
}

void cutSpan(const FileSpan& s, uint64_t max_io, uint64_t write_align, std::vector<Piece>& out) {
  if (s.len == 0) return;
  const uint64_t end = s.file_off + s.len;
  if (write_align <= 1) {
    cutAtMaxIo(s.file_off, s.len, s.req_off, max_io, out);
    return;
  }
  uint64_t mid_lo = alignUp(s.file_off, write_align);
  uint64_t mid_hi = alignDown(end, write_align);
  if (mid_lo >= mid_hi) {  // no aligned block inside: all of it through the page cache
    out.push_back(Piece{s.file_off, s.len, s.req_off, true});
    return;
  }
  if (mid_lo > s.file_off) out.push_back(Piece{s.file_off, mid_lo - s.file_off, s.req_off, true});
  cutAtMaxIo(mid_lo, mid_hi - mid_lo, s.req_off + (mid_lo - s.file_off), max_io, out);
  if (end > mid_hi) out.push_back(Piece{mid_hi, end - mid_hi, s.req_off + (mid_hi - s.file_off), true});
}

}  // namespace hawser::file
