// The file transport through the public engine API: file segments made of
// several backing files, byte-exact reads and writes (aligned or not), one
// exact error per bad input at submit, descriptor caching. Every case runs
// on the io_uring and the POSIX engine.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log_capture.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "transport/file/file_transport.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

const char* kEnvKeys[] = {"HAWSER_FILE_ENGINE",      "HAWSER_FILE_MAX_IO_SIZE",   "HAWSER_FILE_IO_DEPTH",
                          "HAWSER_FILE_DIRECT",      "HAWSER_FILE_FIXED_BUFFERS", "HAWSER_FILE_CANCEL_GRACE_MS",
                          "HAWSER_FILE_POSIX_THREADS", "HAWSER_FILE_BOUNCE_BUFFERS"};

void clearFileEnv() {
  for (const char* k : kEnvKeys) ::unsetenv(k);
}

// A file of `n` zero bytes at `path`.
bool writeZeros(const std::string& path, size_t n) {
  std::vector<char> zeros(n, 0);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, zeros.data(), n) == static_cast<ssize_t>(n);
  return ::close(fd) == 0 && ok;
}

// Whether files in `dir` get real O_DIRECT I/O (what the transport checks).
bool fsDoesDirectIo(const std::string& dir) {
  std::string p = dir + "/.direct-probe";
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) return false;
  bool direct = true;
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
    direct = sx.stx_dio_mem_align != 0;
  } else {
    struct statfs fs {};
    direct = !(::fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC));
  }
  ::close(fd);
  ::unlink(p.c_str());
  return direct;
}

// Sets FS_IMMUTABLE_FL (no open for writing, even by root) for its lifetime.
struct Immutable {
  explicit Immutable(const std::string& p) : path(p) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    int flags = 0;
    if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
      flags |= FS_IMMUTABLE_FL;
      ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    ::close(fd);
  }
  ~Immutable() {
    if (!ok) return;
    int fd = ::open(path.c_str(), O_RDONLY);
    int flags = 0;
    if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
      flags &= ~FS_IMMUTABLE_FL;
      (void)::ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    if (fd >= 0) ::close(fd);
  }
  std::string path;
  bool ok = false;
};

class FileTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir.path.empty());
    clearFileEnv();
    if (GetParam() == "uring") {
      std::string why = uringUnavailableReason();
      if (!why.empty()) GTEST_SKIP() << "io_uring is not usable on this host: " << why;
    }
    ::setenv("HAWSER_FILE_ENGINE", GetParam().c_str(), 1);
    setExtraEnv();
    engine = std::make_unique<TransferEngine>();
    Status s = engine->init("p2p", "node-a", "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(hasTransport(*engine, "file")) << "file transport with engine " << GetParam() << " did not install";
    s = engine->registerLocalMemory(mem.p, mem.n, "cpu:0", false);
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  void TearDown() override {
    engine.reset();
    clearFileEnv();
  }
  virtual void setExtraEnv() {}

  std::string file(const std::string& name) const { return dir.path + "/" + name; }

  SegmentID openNamed(const std::string& name, const std::vector<FileDesc>& files) {
    Status s = engine->registerFileSegment(name, files);
    EXPECT_TRUE(s.ok()) << s.toString();
    SegmentID seg = kInvalidSegment;
    s = engine->openSegment(name, seg);
    EXPECT_TRUE(s.ok()) << s.toString();
    return seg;
  }

  // One request in its own batch: the submit status, and the task status.
  Status run1(const TransferRequest& r, TransferStatus* st = nullptr) {
    BatchID b;
    Status s = engine->allocateBatchID(1, b);
    if (!s.ok()) return s;
    s = engine->submitTransfer(b, {r});
    if (s.ok()) {
      Status w = engine->waitTransfer(b, std::chrono::seconds(60));
      EXPECT_TRUE(w.ok()) << w.toString();
      TransferStatus t;
      EXPECT_TRUE(engine->getTransferStatus(b, 0, t).ok());
      if (st) *st = t;
    }
    EXPECT_TRUE(engine->freeBatchID(b).ok());
    return s;
  }
  // Runs and expects COMPLETED with every byte.
  void ok1(const TransferRequest& r) {
    TransferStatus st;
    Status s = run1(r, &st);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    ASSERT_EQ(st.transferred_bytes, r.length);
  }

  TempDir dir;
  Buffer mem{16 * MiB};
  std::unique_ptr<TransferEngine> engine;
};

