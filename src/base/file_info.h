// What the kernel says about a backing file: its size (a regular file's
// st_size, a block device's BLKGETSIZE64) and the hawser Code of an errno.
// The one place that stats a path or an fd for a size and maps errno.
#pragma once

#include <cstdint>
#include <string>

#include "hawser/status.h"

namespace hawser {

// ENOENT, ENOTDIR -> kFileNotFound; EACCES, EPERM -> kPermissionDenied;
// anything else (0 included) -> kIoError.
Code codeOfErrno(int err);

// {codeOfErrno(err), "<what>: <strerror(err)>"}.
Status errnoStatus(int err, const std::string& what);

// Size in bytes of the regular file or block device at `path` (following
// symbolic links). `is_block` (optional) tells which it was. Errors: the
// errno of stat/open/ioctl mapped by codeOfErrno, kInvalidArgument for
// anything else (directory, FIFO, socket, character device). Messages name
// the path and the failing call.
Status fileSize(const std::string& path, uint64_t& size, bool* is_block = nullptr);

// The same for an open descriptor (fstat; BLKGETSIZE64 on that fd).
Status fileSize(int fd, uint64_t& size, bool* is_block = nullptr);

}  // namespace hawser
