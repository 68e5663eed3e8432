#include "base/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it
#endif

namespace hawser::huge_pages {

size_t pageBytes() {
  static const size_t bytes = [] {
    size_t n = 0;
    if (std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "re")) {
      unsigned long long v = 0;
      if (std::fscanf(f, "%llu", &v) == 1 && v >= 4096 && (v & (v - 1)) == 0) n = static_cast<size_t>(v);
      std::fclose(f);
    }
    return n ? n : size_t{2} << 20;
  }();
  return bytes;
}

namespace {

// The first number in `path` after `key` ("" : the file's first word);
// false when there is none ("max" of memory.max included).
bool readNumber(const char* path, const char* key, uint64_t& out) {
  std::FILE* f = std::fopen(path, "re");
  if (!f) return false;
  const size_t k = std::strlen(key);
  char line[256];
  unsigned long long v = 0;
  bool found = false;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, k) != 0) continue;
    found = std::sscanf(line + k, "%llu", &v) == 1;
    break;
  }
  std::fclose(f);
  if (found) out = v;
  return found;
}

// What this process could back now (see collapse); UINT64_MAX when
// neither can be read.
uint64_t availableBytes() {
  uint64_t avail = std::numeric_limits<uint64_t>::max(), v = 0, used = 0;
  if (readNumber("/proc/meminfo", "MemAvailable:", v)) avail = v * 1024;
  if (readNumber("/sys/fs/cgroup/memory.max", "", v) && readNumber("/sys/fs/cgroup/memory.current", "", used))
    avail = std::min(avail, v > used ? v - used : 0);
  return avail;
}

}  // namespace

void* mapShared(int fd, uint64_t offset, size_t len, int prot) {
  const size_t huge = pageBytes();
  if (len < huge) return ::mmap(nullptr, len, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
  // Reserve a huge page more than needed, put the file where its offset
  // falls on a huge page boundary, give back the rest.
  const size_t span = len + huge;
  void* r = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return ::mmap(nullptr, len, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(r);
  const uintptr_t want = static_cast<uintptr_t>(offset % huge);
  uintptr_t at = (lo - want + huge - 1) / huge * huge + want;
  if (at < lo) at += huge;
  void* m = ::mmap(reinterpret_cast<void*>(at), len, prot, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) {
    // A file that wants another placement (hugetlbfs of 1 GiB pages): the
    // kernel's own choice.
    ::munmap(r, span);
    return ::mmap(nullptr, len, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
  }
  if (at > lo) ::munmap(r, at - lo);
  if (at + len < lo + span) ::munmap(reinterpret_cast<void*>(at + len), lo + span - (at + len));
  return m;
}

size_t collapse(char* p, size_t len, const char** why) {
  const size_t huge = pageBytes();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (a + huge - 1) / huge * huge, end = (a + len) / huge * huge;
  if (first < end && len > availableBytes()) {
    if (why) *why = "more than the memory available (MemAvailable, the cgroup's memory.max): backed at first touch";
    return 0;
  }
  size_t done = 0;
  for (uintptr_t c = first; c < end; c += huge) {
    // One byte in: MADV_COLLAPSE refuses a range with no page at all.
    *reinterpret_cast<volatile char*>(c) = 0;
    if (::madvise(reinterpret_cast<void*>(c), huge, MADV_COLLAPSE) != 0) {
      if (why)
        *why = errno == EINVAL   ? "the kernel cannot collapse shmem into huge pages (MADV_COLLAPSE needs Linux 6.1 "
                                   "and transparent_hugepage/shmem_enabled other than 'deny')"
               : errno == EPERM  ? "MADV_COLLAPSE is not permitted here"
                                 : "no free huge page (memory fragmented or limited)";
      return done;
    }
    done += huge;
  }
  if (why) *why = first >= end ? "smaller than a huge page" : "";
  return done;
}

}  // namespace hawser::huge_pages