std::string paramName(const ::testing::TestParamInfo<std::string>& i) { return i.param; }

}  // namespace

// The reference's example (two 1 GiB files, request [0.75, 1.25) GiB) scaled
// down to two 1 MiB files.
TEST_P(FileTransportTest, request_spanning_two_files_reads_each_part_from_its_file) {
  ASSERT_TRUE(writeFile(file("a"), MiB, 1));
  ASSERT_TRUE(writeFile(file("b"), MiB, 2));
  SegmentID seg = openNamed("two", {FileDesc{file("a"), MiB, {}}, FileDesc{file("b"), MiB, {}}});
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 3 * MiB / 4, MiB / 2});
  EXPECT_EQ(checkPattern(mem.p, MiB / 4, 1, 3 * MiB / 4), -1);  // tail of a
  EXPECT_EQ(checkPattern(mem.p + MiB / 4, MiB / 4, 2, 0), -1);  // head of b
}

TEST_P(FileTransportTest, request_spanning_three_files_writes_and_reads_every_byte) {
  // Unequal, unaligned file lengths; the request starts and ends mid-file.
  const uint64_t la = 300 * KiB + 5, lb = 64 * KiB + 3, lc = 700 * KiB;
  ASSERT_TRUE(writeFile(file("a"), la, 11));
  ASSERT_TRUE(writeFile(file("b"), lb, 12));
  ASSERT_TRUE(writeFile(file("c"), lc, 13));
  SegmentID seg =
      openNamed("three", {FileDesc{file("a"), la, {}}, FileDesc{file("b"), lb, {}}, FileDesc{file("c"), lc, {}}});
  const uint64_t off = la - 1000, len = 1000 + lb + 5000;
  fillPattern(mem.p, len, 99, 0);
  ok1(TransferRequest{OpCode::kWrite, mem.p, seg, off, len});
  // Each file holds exactly its part, and the bytes around it are untouched.
  auto a = readFile(file("a"), la - 1001, 1001);
  ASSERT_EQ(a.size(), 1001u);
  EXPECT_EQ(checkPattern(a.data(), 1, 11, la - 1001), -1);
  EXPECT_EQ(checkPattern(a.data() + 1, 1000, 99, 0), -1);
  auto b = readFile(file("b"), 0, lb);
  EXPECT_EQ(checkPattern(b.data(), lb, 99, 1000), -1);
  auto c = readFile(file("c"), 0, 5001);
  EXPECT_EQ(checkPattern(c.data(), 5000, 99, 1000 + lb), -1);
  EXPECT_EQ(checkPattern(c.data() + 5000, 1, 13, 5000), -1);
  // And it reads back byte for byte.
  std::memset(mem.p + 4 * MiB, 0, len);
  ok1(TransferRequest{OpCode::kRead, mem.p + 4 * MiB, seg, off, len});
  EXPECT_EQ(checkPattern(mem.p + 4 * MiB, len, 99, 0), -1);
}

TEST_P(FileTransportTest, file_url_segment_reads_and_writes_the_file) {
  ASSERT_TRUE(writeFile(file("f"), 2 * MiB, 5));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("f"), seg).ok());
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 2 * MiB});
  EXPECT_EQ(checkPattern(mem.p, 2 * MiB, 5, 0), -1);
  fillPattern(mem.p, MiB, 6, 0);
  ok1(TransferRequest{OpCode::kWrite, mem.p, seg, MiB, MiB});
  auto back = readFile(file("f"), 0, 2 * MiB);
  EXPECT_EQ(checkPattern(back.data(), MiB, 5, 0), -1);
  EXPECT_EQ(checkPattern(back.data() + MiB, MiB, 6, 0), -1);
}

