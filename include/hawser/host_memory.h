// Host memory meant for transfer. An engine registers any host memory, but a
// peer engine of this host can map only memory whose pages are shareable:
// what these calls give (each allocation a memfd of its own, mapped shared)
// is mapped once by such a peer and copied with plain memory copies, where
// private memory (malloc, anonymous mappings) takes cross-memory attach, a
// system call per copy (docs/shm.md). Use it like any memory: register it
// (registerLocalMemory), transfer, unregister, then free it here.
#pragma once

#include <cstddef>

#include "hawser/status.h"

namespace hawser {

// `bytes` (> 0, rounded up to pages) of zeroed host memory, page-aligned.
// Each whole 2 MiB of it is backed by a huge page at once where the kernel
// can (Linux 6.1 and later; config host_memory.huge_pages, default true):
// copies through contiguous memory run faster, here and in shm peers. The
// memory is then backed when allocated, not at first touch (the zeroing is
// paid here: about as long as touching it all would take).
// kInvalidArgument for 0 or a bad HAWSER_HOST_MEMORY_HUGE_PAGES; kUnavailable
// where the kernel refuses (the reason).
Status allocateHostMemory(size_t bytes, void** out);
// Frees what allocateHostMemory gave at exactly `ptr`; kInvalidArgument
// for any other address (nothing is freed).
Status freeHostMemory(void* ptr);

}  // namespace hawser
