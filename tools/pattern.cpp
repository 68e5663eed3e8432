// The verification pattern (pattern.h), a 64-bit word at a time.
#include "tools/pattern.h"

#include <cstring>

namespace hawser::tools {

void fillPattern(void* buf, uint64_t len, uint64_t seed, uint64_t off) {
  auto* p = static_cast<unsigned char*>(buf);
  uint64_t i = 0;
  while (i < len && ((off + i) & 7)) {
    uint64_t w = patternWord(seed, (off + i) >> 3);
    p[i] = static_cast<unsigned char>(w >> (((off + i) & 7) * 8));
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w = patternWord(seed, (off + i) >> 3);
    std::memcpy(p + i, &w, 8);
  }
  for (; i < len; ++i) {
    uint64_t w = patternWord(seed, (off + i) >> 3);
    p[i] = static_cast<unsigned char>(w >> (((off + i) & 7) * 8));
  }
}

int64_t checkPattern(const void* buf, uint64_t len, uint64_t seed, uint64_t off) {
  auto* p = static_cast<const unsigned char*>(buf);
  uint64_t i = 0;
  auto byteAt = [&](uint64_t k) {
    return static_cast<unsigned char>(patternWord(seed, (off + k) >> 3) >> (((off + k) & 7) * 8));
  };
  while (i < len && ((off + i) & 7)) {
    if (p[i] != byteAt(i)) return static_cast<int64_t>(i);
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w = patternWord(seed, (off + i) >> 3), got;
    std::memcpy(&got, p + i, 8);
    if (got != w)
      for (uint64_t k = i; k < i + 8; ++k)
        if (p[k] != byteAt(k)) return static_cast<int64_t>(k);
  }
  for (; i < len; ++i)
    if (p[i] != byteAt(i)) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace hawser::tools