TEST_P(FileTransportTest, unaligned_offsets_lengths_and_addresses_round_trip) {
  const uint64_t fsize = 2 * MiB + 8192;
  ASSERT_TRUE(writeFile(file("u"), fsize, 7));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("u"), seg).ok());
  const uint64_t addr_offs[] = {0, 1, 512, 4095};
  const uint64_t file_offs[] = {0, 1, 4095, 4096, MiB - 7};
  const uint64_t lens[] = {1, 511, 4096, 8193, MiB + 100};
  uint64_t seed = 1000;
  const auto stats_before = engine->stats();
  for (uint64_t ao : addr_offs)
    for (uint64_t fo : file_offs)
      for (uint64_t len : lens) {
        SCOPED_TRACE(testing::Message() << "addr+" << ao << " file offset " << fo << " length " << len);
        ++seed;
        // Write from a misaligned address...
        char* src = mem.p + ao;
        fillPattern(src, len, seed, 0);
        auto before = readFile(file("u"), 0, fsize);
        ok1(TransferRequest{OpCode::kWrite, src, seg, fo, len});
        auto after = readFile(file("u"), 0, fsize);
        ASSERT_EQ(after.size(), fsize);
        EXPECT_EQ(checkPattern(after.data() + fo, len, seed, 0), -1);
        // ...without touching a byte outside the range.
        EXPECT_TRUE(std::equal(before.begin(), before.begin() + static_cast<long>(fo), after.begin()));
        EXPECT_TRUE(std::equal(before.begin() + static_cast<long>(fo + len), before.end(),
                               after.begin() + static_cast<long>(fo + len)));
        // Read back into a differently misaligned address; guard bytes stay.
        char* dst = mem.p + 8 * MiB + (ao + 3) % 4096;
        std::memset(dst - 1, 0x5c, len + 2);
        ok1(TransferRequest{OpCode::kRead, dst, seg, fo, len});
        EXPECT_EQ(checkPattern(dst, len, seed, 0), -1);
        EXPECT_EQ(static_cast<unsigned char>(dst[-1]), 0x5c);
        EXPECT_EQ(static_cast<unsigned char>(dst[len]), 0x5c);
      }
  // Where the file system does O_DIRECT, misaligned reads went through bounce
  // buffers and misaligned write heads/tails through the page cache.
  if (!fsDoesDirectIo(dir.path)) return;
  const auto stats_after = engine->stats();
  EXPECT_GT(counter(stats_after, "file", "bounce_slices"), counter(stats_before, "file", "bounce_slices"));
  EXPECT_GT(counter(stats_after, "file", "buffered_slices"), counter(stats_before, "file", "buffered_slices"));
  EXPECT_GT(counter(stats_after, "file", "direct_slices"), counter(stats_before, "file", "direct_slices"));
}

TEST_P(FileTransportTest, aligned_request_from_registered_memory_goes_straight_to_the_device) {
  if (!fsDoesDirectIo(dir.path)) GTEST_SKIP() << dir.path << " does not do O_DIRECT I/O";
  ASSERT_TRUE(writeFile(file("d"), 4 * MiB, 8));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("d"), seg).ok());
  auto before = engine->stats();
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4 * MiB});
  EXPECT_EQ(checkPattern(mem.p, 4 * MiB, 8, 0), -1);
  auto after = engine->stats();
  EXPECT_EQ(counter(after, "file", "bounce_slices"), counter(before, "file", "bounce_slices"));
  // 4 MiB at the default 1 MiB max_io_size:
  EXPECT_EQ(counter(after, "file", "direct_slices") - counter(before, "file", "direct_slices"), 4u);
  if (GetParam() == "uring") {
    EXPECT_EQ(counter(after, "file", "uring_ops") - counter(before, "file", "uring_ops"), 4u);
    // The first read asked for the memory's fixed buffer (registration pins
    // nothing); once the background registered it, reads use it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    uint64_t fixed = 0;
    while (fixed != 4 && std::chrono::steady_clock::now() < deadline) {
      before = engine->stats();
      ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4 * MiB});
      fixed = counter(*engine, "file", "fixed_buffer_ops") - counter(before, "file", "fixed_buffer_ops");
    }
    EXPECT_EQ(fixed, 4u);
    EXPECT_EQ(checkPattern(mem.p, 4 * MiB, 8, 0), -1);
  } else {
    EXPECT_EQ(counter(after, "file", "posix_ops") - counter(before, "file", "posix_ops"), 4u);
  }
}

