// I/O that is still running: the file transport must never let go of memory
// an I/O references, must cancel the siblings of a failed slice, must
// quarantine what does not stop, and must not hang when a file shrinks under
// a running batch.
//
// To hold an I/O in the kernel deterministically, the destination memory is
// managed by userfaultfd: the kernel thread doing the read blocks on the
// missing page until the test fills it.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <vector>

#include "common/util.h"
#include "hawser/engine.h"
#include "transport/file/file_transport.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr size_t kPage = 4096;

// Anonymous memory whose pages stay missing until fill(): whoever touches one
// blocks in the kernel.
struct Uffd {
  ~Uffd() {
    if (base) ::munmap(base, len);
    if (fd >= 0) ::close(fd);
  }
  // false: userfaultfd is not available to this process.
  bool open(size_t pages) {
    fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd < 0) return false;
    uffdio_api api{};
    api.api = UFFD_API;
    if (::ioctl(fd, UFFDIO_API, &api) != 0) return false;
    len = pages * kPage;
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    base = static_cast<char*>(p);
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<uint64_t>(base);
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    return ::ioctl(fd, UFFDIO_REGISTER, &reg) == 0;
  }
  // Maps page `i` (zeros), waking any thread blocked on it.
  bool fill(size_t i) {
    static char zeros[kPage];
    uffdio_copy c{};
    c.dst = reinterpret_cast<uint64_t>(base + i * kPage);
    c.src = reinterpret_cast<uint64_t>(zeros);
    c.len = kPage;
    return ::ioctl(fd, UFFDIO_COPY, &c) == 0 || errno == EEXIST;
  }
  // Waits until some thread has faulted on page `i`.
  bool waitFault(size_t i, int ms = 20000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!faulted.count(i)) {
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      uffd_msg m{};
      while (::read(fd, &m, sizeof(m)) == sizeof(m))
        if (m.event == UFFD_EVENT_PAGEFAULT)
          faulted.insert((m.arg.pagefault.address - reinterpret_cast<uint64_t>(base)) / kPage);
    }
    return true;
  }
  int fd = -1;
  char* base = nullptr;
  size_t len = 0;
  std::set<size_t> faulted;
};

const char* kEnvKeys[] = {"HAWSER_FILE_ENGINE",         "HAWSER_FILE_MAX_IO_SIZE",   "HAWSER_FILE_IO_DEPTH",
                          "HAWSER_FILE_DIRECT",         "HAWSER_FILE_FIXED_BUFFERS", "HAWSER_FILE_CANCEL_GRACE_MS",
                          "HAWSER_FILE_POSIX_THREADS",  "HAWSER_BLOCK_RUN_WINDOW",   "HAWSER_BLOCK_LANES"};

