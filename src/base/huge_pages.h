// Shared memory on 2 MiB pages: where the kernel can, the pages of a memfd
// that hawser allocates (allocateHostMemory) are huge, and every process that
// maps such a file places its mapping so that the kernel maps them with one
// page-table entry each.
//
// Why: a copy through 4 KiB pages that lie scattered in physical memory runs
// slower than one through contiguous memory, by where the pages fall in the
// caches' sets as well as by TLB misses. Four threads copying 4 MiB a side on
// an H100 host moved 120-157 GB/s through scattered pages and 161-164 GB/s
// through nearly contiguous ones (bench/memfd_placement.sh, docs/shm.md
// "Whose pages"). A huge page is 2 MiB of contiguous memory.
//
// How: shmem gives 4 KiB pages unless /sys/kernel/mm/transparent_hugepage/
// shmem_enabled allows more (it is "never" on the hosts measured), but
// MADV_COLLAPSE (Linux 6.1) builds a huge page for a populated, aligned 2 MiB
// range whatever that setting says, short of "deny". Best effort throughout:
// where the kernel refuses, the memory stays on 4 KiB pages, as before.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hawser::huge_pages {

// The huge page size of this kernel (transparent_hugepage/hpage_pmd_size),
// 2 MiB where it does not say.
size_t pageBytes();

// mmap(nullptr, len, prot, MAP_SHARED, fd, offset), at an address congruent
// to `offset` modulo pageBytes() when len is at least one huge page, so that
// the file's huge pages can be mapped whole (where the file refuses that
// placement, hugetlbfs of 1 GiB pages, wherever the kernel puts it).
// MAP_FAILED with errno as mmap.
void* mapShared(int fd, uint64_t offset, size_t len, int prot);

// Backs every whole huge page of [p, p + len) (a new shared mapping of a
// memfd, as mapShared placed it at offset 0) with a huge page: touches its
// first byte and collapses it (MADV_COLLAPSE). Stops at the first refusal;
// does nothing when len is more than this process could back now
// (MemAvailable, or what its cgroup's memory.max leaves): such memory is
// left to be backed at first touch rather than pushing the host into its
// out-of-memory killer here. Returns the bytes so backed; `why`, when
// given, says why not all.
size_t collapse(char* p, size_t len, const char** why = nullptr);

}  // namespace hawser::huge_pages