TEST_P(FileTransportTest, local_path_map_entry_for_this_host_wins_over_file_path) {
  ASSERT_TRUE(writeFile(file("here"), MiB, 21));
  ASSERT_TRUE(writeFile(file("default"), MiB, 22));
  SegmentID seg = openNamed(
      "mapped", {FileDesc{file("default"), MiB, {{"node-a", file("here")}, {"node-b", "/elsewhere/x"}}}});
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, MiB});
  EXPECT_EQ(checkPattern(mem.p, MiB, 21, 0), -1);
}

TEST_P(FileTransportTest, no_mapping_for_this_host_and_no_file_path_is_path_not_mapped) {
  SegmentID seg = openNamed("unmapped", {FileDesc{"", MiB, {{"node-b", "/mnt/b/x"}}}});
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
  EXPECT_EQ(s.code(), Code::kPathNotMapped) << s.toString();
  EXPECT_NE(s.message().find("node-a"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("file #0"), std::string::npos) << s.message();
}

TEST_P(FileTransportTest, mapping_only_for_other_hosts_and_missing_file_path_is_path_not_mapped) {
  const std::string missing = file("not-here");
  SegmentID seg = openNamed("other-host", {FileDesc{missing, MiB, {{"node-b", "/mnt/b/x"}}}});
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
  EXPECT_EQ(s.code(), Code::kPathNotMapped) << s.toString();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
}

TEST_P(FileTransportTest, missing_file_is_file_not_found_naming_it) {
  ASSERT_TRUE(writeFile(file("first"), MiB, 1));
  const std::string missing = file("second-missing");
  SegmentID seg = openNamed("gap", {FileDesc{file("first"), MiB, {}}, FileDesc{missing, MiB, {}}});
  // The first file alone is fine...
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, MiB});
  // ...a request reaching into the missing one is refused before any I/O.
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, MiB - 10, 20});
  EXPECT_EQ(s.code(), Code::kFileNotFound) << s.toString();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  // Mapped to a path that does not exist: also not found, naming the mapped path.
  SegmentID seg2 = openNamed("gap2", {FileDesc{file("first"), MiB, {{"node-a", missing}}}});
  s = run1(TransferRequest{OpCode::kWrite, mem.p, seg2, 0, 10});
  EXPECT_EQ(s.code(), Code::kFileNotFound) << s.toString();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
}

TEST_P(FileTransportTest, file_shorter_than_its_declared_length_is_file_too_short) {
  ASSERT_TRUE(writeFile(file("short"), MiB, 1));
  SegmentID seg = openNamed("short", {FileDesc{file("short"), 2 * MiB, {}}});
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
  EXPECT_EQ(s.code(), Code::kFileTooShort) << s.toString();
  EXPECT_NE(s.message().find(file("short")), std::string::npos) << s.message();
}

TEST_P(FileTransportTest, file_truncated_after_open_is_file_too_short_at_submit) {
  ASSERT_TRUE(writeFile(file("t"), 2 * MiB, 1));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("t"), seg).ok());
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});  // descriptor now cached
  ASSERT_EQ(::truncate(file("t").c_str(), MiB), 0);
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
  EXPECT_EQ(s.code(), Code::kFileTooShort) << s.toString();
}

TEST_P(FileTransportTest, request_not_covered_by_the_files_is_out_of_range) {
  ASSERT_TRUE(writeFile(file("a"), MiB, 1));
  ASSERT_TRUE(writeFile(file("b"), MiB, 2));
  SegmentID seg = openNamed("ab", {FileDesc{file("a"), MiB, {}}, FileDesc{file("b"), MiB, {}}});
  Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 2 * MiB - 100, 101});
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  EXPECT_NE(s.message().find("'ab'"), std::string::npos) << s.message();
  s = run1(TransferRequest{OpCode::kWrite, mem.p, seg, 2 * MiB, 1});
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 2 * MiB - 100, 100});
}

TEST_P(FileTransportTest, write_to_an_unwritable_file_is_permission_denied) {
  ASSERT_TRUE(writeFile(file("ro"), MiB, 3));
  std::unique_ptr<Immutable> imm;
  if (::geteuid() == 0) {
    imm = std::make_unique<Immutable>(file("ro"));
    if (!imm->ok) GTEST_SKIP() << "running as root on a file system without the immutable attribute";
  } else {
    ASSERT_EQ(::chmod(file("ro").c_str(), 0444), 0);
  }
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("ro"), seg).ok());
  Status s = run1(TransferRequest{OpCode::kWrite, mem.p, seg, 0, 4096});
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find(file("ro")), std::string::npos) << s.message();
  // Reads need no write access: files open read-only unless a write needs them.
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, MiB});
  EXPECT_EQ(checkPattern(mem.p, MiB, 3, 0), -1);
}

