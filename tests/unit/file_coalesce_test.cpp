// Runs of one window -> I/Os sized by the disk (file_coalesce.h): chains of
// runs adjacent (or, for reads, nearly adjacent) in the file, cut at
// max_io_size and around an O_DIRECT write's unaligned head and tail; the
// iovecs of one I/O.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "transport/file/file_coalesce.h"

using namespace hawser::file;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// `n` runs of `len` bytes, back to back in the file from `at`, scattered in
// memory (run i at 0x10000000 + perm[i] * 2 * len).
std::vector<RunPart> scattered(size_t n, uint64_t len, uint64_t at = 0) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<RunPart> parts;
  for (uint32_t i = 0; i < n; ++i) parts.push_back(RunPart{at + i * len, len, 0x10000000 + perm[i] * 2 * len, i});
  return parts;
}

// Every byte of every part is carried exactly once, by members that lie
// inside their extent, in file order, never overlapping.
void expectExactCover(const std::vector<RunPart>& parts, const std::vector<Extent>& ext,
                      const std::vector<Member>& ms) {
  std::vector<uint64_t> carried(parts.size(), 0);
  for (const Extent& e : ext) {
    ASSERT_GT(e.count, 0u);
    uint64_t cursor = e.file_off;
    for (uint32_t i = 0; i < e.count; ++i) {
      const Member& m = ms[e.first + i];
      EXPECT_GE(m.file_off, cursor) << "members overlap or go backwards";
      cursor = m.file_off + m.len;
      const RunPart* p = nullptr;
      for (const RunPart& r : parts)
        if (r.index == m.index) p = &r;
      ASSERT_NE(p, nullptr);
      EXPECT_GE(m.file_off, p->file_off);
      EXPECT_LE(m.file_off + m.len, p->file_off + p->len);
      EXPECT_EQ(m.mem, p->mem + (m.file_off - p->file_off)) << "memory follows the file inside a part";
      carried[m.index] += m.len;
    }
    EXPECT_EQ(ms[e.first].file_off, e.file_off) << "an extent starts with its first member";
    EXPECT_EQ(cursor, e.file_off + e.len) << "an extent ends with its last member";
  }
  for (const RunPart& r : parts) EXPECT_EQ(carried[r.index], r.len) << "part " << r.index;
}

}  // namespace

TEST(FileCoalesce, scattered_32k_runs_over_a_contiguous_range_become_1m_ios) {
  auto parts = scattered(8000, 32 * KiB);
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 0, true}, ext, ms);
  ASSERT_EQ(ext.size(), 250u);  // 8000 x 32 KiB = 250 MiB
  for (const Extent& e : ext) {
    EXPECT_EQ(e.len, MiB);
    EXPECT_EQ(e.count, 32u);
    EXPECT_EQ(e.file_off % MiB, 0u) << "cut at multiples of max_io";
    EXPECT_FALSE(e.buffered);
  }
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, without_join_every_run_is_its_own_io) {
  auto parts = scattered(64, 32 * KiB);
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 64 * KiB, false}, ext, ms);
  ASSERT_EQ(ext.size(), 64u);
  for (const Extent& e : ext) EXPECT_EQ(e.count, 1u);
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, runs_given_out_of_order_are_sorted_by_file_offset) {
  auto parts = scattered(64, 32 * KiB);
  std::shuffle(parts.begin(), parts.end(), std::mt19937(3));
  const auto given = parts;
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 0, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].file_off, 0u);
  EXPECT_EQ(ext[1].file_off, MiB);
  expectExactCover(given, ext, ms);
}

TEST(FileCoalesce, a_run_across_a_max_io_boundary_is_split_between_two_ios) {
  // 40 KiB runs from 16 KiB: the I/Os end at multiples of 1 MiB.
  auto parts = scattered(40, 40 * KiB, 16 * KiB);
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 0, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].file_off, 16 * KiB);
  EXPECT_EQ(ext[0].len, MiB - 16 * KiB);
  EXPECT_EQ(ext[1].file_off, MiB);
  EXPECT_EQ(ext[1].len, 16 * KiB + 40 * 40 * KiB - MiB);
  // Run 25 ([1016 KiB, 1056 KiB)) straddles 1 MiB: the last member of the
  // first I/O and the first of the second are its two pieces.
  EXPECT_EQ(ms[ext[0].first + ext[0].count - 1].index, 25u);
  EXPECT_EQ(ms[ext[1].first].index, 25u);
  EXPECT_EQ(ms[ext[1].first].len, 32 * KiB);
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, reads_pass_through_gaps_up_to_max_gap_and_not_beyond) {
  // 32 KiB runs with 16 KiB gaps, then a 64 KiB gap.
  std::vector<RunPart> parts;
  uint64_t at = 0;
  for (uint32_t i = 0; i < 4; ++i, at += 48 * KiB) parts.push_back(RunPart{at, 32 * KiB, 0x100000 * (i + 1), i});
  at += 48 * KiB;  // 64 KiB after the last run's end
  parts.push_back(RunPart{at, 32 * KiB, 0x900000, 4});
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 16 * KiB, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].count, 4u);
  EXPECT_EQ(ext[0].file_off, 0u);
  EXPECT_EQ(ext[0].len, 3 * 48 * KiB + 32 * KiB) << "the gaps between runs are read, none at the ends";
  EXPECT_EQ(ext[1].count, 1u);
  expectExactCover(parts, ext, ms);
  // A gap of one byte more than max_gap splits.
  ext.clear();
  ms.clear();
  coalesce(parts, CoalesceRule{MiB, 1, 16 * KiB - 1, true}, ext, ms);
  EXPECT_EQ(ext.size(), 5u);
}

