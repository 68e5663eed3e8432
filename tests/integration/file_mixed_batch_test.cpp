// One engine batch holding requests to a memory segment (over TCP, served by
// a second in-process engine) and to a file segment: each goes through its
// own transport, each task gets its own status, and a refused request
// refuses the whole list for both transports.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "common/util.h"
#include "hawser/engine.h"

using namespace hawser;
using namespace hawser::test;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

const char* kEnvKeys[] = {"HAWSER_TRANSPORT",   "HAWSER_FILE_ENGINE",         "HAWSER_FILE_DIRECT",
                          "HAWSER_FILE_IO_DEPTH", "HAWSER_FILE_POSIX_THREADS", "HAWSER_FILE_FIXED_BUFFERS"};

class MixedBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* k : kEnvKeys) ::unsetenv(k);
    ::setenv("HAWSER_TRANSPORT", "tcp", 1);  // memory segments over TCP (file segments always use "file")
    setExtraEnv();
    ASSERT_FALSE(dir.path.empty());
    Status s = target.init("p2p", "target", "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.toString();
    s = init.init("p2p", "node-a", "127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.toString();  // tcp (forced here) is always built
    ASSERT_TRUE(hasTransport(init, "file")) << "file is always built and installs with the POSIX engine at least";
    ASSERT_TRUE(target.registerLocalMemory(tmem.p, tmem.n, "cpu:0", true).ok());
    ASSERT_TRUE(init.registerLocalMemory(lmem.p, lmem.n, "cpu:0", false).ok());
    s = init.openSegment(target.segmentName(), mseg);
    ASSERT_TRUE(s.ok()) << s.toString();
    path = dir.path + "/f";
    ASSERT_TRUE(writeFile(path, 4 * MiB, 50));
    s = init.openSegment("file://" + path, fseg);
    ASSERT_TRUE(s.ok()) << s.toString();
  }
  void TearDown() override {
    for (const char* k : kEnvKeys) ::unsetenv(k);
  }
  virtual void setExtraEnv() {}
  uint64_t remote(uint64_t off) const { return reinterpret_cast<uint64_t>(tmem.p) + off; }

  TempDir dir;
  std::string path;
  Buffer tmem{4 * MiB}, lmem{8 * MiB};
  TransferEngine target, init;
  SegmentID mseg = kInvalidSegment, fseg = kInvalidSegment;
};

}  // namespace

TEST_F(MixedBatch, memory_and_file_requests_in_one_batch_all_complete_with_their_bytes) {
  fillPattern(tmem.p, tmem.n, 60, 0);
  fillPattern(lmem.p, MiB, 61, 0);           // -> target memory
  fillPattern(lmem.p + MiB, MiB, 62, 0);     // -> file
  std::vector<TransferRequest> reqs{
      TransferRequest{OpCode::kWrite, lmem.p, mseg, remote(MiB), MiB},
      TransferRequest{OpCode::kRead, lmem.p + 2 * MiB, fseg, 3 * MiB, MiB},
      TransferRequest{OpCode::kWrite, lmem.p + MiB, fseg, 5, MiB},  // unaligned file write
      TransferRequest{OpCode::kRead, lmem.p + 3 * MiB, mseg, remote(2 * MiB), MiB},
  };
  auto sts = runBatch(init, mseg, reqs);
  ASSERT_EQ(sts.size(), reqs.size());
  for (size_t i = 0; i < sts.size(); ++i) {
    EXPECT_EQ(sts[i].s, TransferState::kCompleted) << "task " << i << ": " << sts[i].error.toString();
    EXPECT_EQ(sts[i].transferred_bytes, MiB) << "task " << i;
  }
  EXPECT_EQ(checkPattern(tmem.p + MiB, MiB, 61, 0), -1);             // tcp write landed
  EXPECT_EQ(checkPattern(lmem.p + 2 * MiB, MiB, 50, 3 * MiB), -1);   // file read
  auto f = readFile(path, 0, MiB + 10);
  EXPECT_EQ(checkPattern(f.data(), 5, 50, 0), -1);
  EXPECT_EQ(checkPattern(f.data() + 5, MiB, 62, 0), -1);             // file write
  EXPECT_EQ(checkPattern(f.data() + 5 + MiB, 5, 50, MiB + 5), -1);
  EXPECT_EQ(checkPattern(lmem.p + 3 * MiB, MiB, 60, 2 * MiB), -1);   // tcp read
}

