// Finding the shareable backing of a host range (shm_backing.h).
#include "transport/shm/shm_backing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <vector>

#include "base/host_memory.h"

namespace hawser::shm {

namespace {

struct Vma {
  uint64_t start = 0, end = 0, offset = 0, inode = 0;
  unsigned major = 0, minor = 0;
  bool shared = false;
  std::string path;
};

bool parseLine(const std::string& line, Vma& v) {
  char perms[8] = {};
  int pos = 0;
  if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &v.start, &v.end, perms,
                  &v.offset, &v.major, &v.minor, &v.inode, &pos) < 7)
    return false;
  v.shared = perms[3] == 's';
  v.path = pos > 0 && static_cast<size_t>(pos) <= line.size() ? line.substr(static_cast<size_t>(pos)) : "";
  return true;
}

// A read-write descriptor of the file of `v` (dev, inode), or -1.
int openFileOf(const Vma& v) {
  const dev_t dev = makedev(v.major, v.minor);
  auto same = [&](int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == v.inode;
  };
  // An open descriptor of this process (a memfd its creator kept open).
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int found = -1;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string p = fmt::format("/proc/self/fd/{}", e->d_name);
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0 || st.st_dev != dev || st.st_ino != v.inode) continue;
      found = ::open(p.c_str(), O_RDWR | O_CLOEXEC);  // a new open file, read-write
      if (found >= 0) break;
    }
    ::closedir(d);
    if (found >= 0) return found;
  }
  // The mapping itself (needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
  int fd = ::open(fmt::format("/proc/self/map_files/{:x}-{:x}", v.start, v.end).c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0 && same(fd)) return fd;
  if (fd >= 0) ::close(fd);
  // Its path, while the file has one.
  if (!v.path.empty() && v.path[0] == '/' && v.path.find(" (deleted)") == std::string::npos) {
    fd = ::open(v.path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0 && same(fd)) return fd;
    if (fd >= 0) ::close(fd);
  }
  return -1;
}

}  // namespace

bool findBacking(uint64_t addr, uint64_t len, Backing& out, std::string& why) {
  int fd = -1;
  uint64_t off = 0;
  if (hostmem::backingOf(addr, len, fd, off)) {
    out = Backing{fd, off, "hawser::allocateHostMemory"};
    return true;
  }
  // The mappings that cover the range: all shared, of one file, contiguous
  // in it.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::vector<Vma> cover;
  const uint64_t end = addr + len;
  while (std::getline(maps, line)) {
    Vma v;
    if (!parseLine(line, v) || v.end <= addr) continue;
    if (v.start >= end) break;
    cover.push_back(std::move(v));
  }
  if (cover.empty() || cover.front().start > addr) {
    why = "not mapped";
    return false;
  }
  const Vma& f = cover.front();
  for (size_t i = 0; i < cover.size(); ++i) {
    const Vma& v = cover[i];
    if (!v.shared || v.inode == 0) {
      why = fmt::format("private memory ({})", v.path.empty() ? "anonymous" : v.path);
      return false;
    }
    if (i > 0 && (v.start != cover[i - 1].end || v.inode != f.inode || v.major != f.major || v.minor != f.minor ||
                  v.offset - f.offset != v.start - f.start)) {
      why = "several files, or one file mapped out of order";
      return false;
    }
  }
  if (cover.back().end < end) {
    why = "not mapped to its end";
    return false;
  }
  fd = openFileOf(f);
  if (fd < 0) {
    why = fmt::format("its file ({}) has no open descriptor, path or map_files entry this process can open", f.path);
    return false;
  }
  std::string what = f.path;
  if (what.rfind("/memfd:", 0) == 0) what = what.substr(1);
  out = Backing{fd, f.offset + (addr - f.start), what};
  return true;
}

}  // namespace hawser::shm
