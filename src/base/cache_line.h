// How far apart data that different threads write must lie for neither to
// slow the other: 128 bytes, not the 64 of a cache line. Intel's and AMD's
// cores fetch lines in aligned pairs (the adjacent-line / spatial
// prefetcher), so two threads writing the two halves of one 128-byte pair
// still pass it between their cores. Measured on the dev VM (AMD EPYC):
// two shm submitting threads whose metric cells were 64 bytes apart moved
// 4 x 64 KiB batches 10 % slower than with them 128 apart (docs/shm.md,
// "Counters 128 bytes apart").
#pragma once

#include <cstddef>

namespace hawser {

inline constexpr std::size_t kFalseSharingBytes = 128;

}  // namespace hawser