TEST_P(FileTransportTest, read_of_an_unreadable_file_is_permission_denied) {
  ASSERT_TRUE(writeFile(file("secret"), MiB, 3));
  ASSERT_EQ(::chmod(file("secret").c_str(), 0200), 0);
  if (::geteuid() != 0) {
    SegmentID seg;
    ASSERT_TRUE(engine->openSegment("file://" + file("secret"), seg).ok());
    Status s = run1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
    return;
  }
  // Root reads anything: check as an unprivileged user in a child process.
  engine.reset();
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(10);
    TransferEngine e;
    if (!e.init("p2p", "node-a", "127.0.0.1", 0).ok()) _exit(11);
    Buffer m(4096);
    if (!e.registerLocalMemory(m.p, m.n).ok()) _exit(12);
    SegmentID seg;
    if (!e.openSegment("file://" + dir.path + "/secret", seg).ok()) _exit(13);
    BatchID b;
    if (!e.allocateBatchID(1, b).ok()) _exit(14);
    Status s = e.submitTransfer(b, {TransferRequest{OpCode::kRead, m.p, seg, 0, 4096}});
    if (s.code() != Code::kPermissionDenied) _exit(15);
    if (s.message().find("secret") == std::string::npos) _exit(16);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 10) GTEST_SKIP() << "cannot drop privileges here";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "child step " << WEXITSTATUS(st) << " failed";
}

TEST_P(FileTransportTest, refused_request_leaves_the_batch_and_the_files_untouched) {
  ASSERT_TRUE(writeFile(file("a"), MiB, 1));
  SegmentID good;
  ASSERT_TRUE(engine->openSegment("file://" + file("a"), good).ok());
  SegmentID bad = openNamed("bad", {FileDesc{file("missing"), MiB, {}}});
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(4, b).ok());
  fillPattern(mem.p, 4096, 77, 0);
  Status s = engine->submitTransfer(b, {TransferRequest{OpCode::kWrite, mem.p, good, 0, 4096},
                                        TransferRequest{OpCode::kRead, mem.p + MiB, bad, 0, 4096}});
  EXPECT_EQ(s.code(), Code::kFileNotFound) << s.toString();
  TransferStatus st;
  EXPECT_EQ(engine->getTransferStatus(b, 0, st).code(), Code::kInvalidArgument);  // no task was added
  auto content = readFile(file("a"), 0, 4096);
  EXPECT_EQ(checkPattern(content.data(), 4096, 1, 0), -1);  // the good write never ran
  // The batch still works, and the next task is task 0.
  ASSERT_TRUE(engine->submitTransfer(b, {TransferRequest{OpCode::kWrite, mem.p, good, 0, 4096}}).ok());
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(30)).ok());
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_TRUE(engine->freeBatchID(b).ok());
  content = readFile(file("a"), 0, 4096);
  EXPECT_EQ(checkPattern(content.data(), 4096, 77, 0), -1);
}

TEST_P(FileTransportTest, many_requests_and_slices_beyond_the_queue_depth_complete) {
  // 24 requests of 512 KiB + 3 bytes over two files, in one batch.
  const uint64_t each = 13 * MiB / 2;
  ASSERT_TRUE(writeFile(file("x"), each, 31));
  ASSERT_TRUE(writeFile(file("y"), each, 32));
  SegmentID seg = openNamed("xy", {FileDesc{file("x"), each, {}}, FileDesc{file("y"), each, {}}});
  std::vector<TransferRequest> reqs;
  const uint64_t len = MiB / 2 + 3;
  for (uint64_t i = 0; i < 24; ++i) reqs.push_back(TransferRequest{OpCode::kRead, mem.p + i * len, seg, i * len, len});
  auto sts = runBatch(*engine, seg, reqs);
  ASSERT_EQ(sts.size(), reqs.size());
  for (auto& st : sts) {
    EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
    EXPECT_EQ(st.transferred_bytes, len);
  }
  const uint64_t total = 24 * len;
  EXPECT_EQ(checkPattern(mem.p, std::min(total, each), 31, 0), -1);
  if (total > each) {
    EXPECT_EQ(checkPattern(mem.p + each, total - each, 32, 0), -1);
  }
}

