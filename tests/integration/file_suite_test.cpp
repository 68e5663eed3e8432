// The storage variant of the transport suite: what every file engine must
// pass through the public API — integrity across backing files with
// unaligned offsets, lengths and addresses; bad input refused at submit with
// nothing written; and transport-side refusal: requests the engine accepts
// (they lie inside the segment's declared space) but that the transport must
// refuse, because a backing file is missing or shorter than declared.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "common/util.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

struct StorageParam {
  std::string engine;  // file.engine
};

void PrintTo(const StorageParam& p, std::ostream* os) { *os << p.engine; }

std::string makeFile(const std::string& path, size_t len, uint64_t seed, uint64_t base) {
  EXPECT_TRUE(writeFile(path, len, seed, base)) << path;
  return path;
}

std::vector<char> slurp(const std::string& path, size_t len) { return readFile(path, 0, len); }

class StorageSuite : public ::testing::TestWithParam<StorageParam> {
 protected:
  static constexpr uint64_t kSeed = 99;
  static constexpr size_t kFileA = (1u << 20) + 4096 + 17;  // odd sizes: the boundary is unaligned
  static constexpr size_t kFileB = (2u << 20) + 333;

  void SetUp() override {
    EngineOptions o;
    o.config["file.engine"] = GetParam().engine;
    Status s = engine_.init("p2p", "storage", "127.0.0.1", 0, o);
    ASSERT_TRUE(s.ok()) << s.toString();
    auto names = engine_.transports();
    if (std::find(names.begin(), names.end(), "file") == names.end()) {
      std::string why = "the file transport is always built";
      for (auto& d : engine_.diagnose())
        if (d.transport == "file") why = d.reason;
      // pread/pwrite are there on every host: only io_uring may be missing.
      ASSERT_NE(GetParam().engine, "posix") << "file.engine=posix did not install: " << why;
      GTEST_SKIP() << "file engine " << GetParam().engine << " cannot run here: " << why;
    }
    a_ = makeFile(dir_.path + "/a", kFileA, kSeed, 0);
    b_ = makeFile(dir_.path + "/b", kFileB, kSeed, kFileA);
    ASSERT_TRUE(engine_.registerFileSegment("two", {{a_, kFileA, {}}, {b_, kFileB, {}}}).ok());
    ASSERT_TRUE(engine_.openSegment("two", seg_).ok());
    ASSERT_TRUE(engine_.registerLocalMemory(mem_.p, mem_.n, "cpu:0", false).ok());
  }

  Status run(OpCode op, size_t local_off, uint64_t target, size_t len, std::vector<TransferStatus>* st = nullptr) {
    return engine_.transferSync({{op, mem_.p + local_off, seg_, target, len}}, std::chrono::seconds(30), st);
  }

  TempDir dir_;
  TransferEngine engine_;
  Buffer mem_{8u << 20};
  SegmentID seg_ = kInvalidSegment;
  std::string a_, b_;
};

TEST_P(StorageSuite, reads_of_every_shape_return_the_files_bytes) {
  struct Case {
    size_t local_off;
    uint64_t target;
    size_t len;
  };
  const Case cases[] = {
      {0, 0, 1},                                   // one byte
      {1, 4095, 4097},                             // unaligned everything, straddling a page
      {4096, 0, kFileA},                           // exactly file a
      {3, kFileA - 100, 200},                      // across the file boundary, unaligned
      {0, kFileA, kFileB},                         // exactly file b
      {17, 0, kFileA + kFileB},                    // the whole segment, unaligned address
      {8192, kFileA + kFileB - 1, 1},              // the last byte
  };
  for (const auto& c : cases) {
    std::memset(mem_.p, 0, mem_.n);
    Status s = run(OpCode::kRead, c.local_off, c.target, c.len);
    ASSERT_TRUE(s.ok()) << "read at " << c.target << " +" << c.len << ": " << s.toString();
    EXPECT_EQ(checkPattern(mem_.p + c.local_off, c.len, kSeed, c.target), -1) << "read at " << c.target;
  }
}

