// shm's shared mappings: memory whose pages are shareable (the allocator's
// memfds, a memfd or a /dev/shm file a user maps shared) is mapped once by
// the peer and copied with memcpy; private memory goes by cross-memory
// attach. Each case checks the bytes and which mechanism moved them (the
// counters and the route explanation).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

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
  // its thread, whole.
  EXPECT_EQ(counter(init, "shm", "mapped_slices"), 3u * 2);
  EXPECT_EQ(counter(init, "shm", "inline_slices"), 4u * 2);
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

}  // namespace
}  // namespace hawser::test