class FileInflight : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const char* k : kEnvKeys) ::unsetenv(k);
    ::setenv("HAWSER_FILE_ENGINE", GetParam().c_str(), 1);
    // userfaultfd memory must not be pinned at registration (it would block).
    ::setenv("HAWSER_FILE_FIXED_BUFFERS", "0", 1);
    ::setenv("HAWSER_FILE_CANCEL_GRACE_MS", "200", 1);
    if (!uffd.open(16)) GTEST_SKIP() << "userfaultfd is not available here: " << std::strerror(errno);
    if (GetParam() == "uring") {
      std::string why = uringUnavailableReason();
      if (!why.empty()) GTEST_SKIP() << "io_uring is not usable on this host: " << why;
    }
    ASSERT_FALSE(dir.path.empty());
  }
  void start() {
    engine = std::make_unique<TransferEngine>();
    Status s = engine->init("p2p", "node-a", "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(hasTransport(*engine, "file")) << "file transport with engine " << GetParam() << " did not install";
    s = engine->registerLocalMemory(uffd.base, uffd.len, "cpu:0", false);
    ASSERT_TRUE(s.ok()) << s.toString();
    s = engine->registerLocalMemory(plain.p, plain.n, "cpu:0", false);
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  // One I/O at a time through the page cache (so a file truncated under a
  // batch shrinks at once), I/Os of `max_io`: what the queued cases need;
  // and `serial`, a file of `size` pattern(seed) bytes, opened as `seg`.
  void startSerial(const char* max_io, uint64_t size, uint64_t seed) {
    ::setenv("HAWSER_FILE_DIRECT", "0", 1);
    ::setenv("HAWSER_FILE_MAX_IO_SIZE", max_io, 1);
    ::setenv("HAWSER_FILE_IO_DEPTH", "1", 1);
    ::setenv("HAWSER_FILE_POSIX_THREADS", "1", 1);
    start();
    serial = dir.path + "/serial";
    ASSERT_TRUE(writeFile(serial, size, seed));
    ASSERT_TRUE(engine->openSegment("file://" + serial, seg).ok());
  }
  void TearDown() override {
    // Release whatever may still block before the engine goes away.
    if (uffd.base)
      for (size_t i = 0; i < uffd.len / kPage; ++i) uffd.fill(i);
    engine.reset();
    for (const char* k : kEnvKeys) ::unsetenv(k);
  }
  Status freeWhenIdle(BatchID b) { return test::freeWhenIdle(*engine, b); }

  Uffd uffd;
  Buffer plain{4 * MiB};
  TempDir dir;
  std::unique_ptr<TransferEngine> engine;
  std::string serial;  // startSerial's file
  SegmentID seg = kInvalidSegment;
};

std::string paramName(const ::testing::TestParamInfo<std::string>& i) { return i.param; }

}  // namespace

TEST_P(FileInflight, free_batch_is_busy_while_an_io_references_its_memory) {
  start();
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 64 * KiB, 3));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + path, seg).ok());
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(1, b).ok());
  ASSERT_TRUE(engine->submitTransfer(b, {TransferRequest{OpCode::kRead, uffd.base, seg, 0, kPage}}).ok());
  ASSERT_TRUE(uffd.waitFault(0));  // the read is inside the kernel, blocked on our page
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kPending);
  EXPECT_EQ(engine->freeBatchID(b).code(), Code::kBatchBusy);
  ASSERT_TRUE(uffd.fill(0));
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  EXPECT_EQ(checkPattern(uffd.base, kPage, 3, 0), -1);
  EXPECT_TRUE(engine->freeBatchID(b).ok());
}

TEST_P(FileInflight, cancel_of_an_io_that_cannot_stop_quarantines_its_memory_until_it_ends) {
  start();
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 64 * KiB, 4));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + path, seg).ok());
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(1, b).ok());
  ASSERT_TRUE(engine->submitTransfer(b, {TransferRequest{OpCode::kRead, uffd.base, seg, 0, kPage}}).ok());
  ASSERT_TRUE(uffd.waitFault(0));
  const auto before = engine->stats();
  ASSERT_TRUE(engine->cancelTransfer(b).ok());
  // The kernel cannot abandon a read blocked in a page fault: after the grace
  // period the task is reported CANCELED, and its memory stays quarantined.
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCanceled);
  EXPECT_EQ(st.transferred_bytes, 0u);
  EXPECT_EQ(counter(*engine, "file", "quarantined"), counter(before, "file", "quarantined") + 1);
  EXPECT_EQ(engine->freeBatchID(b).code(), Code::kBatchBusy);
  // Once the I/O ends, the quarantine is lifted and the batch can go.
  ASSERT_TRUE(uffd.fill(0));
  EXPECT_TRUE(freeWhenIdle(b).ok());
  EXPECT_EQ(counter(*engine, "file", "quarantine_released"), counter(before, "file", "quarantine_released") + 1);
}

