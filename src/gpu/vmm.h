// CUDA virtual memory shared between processes by file descriptor: memory
// made with cuMemCreate (requesting CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
// and mapped with cuMemMap, as PyTorch's expandable segments allocate it,
// has no legacy IPC handle (cuIpcGetMemHandle refuses it). Its owner
// exports each physical allocation behind a range as a POSIX fd
// (cuMemExportToShareableHandle); a peer that received the fds (over a Unix
// socket: SCM_RIGHTS) imports them (cuMemImportFromShareableHandle), maps
// them back to back in an address range of its own (cuMemAddressReserve,
// cuMemMap) and makes that range accessible to its GPUs (cuMemSetAccess).
// docs/nvlink.md, "VMM memory by file descriptor".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpu/cuda_driver.h"
#include "hawser/status.h"

namespace hawser::gpu::vmm {

// One mapping of a range: a physical allocation mapped whole at offset `at`
// of the range, `size` bytes, and its exported fd (-1 once handed on).
struct Piece {
  uint64_t at = 0;
  uint64_t size = 0;
  int fd = -1;
};

// Whether the driver has the calls of exportRange and importRange; `why`
// says which it lacks.
bool supported(const CudaDriver* d, std::string& why);

// The mappings that hold [addr, addr + len) of mapped memory (cuMemMap),
// which must follow each other without a gap: `base` (the first mapping's
// start), `size` (up to the last one's end) and one exported fd per
// mapping (the caller closes them). kNotSupported naming the cause when the
// memory cannot be exported (a driver without the calls, an allocation made
// without the POSIX fd handle type). Needs GPU `device`'s context: binds it
// for the call and puts the caller's back.
Status exportRange(const CudaDriver* d, int device, const void* addr, size_t len, uint64_t& base, uint64_t& size,
                   std::vector<Piece>& pieces);

// Imports `pieces` (their fds stay the caller's) into a new reservation of
// `size` bytes, each at its offset, readable and writable by GPU `device`
// (required) and by every other GPU of `also` that may reach it (tried:
// peers without a path are left out). `va`: the range's start here.
Status importRange(const CudaDriver* d, int device, std::span<const Piece> pieces, uint64_t size,
                   std::span<const int> also, uint64_t& va);

// Unmaps a range importRange made (its allocations released with it) and
// frees its addresses.
Status releaseRange(const CudaDriver* d, int device, uint64_t va, uint64_t size);

}  // namespace hawser::gpu::vmm
