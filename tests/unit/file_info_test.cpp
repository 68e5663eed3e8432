// base/file_info: the size of a regular file and of a block device, and the
// Code of each errno (missing path, path through a non-directory, no
// permission, not a file at all).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "base/file_info.h"
#include "common/util.h"

namespace hawser {
namespace {

void writeBytes(const std::string& path, size_t n) {
  std::ofstream(path, std::ios::binary) << std::string(n, 'x');
}

TEST(FileInfo, errno_maps_to_the_documented_code) {
  EXPECT_EQ(codeOfErrno(ENOENT), Code::kFileNotFound);
  EXPECT_EQ(codeOfErrno(ENOTDIR), Code::kFileNotFound);
  EXPECT_EQ(codeOfErrno(EACCES), Code::kPermissionDenied);
  EXPECT_EQ(codeOfErrno(EPERM), Code::kPermissionDenied);
  EXPECT_EQ(codeOfErrno(EIO), Code::kIoError);
  EXPECT_EQ(codeOfErrno(ENOSPC), Code::kIoError);
  EXPECT_EQ(codeOfErrno(EISDIR), Code::kIoError);
  EXPECT_EQ(codeOfErrno(0), Code::kIoError);
  Status s = errnoStatus(ENOENT, "open '/x'");
  EXPECT_EQ(s.code(), Code::kFileNotFound);
  EXPECT_EQ(s.message(), std::string("open '/x': ") + std::strerror(ENOENT));
}

TEST(FileInfo, regular_file_size_is_its_length) {
  test::TempDir dir;
  const std::string path = dir.path + "/f";
  writeBytes(path, 12345);
  uint64_t n = 0;
  bool block = true;
  ASSERT_TRUE(fileSize(path, n, &block).ok());
  EXPECT_EQ(n, 12345u);
  EXPECT_FALSE(block);

  writeBytes(dir.path + "/empty", 0);
  ASSERT_TRUE(fileSize(dir.path + "/empty", n).ok());
  EXPECT_EQ(n, 0u);

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  n = 0;
  block = true;
  EXPECT_TRUE(fileSize(fd, n, &block).ok());
  ::close(fd);
  EXPECT_EQ(n, 12345u);
  EXPECT_FALSE(block);
}

TEST(FileInfo, symlink_is_followed) {
  test::TempDir dir;
  writeBytes(dir.path + "/target", 77);
  ASSERT_EQ(::symlink((dir.path + "/target").c_str(), (dir.path + "/link").c_str()), 0);
  uint64_t n = 0;
  ASSERT_TRUE(fileSize(dir.path + "/link", n).ok());
  EXPECT_EQ(n, 77u);
}

TEST(FileInfo, missing_path_is_file_not_found_naming_the_path) {
  test::TempDir dir;
  uint64_t n = 0;
  Status s = fileSize(dir.path + "/missing", n);
  EXPECT_EQ(s.code(), Code::kFileNotFound);
  EXPECT_NE(s.message().find(dir.path + "/missing"), std::string::npos) << s.message();
}

TEST(FileInfo, path_through_a_regular_file_is_file_not_found) {
  test::TempDir dir;
  writeBytes(dir.path + "/f", 1);
  uint64_t n = 0;
  EXPECT_EQ(fileSize(dir.path + "/f/below", n).code(), Code::kFileNotFound);  // ENOTDIR
}

TEST(FileInfo, directory_and_fifo_are_invalid_argument) {
  test::TempDir dir;
  uint64_t n = 0;
  Status s = fileSize(dir.path, n);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("not a regular file or block device"), std::string::npos) << s.message();
  ASSERT_EQ(::mkfifo((dir.path + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(fileSize(dir.path + "/fifo", n).code(), Code::kInvalidArgument);
  EXPECT_EQ(fileSize("/dev/null", n).code(), Code::kInvalidArgument);  // character device
}

TEST(FileInfo, closed_descriptor_is_io_error) {
  uint64_t n = 0;
  EXPECT_EQ(fileSize(-1, n).code(), Code::kIoError);  // EBADF
}

// The unprivileged side runs in a child that drops to uid/gid 65534: root
// (as in CI containers) is never refused by permission bits.
TEST(FileInfo, path_behind_an_unsearchable_directory_is_permission_denied) {
  test::TempDir dir;
  const std::string locked = dir.path + "/locked";
  ASSERT_EQ(::mkdir(locked.c_str(), 0700), 0);
  writeBytes(locked + "/f", 10);
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
    uint64_t n = 0;
    Status s = fileSize(locked + "/f", n);
    ::chmod(locked.c_str(), 0700);
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
    return;
  }
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    uint64_t n = 0;
    ::_exit(static_cast<int>(fileSize(locked + "/f", n).code()));
  }
  int wst = 0;
  ASSERT_EQ(::waitpid(pid, &wst, 0), pid);
  ASSERT_TRUE(WIFEXITED(wst));
  if (WEXITSTATUS(wst) == 100) GTEST_SKIP() << "cannot drop privileges to uid 65534 here";
  EXPECT_EQ(static_cast<Code>(WEXITSTATUS(wst)), Code::kPermissionDenied);
}

// A block device's st_size is 0: the size must come from BLKGETSIZE64. The
// expected value is the kernel's own count in /sys/class/block/<dev>/size
// (512-byte sectors).
TEST(FileInfo, block_device_size_comes_from_the_device) {
  for (const char* dev : {"vda", "sda", "nvme0n1", "xvda", "zram0", "loop0"}) {
    const std::string path = std::string("/dev/") + dev;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::ifstream sys(std::string("/sys/class/block/") + dev + "/size");
    uint64_t sectors = 0;
    if (!(sys >> sectors)) {
      ::close(fd);
      continue;
    }
    uint64_t n = 1, m = 1;
    bool block = false, fd_block = false;
    Status s = fileSize(path, n, &block);
    Status t = fileSize(fd, m, &fd_block);
    ::close(fd);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(t.ok()) << t.toString();
    EXPECT_TRUE(block);
    EXPECT_TRUE(fd_block);
    EXPECT_EQ(n, sectors * 512) << path;
    EXPECT_EQ(m, sectors * 512) << path;
    return;
  }
  GTEST_SKIP() << "no readable block device (/dev/vda, sda, nvme0n1, xvda, zram0, loop0) on this machine";
}

}  // namespace
}  // namespace hawser