// A file shrinks under a running batch (page-cache path, so the truncation
// does not wait for the blocked read): the slices past the new end fail,
// the rest of the task's queued slices are cancelled, the task ends FAILED
// with exactly the bytes that were read, and nothing hangs.
TEST_P(FileInflight, file_truncated_while_a_batch_runs_fails_the_task_with_the_bytes_done) {
  ASSERT_NO_FATAL_FAILURE(startSerial("64K", 4 * MiB, 5));
  // Task 0 reads into the userfaultfd page and holds the only I/O lane; task
  // 1 (64 slices of 64 KiB) waits behind it while the file shrinks to 1 MiB.
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(2, b).ok());
  ASSERT_TRUE(engine
                  ->submitTransfer(b, {TransferRequest{OpCode::kRead, uffd.base, seg, 0, kPage},
                                       TransferRequest{OpCode::kRead, plain.p, seg, 0, 4 * MiB}})
                  .ok());
  ASSERT_TRUE(uffd.waitFault(0));  // the only I/O lane is held; task 1 has not started
  ASSERT_EQ(::truncate(serial.c_str(), MiB), 0);
  ASSERT_TRUE(uffd.fill(0));
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus t0, t1;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, t0).ok());
  ASSERT_TRUE(engine->getTransferStatus(b, 1, t1).ok());
  EXPECT_EQ(t0.s, TransferState::kCompleted) << t0.error.toString();
  EXPECT_EQ(t1.s, TransferState::kFailed);
  EXPECT_EQ(t1.transferred_bytes, MiB);  // the 16 slices before the new end of file
  EXPECT_EQ(t1.error.code(), Code::kIoError);
  EXPECT_NE(t1.error.message().find("short read"), std::string::npos) << t1.error.message();
  EXPECT_EQ(checkPattern(plain.p, MiB, 5, 0), -1);
  EXPECT_TRUE(engine->freeBatchID(b).ok());
}

// A coalesced I/O fails (the file shrank under the batch): exactly the
// requests it carried fail, with its error, and those of the I/O before it
// complete with their bytes.
TEST_P(FileInflight, a_failed_coalesced_io_fails_exactly_the_runs_it_carried) {
  ASSERT_NO_FATAL_FAILURE(startSerial("1M", 2 * MiB, 8));
  // Request 0 reads into the userfaultfd page and holds the only I/O lane;
  // requests 1..64 (32 KiB each, scattered in memory, [0, 2 MiB) of the
  // file) are two I/Os of 32 runs that wait behind it while the file
  // shrinks to 1 MiB.
  constexpr uint64_t bs = 32 * KiB, n = 64;
  std::vector<TransferRequest> reqs{TransferRequest{OpCode::kRead, uffd.base, seg, 0, kPage}};
  for (uint64_t i = 0; i < n; ++i)
    reqs.push_back(TransferRequest{OpCode::kRead, plain.p + ((i * 37) % n) * bs, seg, i * bs, bs});
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(reqs.size(), b).ok());
  const auto before = engine->stats();
  ASSERT_TRUE(engine->submitTransfer(b, reqs).ok());
  ASSERT_TRUE(uffd.waitFault(0));
  ASSERT_EQ(::truncate(serial.c_str(), MiB), 0);
  ASSERT_TRUE(uffd.fill(0));
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(30)).ok());
  const auto after = engine->stats();
  EXPECT_EQ(counter(after, "file", "coalesced_ios") - counter(before, "file", "coalesced_ios"), 2u);
  EXPECT_EQ(counter(after, "file", "coalesced_runs") - counter(before, "file", "coalesced_runs"), n);
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted) << st.error.toString();
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(engine->getTransferStatus(b, 1 + i, st).ok());
    if (i < n / 2) {
      EXPECT_EQ(st.s, TransferState::kCompleted) << "request " << 1 + i << ": " << st.error.toString();
      EXPECT_EQ(st.transferred_bytes, bs);
      EXPECT_EQ(checkPattern(plain.p + ((i * 37) % n) * bs, bs, 8, i * bs), -1) << "request " << 1 + i;
    } else {
      EXPECT_EQ(st.s, TransferState::kFailed) << "request " << 1 + i;
      EXPECT_EQ(st.transferred_bytes, 0u);
      EXPECT_EQ(st.error.code(), Code::kIoError);
      EXPECT_NE(st.error.message().find("short read: 0 of 1048576 bytes at offset 1048576"), std::string::npos)
          << st.error.message();
      EXPECT_NE(st.error.message().find("carrying 32 runs"), std::string::npos) << st.error.message();
    }
  }
  EXPECT_TRUE(engine->freeBatchID(b).ok());
}

