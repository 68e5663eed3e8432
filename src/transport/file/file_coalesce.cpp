// Extents from runs (file_coalesce.h).
#include "transport/file/file_coalesce.h"

#include <algorithm>

#include "transport/file/file_plan.h"

namespace hawser::file {

void coalesce(std::vector<RunPart>& parts, const CoalesceRule& rule, std::vector<Extent>& extents,
              std::vector<Member>& members) {
  auto byOffset = [](const RunPart& a, const RunPart& b) { return a.file_off < b.file_off; };
  if (!std::is_sorted(parts.begin(), parts.end(), byOffset)) std::stable_sort(parts.begin(), parts.end(), byOffset);
  // Gaps are for reads; an O_DIRECT write's head/tail rule assumes none.
  const uint64_t max_gap = rule.write_align > 1 ? 0 : rule.max_gap;
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < parts.size()) {
    // The chain parts[i, j): [lo, hi) of the file.
    const uint64_t lo = parts[i].file_off;
    uint64_t hi = lo + parts[i].len;
    size_t j = i + 1;
    while (rule.join && j < parts.size() && parts[j].file_off >= hi && parts[j].file_off - hi <= max_gap) {
      hi = parts[j].file_off + parts[j].len;
      ++j;
    }
    pieces.clear();
    cutSpan(FileSpan{0, lo, hi - lo, 0}, rule.max_io, rule.write_align, pieces);
    // Pieces and parts are both in file order: walk them together.
    size_t k = i;
    for (const Piece& p : pieces) {
      const uint64_t p_end = p.file_off + p.len;
      Extent e;
      e.first = static_cast<uint32_t>(members.size());
      e.buffered = p.buffered;
      while (k < j && parts[k].file_off < p_end) {
        const RunPart& r = parts[k];
        const uint64_t r_end = r.file_off + r.len;
        const uint64_t a = std::max(r.file_off, p.file_off), b = std::min(r_end, p_end);
        if (a < b) members.push_back(Member{r.index, a, b - a, r.mem + (a - r.file_off)});
        if (r_end > p_end) break;  // the rest of this part goes with the next piece
        ++k;
      }
      e.count = static_cast<uint32_t>(members.size() - e.first);
      if (e.count == 0) continue;  // the piece lies in a gap
      const Member& last = members.back();
      e.file_off = members[e.first].file_off;
      e.len = last.file_off + last.len - e.file_off;
      extents.push_back(e);
    }
    i = j;
  }
}

bool directAligned(std::span<const Member> ms, uint64_t mem_align, uint64_t off_align) {
  for (const Member& m : ms)
    if (m.mem % mem_align != 0 || m.file_off % off_align != 0 || m.len % off_align != 0) return false;
  return true;
}

namespace {
// Member i continues member i-1 in the file and in memory: one iovec.
bool continues(const Member& prev, const Member& m) {
  return m.file_off == prev.file_off + prev.len && m.mem == prev.mem + prev.len;
}
}  // namespace

size_t iovecsNeeded(std::span<const Member> ms) {
  size_t n = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (i > 0 && continues(ms[i - 1], ms[i])) continue;
    n += (i > 0 && ms[i].file_off > ms[i - 1].file_off + ms[i - 1].len) ? 2 : 1;
  }
  return n;
}

void buildIovecs(std::span<const Member> ms, void* discard, std::vector<iovec>& out) {
  out.clear();
  for (size_t i = 0; i < ms.size(); ++i) {
    const Member& m = ms[i];
    if (i > 0) {
      const uint64_t prev_end = ms[i - 1].file_off + ms[i - 1].len;
      if (continues(ms[i - 1], m)) {
        out.back().iov_len += m.len;
        continue;
      }
      if (m.file_off > prev_end) out.push_back(iovec{discard, m.file_off - prev_end});
    }
    out.push_back(iovec{reinterpret_cast<void*>(m.mem), m.len});
  }
}

void iovecsAfter(std::span<const iovec> all, uint64_t done, std::vector<iovec>& out) {
  out.clear();
  for (const iovec& v : all) {
    if (done >= v.iov_len) {
      done -= v.iov_len;
      continue;
    }
    out.push_back(iovec{static_cast<char*>(v.iov_base) + done, v.iov_len - done});
    done = 0;
  }
}

}  // namespace hawser::file