// Each engine's file transport counts its own traffic: a second engine in
// the same process sees none of the first one's.
TEST_P(FileTransportTest, two_engines_in_one_process_count_apart) {
  TransferEngine other;
  Status s = other.init("p2p", "node-b", "127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(hasTransport(other, "file"));
  ASSERT_TRUE(writeFile(file("two"), 2 * MiB, 17));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("two"), seg).ok());
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 2 * MiB});
  EXPECT_EQ(checkPattern(mem.p, 2 * MiB, 17, 0), -1);
  fillPattern(mem.p, MiB, 18, 0);
  ok1(TransferRequest{OpCode::kWrite, mem.p, seg, MiB, MiB});
  auto back = readFile(file("two"), MiB, MiB);
  EXPECT_EQ(checkPattern(back.data(), MiB, 18, 0), -1);

  const EngineStats mine = engine->stats(), theirs = other.stats();
  const char* ops = GetParam() == "uring" ? "uring_ops" : "posix_ops";
  EXPECT_GE(counter(mine, "file", ops), 3u);  // 2 MiB read + 1 MiB written, 1 MiB I/Os
  EXPECT_GE(counter(mine, "file", "files_opened"), 2u);  // one descriptor to read, one to write
  EXPECT_EQ(counter(mine, "file", "direct_bytes") + counter(mine, "file", "bounce_bytes") +
                counter(mine, "file", "buffered_bytes"),
            3 * MiB);
  for (const char* key : {"uring_ops", "posix_ops", "files_opened", "files_open", "direct_slices", "bounce_slices",
                          "buffered_slices", "direct_bytes", "bounce_bytes", "buffered_bytes"})
    EXPECT_EQ(counter(theirs, "file", key), 0u) << key;
}

TEST_P(FileTransportTest, close_segment_closes_its_cached_descriptors) {
  ASSERT_TRUE(writeFile(file("c"), MiB, 1));
  const uint64_t open_before = counter(*engine, "file", "files_open");
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + file("c"), seg).ok());
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 0, 4096});
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 4096, 4096});
  const uint64_t opened = counter(*engine, "file", "files_opened");
  ok1(TransferRequest{OpCode::kRead, mem.p, seg, 8192, 4096});
  EXPECT_EQ(counter(*engine, "file", "files_opened"), opened);  // cached: no new open
  EXPECT_EQ(counter(*engine, "file", "files_open"), open_before + 1);  // one read-only descriptor
  ASSERT_TRUE(engine->closeSegment(seg).ok());
  EXPECT_EQ(counter(*engine, "file", "files_open"), open_before);
}

INSTANTIATE_TEST_SUITE_P(Engines, FileTransportTest, ::testing::Values("uring", "posix"), paramName);

// Small slices and a shallow queue: many slices per task, more than the
// queue holds, and short slices at every file boundary.
class FileTransportSmallIo : public FileTransportTest {
  void setExtraEnv() override {
    ::setenv("HAWSER_FILE_MAX_IO_SIZE", "64K", 1);
    ::setenv("HAWSER_FILE_IO_DEPTH", "4", 1);
    ::setenv("HAWSER_FILE_BOUNCE_BUFFERS", "2", 1);
  }
};

