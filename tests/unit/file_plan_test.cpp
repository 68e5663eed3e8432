// Slicing of file requests: coverage of the segment's files, cuts at file
// boundaries, at max_io_size, and around the unaligned head/tail of an
// O_DIRECT write.
#include <gtest/gtest.h>

#include "transport/file/file_plan.h"

using namespace hawser;
using namespace hawser::file;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
}

// The reference's example scaled down: two 1 MiB files, request [0.75, 1.25) MiB.
TEST(FilePlan, request_spanning_two_files_is_cut_at_the_file_boundary) {
  std::vector<uint64_t> files{MiB, MiB};
  std::vector<FileSpan> spans;
  ASSERT_TRUE(coverRange(files, 3 * MiB / 4, MiB / 2, spans).ok());
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].file, 0u);
  EXPECT_EQ(spans[0].file_off, 3 * MiB / 4);
  EXPECT_EQ(spans[0].len, MiB / 4);
  EXPECT_EQ(spans[0].req_off, 0u);
  EXPECT_EQ(spans[1].file, 1u);
  EXPECT_EQ(spans[1].file_off, 0u);
  EXPECT_EQ(spans[1].len, MiB / 4);
  EXPECT_EQ(spans[1].req_off, MiB / 4);
}

TEST(FilePlan, request_spanning_three_files_of_different_sizes) {
  std::vector<uint64_t> files{100, 50, 200};
  std::vector<FileSpan> spans;
  ASSERT_TRUE(coverRange(files, 90, 100, spans).ok());
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].file, 0u);
  EXPECT_EQ(spans[0].file_off, 90u);
  EXPECT_EQ(spans[0].len, 10u);
  EXPECT_EQ(spans[1].file, 1u);
  EXPECT_EQ(spans[1].file_off, 0u);
  EXPECT_EQ(spans[1].len, 50u);
  EXPECT_EQ(spans[1].req_off, 10u);
  EXPECT_EQ(spans[2].file, 2u);
  EXPECT_EQ(spans[2].file_off, 0u);
  EXPECT_EQ(spans[2].len, 40u);
  EXPECT_EQ(spans[2].req_off, 60u);
}

TEST(FilePlan, zero_length_files_are_skipped) {
  std::vector<uint64_t> files{10, 0, 10};
  std::vector<FileSpan> spans;
  ASSERT_TRUE(coverRange(files, 5, 10, spans).ok());
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1].file, 2u);
}

TEST(FilePlan, range_past_the_last_file_is_out_of_range) {
  std::vector<uint64_t> files{MiB, MiB};
  std::vector<FileSpan> spans;
  Status s = coverRange(files, 2 * MiB - 10, 11, spans);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find("[0, 2097152)"), std::string::npos) << s.message();
  EXPECT_TRUE(spans.empty());
  EXPECT_EQ(coverRange(files, 2 * MiB, 1, spans).code(), Code::kOutOfRange);
  EXPECT_TRUE(coverRange(files, 2 * MiB - 10, 10, spans).ok());
}

TEST(FilePlan, offset_plus_length_overflow_is_out_of_range) {
  std::vector<uint64_t> files{MiB};
  std::vector<FileSpan> spans;
  EXPECT_EQ(coverRange(files, UINT64_MAX - 5, 10, spans).code(), Code::kOutOfRange);
}

TEST(FilePlan, zero_length_is_invalid_argument) {
  std::vector<uint64_t> files{MiB};
  std::vector<FileSpan> spans;
  EXPECT_EQ(coverRange(files, 0, 0, spans).code(), Code::kInvalidArgument);
}

TEST(FilePlan, slices_are_cut_at_absolute_multiples_of_max_io) {
  std::vector<Piece> out;
  // 10 KiB starting at file offset 3 KiB, max_io 4 KiB: [3,4) [4,8) [8,12) [12,13).
  cutSpan(FileSpan{0, 3 * KiB, 10 * KiB, 0}, 4 * KiB, 1, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].file_off, 3 * KiB);
  EXPECT_EQ(out[0].len, 1 * KiB);
  EXPECT_EQ(out[1].file_off, 4 * KiB);
  EXPECT_EQ(out[1].len, 4 * KiB);
  EXPECT_EQ(out[1].req_off, 1 * KiB);
  EXPECT_EQ(out[3].file_off, 12 * KiB);
  EXPECT_EQ(out[3].len, 1 * KiB);
  EXPECT_EQ(out[3].req_off, 9 * KiB);
  uint64_t total = 0;
  for (auto& p : out) {
    EXPECT_FALSE(p.buffered);
    EXPECT_LE(p.len, 4 * KiB);
    total += p.len;
  }
  EXPECT_EQ(total, 10 * KiB);
}

TEST(FilePlan, aligned_span_within_max_io_is_one_slice) {
  std::vector<Piece> out;
  cutSpan(FileSpan{1, MiB, MiB, 7}, MiB, 4096, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].file_off, MiB);
  EXPECT_EQ(out[0].len, MiB);
  EXPECT_EQ(out[0].req_off, 7u);
  EXPECT_FALSE(out[0].buffered);
}

TEST(FilePlan, unaligned_direct_write_gets_buffered_head_and_tail) {
  std::vector<Piece> out;
  // [100, 10000) with 4 KiB alignment: head [100, 4096), middle [4096, 8192), tail [8192, 10000).
  cutSpan(FileSpan{0, 100, 9900, 0}, MiB, 4096, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].buffered);
  EXPECT_EQ(out[0].file_off, 100u);
  EXPECT_EQ(out[0].len, 3996u);
  EXPECT_FALSE(out[1].buffered);
  EXPECT_EQ(out[1].file_off, 4096u);
  EXPECT_EQ(out[1].len, 4096u);
  EXPECT_EQ(out[1].req_off, 3996u);
  EXPECT_TRUE(out[2].buffered);
  EXPECT_EQ(out[2].file_off, 8192u);
  EXPECT_EQ(out[2].len, 1808u);
  EXPECT_EQ(out[2].req_off, 8092u);
}

TEST(FilePlan, small_unaligned_direct_write_is_one_buffered_slice) {
  std::vector<Piece> out;
  cutSpan(FileSpan{0, 5000, 100, 0}, MiB, 4096, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].buffered);
  EXPECT_EQ(out[0].len, 100u);
}

TEST(FilePlan, write_with_aligned_start_has_only_a_tail) {
  std::vector<Piece> out;
  cutSpan(FileSpan{0, 8192, 8192 + 10, 0}, 4096, 4096, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FALSE(out[0].buffered);
  EXPECT_FALSE(out[1].buffered);
  EXPECT_TRUE(out[2].buffered);
  EXPECT_EQ(out[2].file_off, 16384u);
  EXPECT_EQ(out[2].len, 10u);
}

TEST(FilePlan, align_helpers) {
  EXPECT_EQ(alignDown(4097, 4096), 4096u);
  EXPECT_EQ(alignUp(4097, 4096), 8192u);
  EXPECT_EQ(alignUp(4096, 4096), 4096u);
  EXPECT_EQ(alignUp(7, 1), 7u);
}
