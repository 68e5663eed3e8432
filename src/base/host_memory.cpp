// allocateHostMemory / freeHostMemory (hawser/host_memory.h) and the
// allocator's record (base/host_memory.h): each allocation is a memfd of its
// own, mapped shared.
#include "base/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>

#include "base/config.h"
#include "base/huge_pages.h"
#include "base/log.h"
#include "hawser/host_memory.h"

namespace hawser {

namespace {

struct Allocation {
  uint64_t bytes = 0;
  int fd = -1;
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::map<uint64_t, Allocation>& allocations() {  // by address
  static auto* m = new std::map<uint64_t, Allocation>();  // outlives static destructors
  return *m;
}

}  // namespace

Status allocateHostMemory(size_t bytes, void** out) {
  if (!out) return {Code::kInvalidArgument, "allocateHostMemory: out is null"};
  *out = nullptr;
  if (bytes == 0) return {Code::kInvalidArgument, "allocateHostMemory: bytes is 0"};
  bool huge = true;
  if (Status c = Config::fromEnv().getBool("host_memory.huge_pages", huge); !c.ok())
    return {c.code(), "allocateHostMemory: " + c.message()};
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t size = (bytes + page - 1) / page * page;
  const int fd = ::memfd_create(fmt::format("hawser-host-{}", size).c_str(), MFD_CLOEXEC);
  if (fd < 0) return {Code::kUnavailable, fmt::format("allocateHostMemory: memfd_create: {}", std::strerror(errno))};
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    Status s{Code::kUnavailable, fmt::format("allocateHostMemory: ftruncate to {} bytes: {}", size, std::strerror(errno))};
    ::close(fd);
    return s;
  }
  void* p = huge ? huge_pages::mapShared(fd, 0, size, PROT_READ | PROT_WRITE)
                 : ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s{Code::kUnavailable, fmt::format("allocateHostMemory: mmap of {} bytes: {}", size, std::strerror(errno))};
    ::close(fd);
    return s;
  }
  if (huge) {
    const char* why = "";
    const size_t backed = huge_pages::collapse(static_cast<char*>(p), size, &why);
    if (backed < size / huge_pages::pageBytes() * huge_pages::pageBytes())
      HLOG_DEBUG("allocateHostMemory: {} of {} bytes on huge pages: {}", backed, size, why);
  }
  {
    std::lock_guard lk(mu());
    allocations()[reinterpret_cast<uint64_t>(p)] = Allocation{size, fd};
  }
  *out = p;
  return Status::OK();
}

Status freeHostMemory(void* ptr) {
  Allocation a;
  {
    std::lock_guard lk(mu());
    auto it = allocations().find(reinterpret_cast<uint64_t>(ptr));
    if (it == allocations().end())
      return {Code::kInvalidArgument, fmt::format("freeHostMemory: {} was not given by allocateHostMemory", ptr)};
    a = it->second;
    allocations().erase(it);
  }
  ::munmap(ptr, a.bytes);
  ::close(a.fd);
  return Status::OK();
}

bool hostmem::backingOf(uint64_t addr, uint64_t len, int& fd, uint64_t& offset) {
  std::lock_guard lk(mu());
  auto& all = allocations();
  auto it = all.upper_bound(addr);
  if (it == all.begin()) return false;
  --it;
  const uint64_t base = it->first, size = it->second.bytes;
  if (addr - base >= size || len > size - (addr - base)) return false;
  fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return false;
  offset = addr - base;
  return true;
}

}  // namespace hawser