// The same through a block request (its runs reach the transport as a
// window of runs): the runs of the failed I/O fail with its error, the
// block request ends FAILED with exactly the bytes of the I/O that
// completed.
TEST_P(FileInflight, a_failed_coalesced_io_fails_exactly_the_block_runs_it_carried) {
  ASSERT_NO_FATAL_FAILURE(startSerial("1M", 2 * MiB, 8));
  constexpr uint64_t bs = 32 * KiB, n = 64;
  std::vector<Block> blocks(n);
  for (uint64_t i = 0; i < n; ++i) blocks[i] = Block{plain.p + ((i * 37) % n) * bs, i * bs, bs};
  // Task 0 holds the only I/O lane on the userfaultfd page; task 1's two
  // I/Os of 32 runs wait behind it while the file shrinks to 1 MiB.
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(2, b).ok());
  ASSERT_TRUE(engine->submitTransfer(b, {TransferRequest{OpCode::kRead, uffd.base, seg, 0, kPage}}).ok());
  ASSERT_TRUE(engine->submitBlocks(b, OpCode::kRead, seg, blocks).ok());
  ASSERT_TRUE(uffd.waitFault(0));
  ASSERT_EQ(::truncate(serial.c_str(), MiB), 0);
  ASSERT_TRUE(uffd.fill(0));
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(30)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 1, st).ok());
  EXPECT_EQ(st.s, TransferState::kFailed);
  EXPECT_EQ(st.transferred_bytes, MiB) << "the 32 runs of the first I/O, none of the second";
  EXPECT_NE(st.error.message().find("short read: 0 of 1048576 bytes at offset 1048576"), std::string::npos)
      << st.error.message();
  EXPECT_NE(st.error.message().find("carrying 32 runs"), std::string::npos) << st.error.message();
  for (uint64_t i = 0; i < n / 2; ++i)
    EXPECT_EQ(checkPattern(blocks[i].local, bs, 8, i * bs), -1) << "block " << i;
  EXPECT_TRUE(engine->freeBatchID(b).ok());
}

