#include "base/segment_desc.h"

#include <algorithm>

namespace hawser {

int SegmentDesc::findBuffer(uint64_t addr, uint64_t len) const {
  // buffers are sorted by addr: the candidate is the last one starting <= addr.
  auto it = std::upper_bound(buffers.begin(), buffers.end(), addr,
                             [](uint64_t a, const BufferDesc& b) { return a < b.addr; });
  if (it == buffers.begin()) return -1;
  --it;
  if (addr - it->addr <= it->length && len <= it->length - (addr - it->addr))
    return static_cast<int>(it - buffers.begin());
  return -1;
}

uint64_t SegmentDesc::fileSpan() const {
  uint64_t n = 0;
  for (auto& f : files) n += f.length;
  return n;
}

}  // namespace hawser
