// How far apart data that different threads write must lie for neither to
// slow the other: 128 bytes, not the 64 of a cache line. Intel's and AMD's
// cores fetch lines in aligned pairs (the adjacent-line / spatial
// prefetcher), so two threads writing the two halves of one 128-byte pair
// still pass it between their cores. Measured on the dev VM (AMD EPYC):
// two shm submitting threads moved 4 x 64 KiB batches at 123 GB/s with
// their metric cells 64 bytes apart, 153 GB/s with them 128 apart
// (docs/shm.md, "Threads' counters 128 bytes apart").
#pragma once

#include <cstddef>

namespace hawser {

inline constexpr std::size_t kFalseSharingBytes = 128;

}  // namespace hawser