TEST_P(StorageSuite, writes_land_in_the_right_file_at_the_right_place) {
  const uint64_t target = kFileA - 5000;  // 5000 bytes into a, the rest into b
  const size_t len = 123457;
  fillPattern(mem_.p + 9, len, 7, 0);
  ASSERT_TRUE(run(OpCode::kWrite, 9, target, len).ok());
  auto a = slurp(a_, kFileA), b = slurp(b_, kFileB);
  ASSERT_EQ(a.size(), kFileA);
  ASSERT_EQ(b.size(), kFileB);
  EXPECT_EQ(checkPattern(a.data() + target, 5000, 7, 0), -1);
  EXPECT_EQ(checkPattern(b.data(), len - 5000, 7, 5000), -1);
  // Everything around it is as it was.
  EXPECT_EQ(checkPattern(a.data(), target, kSeed, 0), -1);
  EXPECT_EQ(checkPattern(b.data() + (len - 5000), kFileB - (len - 5000), kSeed, kFileA + (len - 5000)), -1);
  // And reads back through the engine.
  std::memset(mem_.p, 0, mem_.n);
  ASSERT_TRUE(run(OpCode::kRead, 4096, target, len).ok());
  EXPECT_EQ(checkPattern(mem_.p + 4096, len, 7, 0), -1);
}

TEST_P(StorageSuite, a_range_past_the_segment_is_refused_at_submit_and_nothing_is_written) {
  fillPattern(mem_.p, 8192, 5, 0);
  Status s = run(OpCode::kWrite, 0, kFileA + kFileB - 100, 200);
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s.toString();
  auto b = slurp(b_, kFileB);
  ASSERT_EQ(b.size(), kFileB);
  EXPECT_EQ(checkPattern(b.data(), kFileB, kSeed, kFileA), -1);
  char stray[64];
  EXPECT_EQ(engine_.transferSync({{OpCode::kRead, stray, seg_, 0, sizeof(stray)}}, std::chrono::seconds(5)).code(),
            Code::kNotRegistered);
}

TEST_P(StorageSuite, a_backing_file_shorter_than_declared_is_refused_by_the_transport) {
  ASSERT_EQ(::truncate(b_.c_str(), 4096), 0);
  // Inside the declared space, so the engine accepts it; the transport must not.
  Status s = run(OpCode::kRead, 0, kFileA + 8192, 4096);
  EXPECT_EQ(s.code(), Code::kFileTooShort) << s.toString();
  EXPECT_NE(s.message().find(b_), std::string::npos) << s.message();
  // The other file still serves.
  ASSERT_TRUE(run(OpCode::kRead, 0, 100, 4096).ok());
  EXPECT_EQ(checkPattern(mem_.p, 4096, kSeed, 100), -1);
}

TEST_P(StorageSuite, a_missing_backing_file_is_refused_by_the_transport_naming_it) {
  // A fresh segment whose second file was removed after registration.
  const std::string c = makeFile(dir_.path + "/c", 8192, kSeed, 0);
  const std::string d = makeFile(dir_.path + "/d", 8192, kSeed, 8192);
  ASSERT_TRUE(engine_.registerFileSegment("gone", {{c, 8192, {}}, {d, 8192, {}}}).ok());
  ASSERT_EQ(::unlink(d.c_str()), 0);
  SegmentID seg;
  ASSERT_TRUE(engine_.openSegment("gone", seg).ok());
  Status s = engine_.transferSync({{OpCode::kRead, mem_.p, seg, 8192, 100}}, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), Code::kFileNotFound) << s.toString();
  EXPECT_NE(s.message().find(d), std::string::npos) << s.message();
  ASSERT_TRUE(engine_.transferSync({{OpCode::kRead, mem_.p, seg, 0, 100}}, std::chrono::seconds(5)).ok());
}

INSTANTIATE_TEST_SUITE_P(File, StorageSuite, ::testing::Values(StorageParam{"uring"}, StorageParam{"posix"}),
                         [](const auto& i) { return i.param.engine; });

}  // namespace
}  // namespace hawser::test
