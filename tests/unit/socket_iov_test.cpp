// net::advanceIov (src/rpc/socket.h): what one short sendmsg/writev moved
// is taken off the front of a piece list, whole pieces and a cut one.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include "rpc/socket.h"

namespace hawser::net {
namespace {

TEST(AdvanceIov, skips_whole_pieces_and_keeps_the_tail_of_a_cut_one) {
  char a[10], b[20], c[30];
  iovec v[3] = {{a, sizeof(a)}, {b, sizeof(b)}, {c, sizeof(c)}};
  iovec* at = v;
  int cnt = 3;
  advanceIov(at, cnt, 0);
  EXPECT_EQ(at, v);
  EXPECT_EQ(cnt, 3);
  EXPECT_EQ(at->iov_len, 10u);
  advanceIov(at, cnt, 15);  // all of a, 5 of b
  EXPECT_EQ(at, v + 1);
  EXPECT_EQ(cnt, 2);
  EXPECT_EQ(at->iov_base, b + 5);
  EXPECT_EQ(at->iov_len, 15u);
  advanceIov(at, cnt, 15);  // the rest of b, exactly
  EXPECT_EQ(at, v + 2);
  EXPECT_EQ(cnt, 1);
  EXPECT_EQ(at->iov_base, c);
  EXPECT_EQ(at->iov_len, 30u);
  advanceIov(at, cnt, 30);
  EXPECT_EQ(cnt, 0);
  EXPECT_EQ(at, v + 3);
}

TEST(AdvanceIov, empty_pieces_before_the_cut_are_skipped) {
  char a[8], b[8];
  iovec v[4] = {{a, 0}, {a, sizeof(a)}, {b, 0}, {b, sizeof(b)}};
  iovec* at = v;
  int cnt = 4;
  advanceIov(at, cnt, 10);  // the empty piece, all of a, the empty one, 2 of b
  EXPECT_EQ(cnt, 1);
  EXPECT_EQ(at, v + 3);
  EXPECT_EQ(at->iov_base, b + 2);
  EXPECT_EQ(at->iov_len, 6u);
}

}  // namespace
}  // namespace hawser::net