TEST(FileCoalesce, writes_join_only_runs_that_touch) {
  std::vector<RunPart> parts{{0, 4 * KiB, 0x1000, 0}, {4 * KiB, 4 * KiB, 0x9000, 1}, {12 * KiB, 4 * KiB, 0x5000, 2}};
  std::vector<Extent> ext;
  std::vector<Member> ms;
  // An O_DIRECT write: max_gap is ignored (no byte between runs is written).
  coalesce(parts, CoalesceRule{MiB, 4096, 64 * KiB, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].count, 2u);
  EXPECT_EQ(ext[0].len, 8 * KiB);
  EXPECT_EQ(ext[1].file_off, 12 * KiB);
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, odd_length_writes_chain_and_only_the_chains_head_and_tail_go_buffered) {
  // 100 runs of 1000 bytes from offset 100: one chain [100, 100100).
  std::vector<RunPart> parts;
  for (uint32_t i = 0; i < 100; ++i) parts.push_back(RunPart{100 + i * 1000ull, 1000, 0x100000 + i * 3000ull, i});
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 4096, 0, true}, ext, ms);
  ASSERT_EQ(ext.size(), 3u);
  EXPECT_TRUE(ext[0].buffered);
  EXPECT_EQ(ext[0].file_off, 100u);
  EXPECT_EQ(ext[0].len, 4096u - 100);
  EXPECT_FALSE(ext[1].buffered);
  EXPECT_EQ(ext[1].file_off, 4096u);
  EXPECT_EQ(ext[1].len, 98304u - 4096);  // 100100 rounded down to 4 KiB
  EXPECT_TRUE(ext[2].buffered);
  EXPECT_EQ(ext[2].file_off, 98304u);
  EXPECT_EQ(ext[2].len, 100100u - 98304);
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, overlapping_runs_never_share_an_io) {
  std::vector<RunPart> parts{{0, 8 * KiB, 0x10000, 0}, {4 * KiB, 8 * KiB, 0x20000, 1}, {12 * KiB, 4 * KiB, 0x30000, 2}};
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 0, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].count, 1u);
  EXPECT_EQ(ext[1].count, 2u) << "run 1 ends where run 2 starts";
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, a_gap_wider_than_max_io_leaves_no_empty_io) {
  std::vector<RunPart> parts{{0, 4 * KiB, 0x10000, 0}, {3 * MiB, 4 * KiB, 0x20000, 1}};
  std::vector<Extent> ext;
  std::vector<Member> ms;
  coalesce(parts, CoalesceRule{MiB, 1, 4 * MiB, true}, ext, ms);
  ASSERT_EQ(ext.size(), 2u);
  EXPECT_EQ(ext[0].len, 4 * KiB);
  EXPECT_EQ(ext[1].file_off, 3 * MiB);
  expectExactCover(parts, ext, ms);
}

TEST(FileCoalesce, direct_alignment_needs_every_members_address_offset_and_length) {
  std::vector<Member> ms{{0, 0, 4096, 0x10000}, {1, 4096, 8192, 0x30000}};
  EXPECT_TRUE(directAligned(ms, 512, 4096));
  ms[1].mem += 512;
  EXPECT_TRUE(directAligned(ms, 512, 4096));
  EXPECT_FALSE(directAligned(ms, 4096, 4096));
  ms[1].mem -= 512;
  ms[1].len = 8000;
  EXPECT_FALSE(directAligned(ms, 512, 4096)) << "an iovec's length must be a multiple of the block";
}

TEST(FileCoalesce, iovecs_one_per_member_merged_where_contiguous_and_one_per_gap) {
  char discard[1];
  std::vector<Member> ms{{0, 0, 4096, 0x10000},
                         {1, 4096, 4096, 0x11000},   // continues member 0 in memory and file: merged
                         {2, 8192, 4096, 0x50000},   // adjacent in the file only
                         {3, 16384, 4096, 0x60000}};  // after a 4 KiB gap
  EXPECT_EQ(iovecsNeeded(ms), 4u);
  std::vector<iovec> v;
  buildIovecs(ms, discard, v);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].iov_base, reinterpret_cast<void*>(0x10000));
  EXPECT_EQ(v[0].iov_len, 8192u);
  EXPECT_EQ(v[1].iov_base, reinterpret_cast<void*>(0x50000));
  EXPECT_EQ(v[2].iov_base, discard);
  EXPECT_EQ(v[2].iov_len, 4096u);
  EXPECT_EQ(v[3].iov_base, reinterpret_cast<void*>(0x60000));
  // A short I/O of 10000 bytes resumes inside the second iovec.
  std::vector<iovec> rest;
  iovecsAfter(v, 10000, rest);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].iov_base, reinterpret_cast<void*>(0x50000 + 10000 - 8192));
  EXPECT_EQ(rest[0].iov_len, 12288u - 10000);
  EXPECT_EQ(rest[1].iov_base, discard);
}