TEST_F(MixedBatch, refused_file_request_refuses_the_memory_request_too) {
  fillPattern(tmem.p, tmem.n, 70, 0);
  fillPattern(lmem.p, MiB, 71, 0);
  ASSERT_TRUE(init.registerFileSegment("gone", {FileDesc{dir.path + "/missing", MiB, {}}}).ok());
  SegmentID gone;
  ASSERT_TRUE(init.openSegment("gone", gone).ok());
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(2, b).ok());
  Status s = init.submitTransfer(b, {TransferRequest{OpCode::kWrite, lmem.p, mseg, remote(0), MiB},
                                     TransferRequest{OpCode::kRead, lmem.p + MiB, gone, 0, 4096}});
  EXPECT_EQ(s.code(), Code::kFileNotFound) << s.toString();
  TransferStatus st;
  EXPECT_EQ(init.getTransferStatus(b, 0, st).code(), Code::kInvalidArgument);  // nothing was queued
  EXPECT_EQ(checkPattern(tmem.p, MiB, 70, 0), -1);  // the tcp write never ran
  EXPECT_TRUE(init.freeBatchID(b).ok());
}

// A file task fails at I/O time (its file shrank after submit) while the TCP
// task of the same batch completes: per-task statuses, ranked aggregate.
class MixedBatchFailure : public MixedBatch {
  void setExtraEnv() override {
    ::setenv("HAWSER_FILE_ENGINE", "posix", 1);
    ::setenv("HAWSER_FILE_POSIX_THREADS", "1", 1);
    ::setenv("HAWSER_FILE_DIRECT", "0", 1);
    ::setenv("HAWSER_FILE_FIXED_BUFFERS", "0", 1);
  }
};

TEST_F(MixedBatchFailure, file_task_failing_at_io_time_does_not_affect_the_tcp_task) {
  // A userfaultfd page holds the file transport's only I/O lane until the
  // file has been truncated, so the second file task reads past its end.
  int ufd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (ufd < 0) GTEST_SKIP() << "userfaultfd is not available here: " << std::strerror(errno);
  uffdio_api api{};
  api.api = UFFD_API;
  ASSERT_EQ(::ioctl(ufd, UFFDIO_API, &api), 0);
  void* pg = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(pg, MAP_FAILED);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uint64_t>(pg);
  reg.range.len = 4096;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  ASSERT_EQ(::ioctl(ufd, UFFDIO_REGISTER, &reg), 0);
  ASSERT_TRUE(init.registerLocalMemory(pg, 4096, "cpu:0", false).ok());
  auto fillPage = [&] {
    static char zeros[4096];
    uffdio_copy c{};
    c.dst = reinterpret_cast<uint64_t>(pg);
    c.src = reinterpret_cast<uint64_t>(zeros);
    c.len = 4096;
    (void)::ioctl(ufd, UFFDIO_COPY, &c);
  };

  fillPattern(tmem.p, tmem.n, 80, 0);
  fillPattern(lmem.p, MiB, 81, 0);
  BatchID b;
  ASSERT_TRUE(init.allocateBatchID(3, b).ok());
  ASSERT_TRUE(init.submitTransfer(b, {TransferRequest{OpCode::kRead, pg, fseg, 0, 4096},
                                      TransferRequest{OpCode::kWrite, lmem.p, mseg, remote(0), MiB},
                                      TransferRequest{OpCode::kRead, lmem.p + MiB, fseg, 2 * MiB, MiB}})
                  .ok());
  pollfd p{ufd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 20000), 1);  // the file lane is blocked on our page
  ASSERT_EQ(::truncate(path.c_str(), MiB), 0);
  // The TCP task is not held up by the file transport.
  TransferStatus st1;
  EXPECT_TRUE(eventually([&] { return init.getTransferStatus(b, 1, st1).ok() && isTerminal(st1.s); }))
      << "the tcp task waited for the blocked file task";
  EXPECT_EQ(st1.s, TransferState::kCompleted) << st1.error.toString();
  fillPage();
  ASSERT_TRUE(init.waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st0, st2, agg;
  ASSERT_TRUE(init.getTransferStatus(b, 0, st0).ok());
  ASSERT_TRUE(init.getTransferStatus(b, 2, st2).ok());
  EXPECT_EQ(st0.s, TransferState::kCompleted) << st0.error.toString();
  EXPECT_EQ(st2.s, TransferState::kFailed);
  EXPECT_EQ(st2.transferred_bytes, 0u);
  EXPECT_NE(st2.error.message().find(path), std::string::npos) << st2.error.message();
  ASSERT_TRUE(init.getBatchTransferStatus(b, agg).ok());
  EXPECT_EQ(agg.s, TransferState::kFailed);
  EXPECT_EQ(agg.transferred_bytes, 4096 + MiB);
  EXPECT_EQ(checkPattern(tmem.p, MiB, 81, 0), -1);
  EXPECT_TRUE(init.freeBatchID(b).ok());
  EXPECT_TRUE(init.unregisterLocalMemory(pg).ok());
  ::munmap(pg, 4096);
  ::close(ufd);
}