// cancelTransfer in the middle of a block request whose runs go as
// coalesced I/Os: the I/Os that completed count their runs' bytes; the one
// stuck in the kernel is quarantined (its runs reported CANCELED after the
// grace, its memory kept until it ends); the batch is busy until it ends.
// (The stuck I/O is the last one: I/O queued behind it on the engine's only
// lane could not be stopped either.)
TEST_P(FileInflight, cancel_mid_way_through_coalesced_block_ios) {
  ASSERT_NO_FATAL_FAILURE(startSerial("256K", MiB, 9));
  // 32 blocks of 32 KiB over [0, 1 MiB): four I/Os of 8 blocks, issued one
  // at a time. Block 24 (the last I/O's first) lands in the userfaultfd
  // pages; the others are scattered in plain memory, one slot apart.
  constexpr uint64_t bs = 32 * KiB, n = 32;
  std::vector<Block> blocks(n);
  for (uint64_t i = 0; i < n; ++i)
    blocks[i] = Block{i == 24 ? uffd.base : plain.p + ((i * 13) % n) * 2 * bs, i * bs, bs};
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(1, b).ok());
  const auto before = engine->stats();
  ASSERT_TRUE(engine->submitBlocks(b, OpCode::kRead, seg, blocks).ok());
  ASSERT_TRUE(uffd.waitFault(0));  // three I/Os have ended; the last is in the kernel
  ASSERT_TRUE(engine->cancelTransfer(b).ok());
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCanceled) << st.error.toString();
  EXPECT_EQ(st.transferred_bytes, 24 * bs) << "the first three I/Os' blocks, no more";
  for (uint64_t i = 0; i < 24; ++i)
    EXPECT_EQ(checkPattern(blocks[i].local, bs, 9, i * bs), -1) << "block " << i;
  const auto mid = engine->stats();
  EXPECT_EQ(counter(mid, "file", "quarantined") - counter(before, "file", "quarantined"), 1u)
      << "the stuck I/O, once, for its 8 runs";
  EXPECT_EQ(counter(mid, "file", "coalesced_ios") - counter(before, "file", "coalesced_ios"), 4u);
  EXPECT_EQ(counter(mid, "file", "coalesced_runs") - counter(before, "file", "coalesced_runs"), n);
  EXPECT_EQ(engine->freeBatchID(b).code(), Code::kBatchBusy);
  for (size_t p = 0; p < uffd.len / kPage; ++p) ASSERT_TRUE(uffd.fill(p));
  Status s = freeWhenIdle(b);
  EXPECT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(counter(*engine, "file", "quarantine_released") - counter(before, "file", "quarantine_released"), 1u);
}

// Memory unregistered while a block request into it is under way (the
// caller's mistake): its later window, prepared after the unregister, brings
// the registration unregister tore down (found when the request was
// checked), and the transport refuses it rather than move the runs by what
// is gone: those runs fail (kNotRegistered, saying why) and move nothing;
// the runs before complete.
TEST_P(FileInflight, runs_whose_registration_was_torn_down_mid_request_fail_and_move_nothing) {
  // Windows of 4 runs on one lane: two windows in flight at most.
  ::setenv("HAWSER_BLOCK_RUN_WINDOW", "4", 1);
  ::setenv("HAWSER_BLOCK_LANES", "1", 1);
  start();
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 64 * KiB, 6));
  SegmentID seg;
  ASSERT_TRUE(engine->openSegment("file://" + path, seg).ok());
  Buffer later(64 * KiB);
  std::memset(later.p, 0x5a, later.n);
  ASSERT_TRUE(engine->registerLocalMemory(later.p, later.n, "cpu:0", false).ok());
  // Runs 0-7 (two windows) read into userfaultfd pages and block there;
  // runs 8-11 read into `later`: their window is prepared once one of the
  // first two has ended.
  std::vector<Block> blocks;
  for (uint64_t i = 0; i < 8; ++i) blocks.push_back(Block{uffd.base + 2 * i * kPage, i * kPage, kPage});
  for (uint64_t i = 0; i < 4; ++i) blocks.push_back(Block{later.p + 2 * i * kPage, (8 + i) * kPage, kPage});
  BatchID b;
  ASSERT_TRUE(engine->allocateBatchID(1, b).ok());
  ASSERT_TRUE(engine->submitBlocks(b, OpCode::kRead, seg, blocks).ok());
  ASSERT_TRUE(uffd.waitFault(0));
  ASSERT_TRUE(engine->unregisterLocalMemory(later.p).ok());
  for (size_t p = 0; p < uffd.len / kPage; ++p) ASSERT_TRUE(uffd.fill(p));
  ASSERT_TRUE(engine->waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(engine->getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kFailed);
  EXPECT_EQ(st.error.code(), Code::kNotRegistered) << st.error.toString();
  EXPECT_NE(st.error.message().find("unregistered since the request was checked"), std::string::npos)
      << st.error.message();
  EXPECT_EQ(st.transferred_bytes, 8 * kPage) << "the runs before the unregister, no more";
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(checkPattern(uffd.base + 2 * i * kPage, kPage, 6, i * kPage), -1);
  EXPECT_EQ(std::count(later.p, later.p + later.n, 0x5a), static_cast<long>(later.n))
      << "a run was moved by a registration unregister tore down";
  Status s = freeWhenIdle(b);
  EXPECT_TRUE(s.ok()) << s.toString();
}

