// shm's shared mappings: memory whose pages are shareable (the allocator's
// memfds, a memfd or a /dev/shm file a user maps shared) is mapped once by
// the peer and copied with memcpy; private memory goes by cross-memory
// attach. Each case checks the bytes and which mechanism moved them (the
// counters and the route explanation).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "common/util.h"
#include "hawser/engine.h"
#include "hawser/host_memory.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 31337;
constexpr size_t kTarget = 32u << 20;

// A `hawser serve` of this host with `args`, and an engine that opened it.
struct Served {
  explicit Served(const std::vector<std::string>& args, const EngineOptions& opts = {}) {
    std::vector<std::string> a{"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(kTarget),
                               "--fill-seed", std::to_string(kSeed)};
    a.insert(a.end(), args.begin(), args.end());
    EXPECT_TRUE(serve.start(a));
    std::string seg = serve.waitFor("segment: ", 20000);
    EXPECT_FALSE(seg.empty()) << "hawser serve did not start";
    EXPECT_FALSE(serve.waitFor("ready", 20000).empty());
    EXPECT_TRUE(e.init("p2p", "client", "127.0.0.1", 0, opts).ok());
    EXPECT_TRUE(e.openSegment(seg.substr(9), id).ok());
    std::vector<SegmentBuffer> bufs;
    EXPECT_TRUE(e.segmentBuffers(id, bufs).ok());
    EXPECT_EQ(bufs.size(), 1u);
    if (!bufs.empty()) base = bufs[0].addr;
  }
  std::string why() {
    RouteExplanation r;
    EXPECT_TRUE(e.explainRoute(id, "cpu:0", r).ok());
    EXPECT_EQ(r.transport, "shm") << r.why;
    return r.why;
  }
  Child serve;
  TransferEngine e;
  SegmentID id = 0;
  uint64_t base = 0;
};

// Sets HAWSER_HOST_MEMORY_HUGE_PAGES (for this process and the serves it
// starts) for a scope.
struct HugePagesEnv {
  explicit HugePagesEnv(const char* v) { ::setenv("HAWSER_HOST_MEMORY_HUGE_PAGES", v, 1); }
  ~HugePagesEnv() { ::unsetenv("HAWSER_HOST_MEMORY_HUGE_PAGES"); }
};

// Whether this kernel builds huge pages of shmem on request (MADV_COLLAPSE,
// Linux 6.1, shmem_enabled not "deny"); `why` says why not.
bool kernelCollapsesShmem(std::string& why) {
  constexpr size_t kHuge = 2u << 20;
  const int fd = ::memfd_create("collapse-probe", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, kHuge) != 0) return why = "memfd_create failed", false;
  void* r = ::mmap(nullptr, 2 * kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* at = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(r) + kHuge - 1) / kHuge * kHuge);
  char* m = static_cast<char*>(::mmap(at, kHuge, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0));
  ::close(fd);
  m[0] = 0;
  const bool ok = ::madvise(m, kHuge, 25 /* MADV_COLLAPSE */) == 0;
  if (!ok) why = std::string("MADV_COLLAPSE of a memfd: ") + std::strerror(errno);
  ::munmap(r, 2 * kHuge);
  return ok;
}

// ShmemPmdMapped (kB) of the mappings in /proc/self/smaps that start at
// `start` (when non-zero) or whose name contains `name`; -1 when none does.
long pmdMappedKb(uintptr_t start, const std::string& name) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  long total = -1;
  bool in = false;
  while (std::getline(f, line)) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 && line.find(':') > dash && std::isxdigit(line[0])) {  // a mapping's head
      in = start ? std::stoull(line.substr(0, dash), nullptr, 16) == start : line.find(name) != std::string::npos;
      if (in && total < 0) total = 0;
    } else if (in && line.rfind("ShmemPmdMapped:", 0) == 0) {
      total += std::stol(line.substr(15));
    }
  }
  return total;
}

