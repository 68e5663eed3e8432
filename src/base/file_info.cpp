#include "base/file_info.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hawser {

namespace {

// Size of `fd` given its stat; `name` labels messages ("'/dev/sdb'", "fd 7").
Status sizeFromStat(int fd, const struct stat& st, const std::string& name, uint64_t& size, bool* is_block) {
  if (S_ISREG(st.st_mode)) {
    if (is_block) *is_block = false;
    size = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }
  if (!S_ISBLK(st.st_mode)) {
    return Status(Code::kInvalidArgument, name + " is not a regular file or block device");
  }
  if (is_block) *is_block = true;
  uint64_t n = 0;  // st_size is 0 for a block device: ask the device
  if (::ioctl(fd, BLKGETSIZE64, &n) != 0) return errnoStatus(errno, "BLKGETSIZE64 on " + name);
  size = n;
  return Status::OK();
}

}  // namespace

Code codeOfErrno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Code::kFileNotFound;
    case EACCES:
    case EPERM:
      return Code::kPermissionDenied;
    default:
      return Code::kIoError;
  }
}

Status errnoStatus(int err, const std::string& what) {
  return Status(codeOfErrno(err), what + ": " + std::strerror(err));
}

Status fileSize(const std::string& path, uint64_t& size, bool* is_block) {
  const std::string name = "'" + path + "'";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errnoStatus(errno, "stat " + name);
  if (!S_ISBLK(st.st_mode)) return sizeFromStat(-1, st, name, size, is_block);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errnoStatus(errno, "open " + name);
  Status s = sizeFromStat(fd, st, name, size, is_block);
  ::close(fd);
  return s;
}

Status fileSize(int fd, uint64_t& size, bool* is_block) {
  const std::string name = "fd " + std::to_string(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errnoStatus(errno, "fstat " + name);
  return sizeFromStat(fd, st, name, size, is_block);
}

}  // namespace hawser