TEST_P(FileTransportSmallIo, read_after_write_across_files_is_byte_for_byte) {
  const uint64_t la = MiB + 4096, lb = 3 * MiB - 17, lc = 2 * MiB;
  ASSERT_TRUE(writeFile(file("a"), la, 1));
  ASSERT_TRUE(writeFile(file("b"), lb, 2));
  ASSERT_TRUE(writeFile(file("c"), lc, 3));
  SegmentID seg =
      openNamed("abc", {FileDesc{file("a"), la, {}}, FileDesc{file("b"), lb, {}}, FileDesc{file("c"), lc, {}}});
  const uint64_t total = la + lb + lc;
  // Misaligned everything: address, offset, length; needs many bounce
  // buffers but only 2 exist, so slices wait for them.
  char* src = mem.p + 1;
  fillPattern(src, total - 10, 555, 0);
  ok1(TransferRequest{OpCode::kWrite, src, seg, 3, total - 10});
  char* dst = mem.p + 8 * MiB + 7;
  ok1(TransferRequest{OpCode::kRead, dst, seg, 3, total - 10});
  EXPECT_EQ(checkPattern(dst, total - 10, 555, 0), -1);
  auto a = readFile(file("a"), 0, la);
  EXPECT_EQ(checkPattern(a.data(), 3, 1, 0), -1);
  EXPECT_EQ(checkPattern(a.data() + 3, la - 3, 555, 0), -1);
  auto c = readFile(file("c"), 0, lc);
  EXPECT_EQ(checkPattern(c.data(), lc - 7, 555, la + lb - 3), -1);
  EXPECT_EQ(checkPattern(c.data() + lc - 7, 7, 3, lc - 7), -1);
}

INSTANTIATE_TEST_SUITE_P(Engines, FileTransportSmallIo, ::testing::Values("uring", "posix"), paramName);

// tmpfs (/dev/shm) serves O_DIRECT from the page cache (or refuses it): the
// transport notices and uses the page-cache path, on the POSIX engine in
// auto mode.
TEST(FileTransportTmpfs, file_on_tmpfs_uses_the_page_cache_path) {
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) GTEST_SKIP() << "no /dev/shm here";
  TempDir dir("/dev/shm");
  ASSERT_FALSE(dir.path.empty());
  clearFileEnv();
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 2 * MiB, 41));
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
  Buffer mem(4 * MiB);
  ASSERT_TRUE(e.registerLocalMemory(mem.p, mem.n).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment("file://" + path, seg).ok());
  auto before = e.stats();
  // Unaligned on purpose: no bounce buffer is needed without O_DIRECT.
  std::vector<TransferRequest> reqs{TransferRequest{OpCode::kRead, mem.p + 1, seg, 3, MiB}};
  auto sts = runBatch(e, seg, reqs);
  ASSERT_EQ(sts.size(), 1u);
  EXPECT_EQ(sts[0].s, TransferState::kCompleted) << sts[0].error.toString();
  EXPECT_EQ(checkPattern(mem.p + 1, MiB, 41, 3), -1);
  fillPattern(mem.p, 5000, 42, 0);
  sts = runBatch(e, seg, {TransferRequest{OpCode::kWrite, mem.p, seg, 100, 5000}});
  EXPECT_EQ(sts[0].s, TransferState::kCompleted) << sts[0].error.toString();
  auto back = readFile(path, 100, 5000);
  EXPECT_EQ(checkPattern(back.data(), 5000, 42, 0), -1);
  auto after = e.stats();
  EXPECT_EQ(counter(after, "file", "bounce_slices"), counter(before, "file", "bounce_slices"));
  EXPECT_EQ(counter(after, "file", "direct_slices"), counter(before, "file", "direct_slices"));
  EXPECT_GT(counter(after, "file", "buffered_slices"), counter(before, "file", "buffered_slices"));
  EXPECT_GT(counter(after, "file", "posix_ops"), counter(before, "file", "posix_ops"));
}

TEST(FileTransportConfig, bad_tunable_fails_init_naming_the_key_and_value) {
  clearFileEnv();
  ::setenv("HAWSER_FILE_ENGINE", "turbo", 1);
  TransferEngine e;
  Status s = e.init("p2p", "node-a", "127.0.0.1", 0);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("file.engine"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'turbo'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("HAWSER_FILE_ENGINE"), std::string::npos) << s.message();
  clearFileEnv();
}