// Reads 4 MiB at +4096 and writes it back at +8 MiB, reads that again: every byte checked.
void readWriteRead(TransferEngine& e, SegmentID seg, uint64_t base) {
  Buffer a(4u << 20), b(4u << 20);
  ASSERT_TRUE(e.registerLocalMemory(a.p, a.n, "cpu:0", false).ok());
  ASSERT_TRUE(e.registerLocalMemory(b.p, b.n, "cpu:0", false).ok());
  auto st = runBatch(e, seg, {{OpCode::kRead, a.p, seg, base + 4096, a.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  ASSERT_EQ(checkPattern(a.p, a.n, kSeed, 4096), -1);
  st = runBatch(e, seg, {{OpCode::kWrite, a.p, seg, base + (8u << 20), a.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  st = runBatch(e, seg, {{OpCode::kRead, b.p, seg, base + (8u << 20), b.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(checkPattern(b.p, b.n, kSeed, 4096), -1);
  ASSERT_TRUE(e.unregisterLocalMemory(a.p).ok());
  ASSERT_TRUE(e.unregisterLocalMemory(b.p).ok());
}

TEST(ShmMappings, allocator_memory_of_the_target_is_mapped_once_and_copied_with_memcpy) {
  HugePagesEnv huge("true");  // the default, whatever the environment says
  Served s({});
  ASSERT_NO_FATAL_FAILURE(readWriteRead(s.e, s.id, s.base));
  const uint64_t slices = counter(s.e, "shm", "slices_completed");
  EXPECT_GT(slices, 0u);
  EXPECT_EQ(counter(s.e, "shm", "mapped_slices"), slices);
  EXPECT_EQ(counter(s.e, "shm", "copy_calls"), 0u) << "no process_vm_readv/writev";
  EXPECT_EQ(counter(s.e, "shm", "mappings"), 1u) << "mapped once for all three transfers";
  EXPECT_GE(counter(s.e, "shm", "peers_mapped"), 1u);
  EXPECT_EQ(counter(s.e, "shm", "peers_cma"), 0u);
  EXPECT_NE(s.why().find("shm: shared mappings for 1 of 1 buffers (memcpy)"), std::string::npos) << s.why();
  // The serve's memory is on huge pages and our mapping of it is placed
  // for them: each 2 MiB one page-table entry (base/huge_pages.h).
  std::string why;
  if (!kernelCollapsesShmem(why)) GTEST_SKIP() << "this kernel gives shmem no huge pages: " << why;
  // Mapped as touched: [4 KiB, 4 MiB + 4 KiB) is in huge pages 0-2, [8, 12 MiB) in 4 and 5.
  EXPECT_EQ(pmdMappedKb(0, "hawser-host-" + std::to_string(kTarget)), 5 * 2048);
}

TEST(ShmMappings, private_target_memory_goes_by_cross_memory_attach) {
  Served s({"--host-memory", "private"});
  ASSERT_NO_FATAL_FAILURE(readWriteRead(s.e, s.id, s.base));
  EXPECT_GT(counter(s.e, "shm", "copy_calls"), 0u);
  EXPECT_EQ(counter(s.e, "shm", "mapped_slices"), 0u);
  EXPECT_GE(counter(s.e, "shm", "peers_cma"), 1u);
  EXPECT_EQ(counter(s.e, "shm", "peers_mapped"), 0u);
  EXPECT_NE(s.why().find("shared mappings for 0 of 1 buffers (memcpy), cross-memory attach for the other 1"),
            std::string::npos)
      << s.why();
}

TEST(ShmMappings, with_shared_mappings_off_shareable_memory_goes_by_cross_memory_attach) {
  EngineOptions o;
  o.config["shm.shared_mappings"] = "false";
  Served s({}, o);
  ASSERT_NO_FATAL_FAILURE(readWriteRead(s.e, s.id, s.base));
  EXPECT_GT(counter(s.e, "shm", "copy_calls"), 0u);
  EXPECT_EQ(counter(s.e, "shm", "mapped_slices"), 0u);
  EXPECT_EQ(counter(s.e, "shm", "mappings"), 0u);
}

// One process, two engines: the target registers memory of four kinds; the
// initiator maps the three shareable ones and attaches to the fourth.
TEST(ShmMappings, memfd_and_shared_file_memory_a_user_registers_is_mapped_private_memory_is_not) {
  constexpr size_t n = 1u << 20;
  // A memfd whose descriptor the user keeps.
  const int kept = ::memfd_create("user-kept", MFD_CLOEXEC);
  ASSERT_GE(kept, 0);
  ASSERT_EQ(::ftruncate(kept, n), 0);
  char* a = static_cast<char*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, kept, 0));
  ASSERT_NE(a, MAP_FAILED);
  // A file of /dev/shm, its descriptor closed (reached by its path).
  const std::string path = "/dev/shm/hawser-test-" + std::to_string(::getpid());
  const int f = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(f, 0);
  ASSERT_EQ(::ftruncate(f, 2 * n), 0);
  // Mapped from its second MiB on: the offset counts.
  char* b = static_cast<char*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, f, n));
  ASSERT_NE(b, MAP_FAILED);
  ::close(f);
  // From the allocator.
  void* c = nullptr;
  ASSERT_TRUE(allocateHostMemory(n, &c).ok());
  // Private.
  Buffer d(n);
  char* regions[] = {a, b, static_cast<char*>(c), d.p};
  for (size_t i = 0; i < 4; ++i) fillPattern(regions[i], n, kSeed + i);

  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0).ok());
  for (char* r : regions) ASSERT_TRUE(target.registerLocalMemory(r, n, "cpu:0", true).ok());
  ASSERT_TRUE(init.init("p2p", "init", "127.0.0.1", 0).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  RouteExplanation r;
  ASSERT_TRUE(init.explainRoute(seg, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "shm");
  EXPECT_NE(r.why.find("shared mappings for 3 of 4 buffers (memcpy), cross-memory attach for the other 1"),
            std::string::npos)
      << r.why;
  Buffer local(n);
  ASSERT_TRUE(init.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  for (size_t i = 0; i < 4; ++i) {
    std::memset(local.p, 0, n);
    auto st = runBatch(init, seg, {{OpCode::kRead, local.p, seg, reinterpret_cast<uint64_t>(regions[i]), n}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << i << ": " << st[0].error.toString();
    EXPECT_EQ(checkPattern(local.p, n, kSeed + i), -1) << "region " << i;
    // And write back another pattern, seen by the target's own mapping.
    fillPattern(local.p, n, kSeed + 10 + i);
    st = runBatch(init, seg, {{OpCode::kWrite, local.p, seg, reinterpret_cast<uint64_t>(regions[i]), n}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << i << ": " << st[0].error.toString();
    EXPECT_EQ(checkPattern(regions[i], n, kSeed + 10 + i), -1) << "region " << i;
  }
  EXPECT_EQ(counter(init, "shm", "mappings"), 3u);
  // A slice per transfer: a submit of up to shm.inline_bytes is copied by
  // its thread, whole; to a mapped registration, moved at once (no slice
  // made: direct_requests).
  EXPECT_EQ(counter(init, "shm", "mapped_slices"), 3u * 2);
  EXPECT_EQ(counter(init, "shm", "direct_requests"), 3u * 2);
  EXPECT_EQ(counter(init, "shm", "inline_slices"), 1u * 2);
  EXPECT_GT(counter(init, "shm", "copy_calls"), 0u) << "the private region went by cross-memory attach";
  ASSERT_TRUE(init.closeSegment(seg).ok());
  for (char* rg : regions) ASSERT_TRUE(target.unregisterLocalMemory(rg).ok());
  ::munmap(a, n);
  ::munmap(b, n);
  ::close(kept);
  ::unlink(path.c_str());
  ASSERT_TRUE(freeHostMemory(c).ok());
}

TEST(ShmMappings, the_allocator_refuses_zero_bytes_and_foreign_pointers) {
  void* p = reinterpret_cast<void*>(1);
  Status s = allocateHostMemory(0, &p);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(p, nullptr);
  Buffer b(4096);
  s = freeHostMemory(b.p);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("was not given by allocateHostMemory"), std::string::npos) << s.toString();
  ASSERT_TRUE(allocateHostMemory(100, &p).ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_EQ(static_cast<char*>(p)[99], 0);
  ASSERT_TRUE(freeHostMemory(p).ok());
  EXPECT_EQ(freeHostMemory(p).code(), Code::kInvalidArgument) << "freed twice";
}

TEST(ShmMappings, the_allocator_backs_each_whole_2mib_with_a_huge_page_unless_told_not_to_or_short_of_memory) {
  std::string why;
  if (!kernelCollapsesShmem(why)) GTEST_SKIP() << "this kernel gives shmem no huge pages: " << why;
  constexpr size_t kHuge = 2u << 20, n = 3 * kHuge + 4096;  // three huge pages and a small one
  std::optional<HugePagesEnv> env(std::in_place, "true");
  void* p = nullptr;
  ASSERT_TRUE(allocateHostMemory(n, &p).ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHuge, 0u);
  EXPECT_EQ(pmdMappedKb(reinterpret_cast<uintptr_t>(p), ""), static_cast<long>(3 * kHuge >> 10));
  const char* c = static_cast<const char*>(p);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += c[i] != 0;
  EXPECT_EQ(nonzero, 0u) << "allocated memory reads as zeros";
  std::memset(p, 0x5a, n);
  EXPECT_EQ(c[n - 1], 0x5a);
  ASSERT_TRUE(freeHostMemory(p).ok());

  // More than this host has: left to be backed at first touch, not backed
  // here (which would end in the out-of-memory killer).
  uint64_t total_kb = 0;
  {
    std::ifstream mi("/proc/meminfo");
    std::string key;
    mi >> key >> total_kb;
    ASSERT_EQ(key, "MemTotal:");
  }
  const size_t too_much = 4 * total_kb * 1024;
  ASSERT_TRUE(allocateHostMemory(too_much, &p).ok());
  static_cast<char*>(p)[too_much - 1] = 7;
  EXPECT_EQ(pmdMappedKb(reinterpret_cast<uintptr_t>(p), ""), 0);
  EXPECT_EQ(static_cast<char*>(p)[too_much - 1], 7);
  ASSERT_TRUE(freeHostMemory(p).ok());

  env.emplace("false");
  Status s = allocateHostMemory(n, &p);
  ASSERT_TRUE(s.ok()) << s.toString();
  static_cast<char*>(p)[0] = 1;
  EXPECT_EQ(pmdMappedKb(reinterpret_cast<uintptr_t>(p), ""), 0) << "4 KiB pages when told so";
  ASSERT_TRUE(freeHostMemory(p).ok());

  env.emplace("maybe");
  p = reinterpret_cast<void*>(1);
  s = allocateHostMemory(n, &p);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("HAWSER_HOST_MEMORY_HUGE_PAGES"), std::string::npos) << s.toString();
  EXPECT_EQ(p, nullptr);
}

}  // namespace
}  // namespace hawser::test
