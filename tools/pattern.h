// Deterministic data for verification: the byte at logical offset `off`
// under `seed`. Fill/check work a 64-bit word at a time (tools/pattern.cpp,
// compiled optimized in every build: the sanitizer builds' tests fill and
// check GiBs of it, which at -O0 took half of a suite case's time).
#pragma once

#include <cstdint>

namespace hawser::tools {

inline uint64_t patternWord(uint64_t seed, uint64_t word_index) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + word_index;
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  return x;
}

// Fills [buf, +len) with the pattern of logical offsets [off, +len).
void fillPattern(void* buf, uint64_t len, uint64_t seed, uint64_t off);

// Offset of the first bad byte within buf, or -1.
int64_t checkPattern(const void* buf, uint64_t len, uint64_t seed, uint64_t off);

}  // namespace hawser::tools