INSTANTIATE_TEST_SUITE_P(Engines, FileInflight, ::testing::Values("uring", "posix"), paramName);

// A slice fails while a sibling of the same task is stuck in the kernel: the
// sibling is asked to cancel, cannot stop, is quarantined; the task reports
// FAILED (the worst state wins) with the bytes of the slice that completed,
// and the batch stays busy until the stuck I/O ends. (POSIX engine with two
// workers: the io_uring engine would block its submitting thread on the
// userfaultfd page, which serialises the slices.)
TEST(FileInflightPosix, failed_slice_cancels_its_siblings_and_quarantines_what_does_not_stop) {
  for (const char* k : kEnvKeys) ::unsetenv(k);
  ::setenv("HAWSER_FILE_ENGINE", "posix", 1);
  ::setenv("HAWSER_FILE_POSIX_THREADS", "2", 1);
  ::setenv("HAWSER_FILE_MAX_IO_SIZE", "4K", 1);
  ::setenv("HAWSER_FILE_FIXED_BUFFERS", "0", 1);
  ::setenv("HAWSER_FILE_CANCEL_GRACE_MS", "200", 1);
  Uffd uffd;
  if (!uffd.open(4)) GTEST_SKIP() << "userfaultfd is not available here: " << std::strerror(errno);
  ASSERT_TRUE(uffd.fill(2));  // page 2 is present: the third slice never blocks
  TempDir dir;
  const std::string x = dir.path + "/x", y = dir.path + "/y";
  ASSERT_TRUE(writeFile(x, 2 * kPage, 6));
  ASSERT_TRUE(writeFile(y, kPage, 7));
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
  ASSERT_TRUE(e.registerLocalMemory(uffd.base, uffd.len, "cpu:0", false).ok());
  ASSERT_TRUE(e.registerFileSegment("xy", {FileDesc{x, 2 * kPage, {}}, FileDesc{y, kPage, {}}}).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment("xy", seg).ok());
  // One task, three slices: x[0,4K) -> page 0, x[4K,8K) -> page 1, y[0,4K) -> page 2.
  BatchID b;
  ASSERT_TRUE(e.allocateBatchID(1, b).ok());
  ASSERT_TRUE(e.submitTransfer(b, {TransferRequest{OpCode::kRead, uffd.base, seg, 0, 3 * kPage}}).ok());
  ASSERT_TRUE(uffd.waitFault(0));  // both workers are now stuck: slice 0 ...
  ASSERT_TRUE(uffd.waitFault(1));  // ... and slice 1; slice 2 waits in the queue
  ASSERT_EQ(::truncate(y.c_str(), 0), 0);  // slice 2 will read nothing
  const auto before = e.stats();
  ASSERT_TRUE(uffd.fill(1));  // slice 1 completes; its worker runs slice 2, which fails
  ASSERT_TRUE(e.waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(e.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kFailed);
  EXPECT_EQ(st.transferred_bytes, kPage);  // slice 1 only
  EXPECT_NE(st.error.message().find(y), std::string::npos) << st.error.message();
  auto mid = e.stats();
  EXPECT_EQ(counter(mid, "file", "cancel_requests"), counter(before, "file", "cancel_requests") + 1);
  EXPECT_EQ(counter(mid, "file", "quarantined"), counter(before, "file", "quarantined") + 1);
  EXPECT_EQ(e.freeBatchID(b).code(), Code::kBatchBusy);
  ASSERT_TRUE(uffd.fill(0));
  Status s = freeWhenIdle(e, b);
  EXPECT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(counter(e, "file", "quarantine_released"), counter(before, "file", "quarantine_released") + 1);
  for (const char* k : kEnvKeys) ::unsetenv(k);
}