namespace {

// `hawser bench --json` against the file at `path` with `args`, a write run
// then a read run: their summaries, each checked to have verified its data
// and gone through the file transport (none when a run failed).
std::vector<nlohmann::json> benchWriteThenRead(const std::string& path, const std::string& args) {
  std::vector<nlohmann::json> runs;
  for (const char* op : {"write", "read"}) {
    std::string out;
    const int rc = sh(hawserBin() + " bench --target file://" + path + " --op " + op + " " + args + " --json", &out);
    EXPECT_EQ(rc, 0) << op << ": " << out;
    if (rc != 0) return {};
    auto j = nlohmann::json::parse(lastLine(out));
    EXPECT_TRUE(j["verified"].get<bool>()) << j.dump();
    EXPECT_EQ(j["transports"], nlohmann::json::array({"file"})) << j.dump();
    runs.push_back(std::move(j));
  }
  return runs;
}

// `hawser bench` against a 4 MiB file of zeros at `path`.
class FileBench : public ::testing::Test {
 protected:
  void SetUp() override {
    clearFileEnv();
    ASSERT_FALSE(dir.path.empty());
    ASSERT_TRUE(writeZeros(path, 4 * MiB)) << path;
  }
  TempDir dir;
  const std::string path = dir.path + "/bench.bin";
};

}  // namespace

// `hawser bench` against a file with several batches in flight per thread
// (--depth: the queue never drains between batches): every slot's bytes are
// checked, both directions.
TEST_F(FileBench, batches_in_flight_per_thread_move_and_verify_every_block) {
  const auto runs = benchWriteThenRead(path, "--block-size 64K --batch-size 4 --threads 2 --depth 3 --total 24M");
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& j : runs) {
    EXPECT_EQ(j["depth"], 3) << j.dump();
    EXPECT_GE(j["bytes"].get<uint64_t>(), 24 * MiB) << j.dump();
    EXPECT_GT(j["cpu_s"].get<double>(), 0.0) << j.dump();
  }
}

// --span shrinks what each thread's requests cycle through: with one block
// per thread (iperf3's working set) the data still checks out both ways,
// and the writes touched those blocks of the file and no other.
TEST_F(FileBench, span_of_one_block_keeps_every_thread_on_its_own_block) {
  const auto runs =
      benchWriteThenRead(path, "--block-size 64K --batch-size 4 --threads 2 --depth 2 --span 64K --total 8M");
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& j : runs) {
    EXPECT_EQ(j["span"], 64 * KiB) << j.dump();
    EXPECT_GE(j["bytes"].get<uint64_t>(), 8 * MiB) << j.dump();
  }
  // Two threads, one block each: the first two blocks of the file hold data,
  // the rest is as it was.
  std::vector<char> back(4 * MiB);
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  ::close(fd);
  for (size_t b = 0; b < back.size() / (64 * KiB); ++b) {
    const char* p = back.data() + b * 64 * KiB;
    const bool zero = std::all_of(p, p + 64 * KiB, [](char c) { return c == 0; });
    EXPECT_EQ(zero, b >= 2) << "block " << b;
  }
  // Spans the requests cannot cover are refused before anything moves.
  std::string out;
  EXPECT_EQ(sh(hawserBin() + " bench --target file://" + path +
                   " --op read --block-size 64K --span 100K --total 1M 2>&1",
               &out),
            2);
  EXPECT_NE(out.find("--span '100K' is not a multiple of --block-size 65536"), std::string::npos) << out;
  EXPECT_EQ(sh(hawserBin() + " bench --target file://" + path +
                   " --op read --block-size 64K --batch-size 4 --depth 2 --span 1M --total 1M 2>&1",
               &out),
            2);
  EXPECT_NE(out.find("--span 1048576 is more than the 8 blocks of 65536 a thread has in flight"), std::string::npos)
      << out;
}

// --huge-pages maps the bench's buffers from the reserved pool; with none
// free it says so and which knob reserves them.
TEST_F(FileBench, huge_pages_come_from_the_reserved_pool_or_the_bench_says_how_to_reserve_them) {
  std::string meminfo;
  ASSERT_EQ(sh("awk '/HugePages_Free/ {print $2}' /proc/meminfo", &meminfo), 0);
  const long free_pages = std::atol(meminfo.c_str());
  std::string out;
  const int rc = sh(hawserBin() + " bench --target file://" + path +
                        " --op read --block-size 1M --batch-size 2 --threads 1 --huge-pages --total 8M --json 2>&1",
                    &out);
  if (free_pages < 1) {
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("--huge-pages"), std::string::npos) << out;
    EXPECT_NE(out.find("nr_hugepages"), std::string::npos) << out;
  } else {
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("\"verified\":true"), std::string::npos) << out;
  }
}
