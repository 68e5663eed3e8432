// Which data connection each posted tcp slice goes to (tcp_conn_picker.h):
// round-robin for a lone thread, home connections while several threads
// submit, the least loaded one past tcp.home_slack, loads counted.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "transport/tcp/tcp_conn_picker.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser {
namespace {

using tcp::Conn;
using tcp::ConnPicker;

constexpr uint64_t kSlack = 4 << 20;
constexpr uint32_t kSlice = 1 << 20;
constexpr uint32_t kWindowMs = 50;
constexpr int64_t kWindowNs = kWindowMs * 1000000ll;

std::unique_ptr<tcp::Peer> peerWith(size_t conns) {
  auto p = std::make_unique<tcp::Peer>();
  for (size_t i = 0; i < conns; ++i) {
    auto c = std::make_unique<Conn>();
    c->peer = p.get();
    c->index = static_cast<uint32_t>(i);
    p->conns.push_back(std::move(c));
  }
  return p;
}

// Indices of the connections `slices` slices of kSlice bytes went to (one
// task of that many slices), picked by thread `seat` at `now`.
std::vector<uint32_t> post(tcp::Peer& p, uint32_t seat, int64_t now, uint32_t slices, bool home = true,
                           bool* home_mode = nullptr) {
  ConnPicker picker(home, kSlack, kWindowMs, seat, now);
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < slices; ++i) out.push_back(picker.pick(&p, kSlice, i == 0 ? slices : 0)->index);
  if (home_mode) *home_mode = picker.homeMode();
  return out;
}

int64_t loadOf(const tcp::Peer& p, size_t i) { return p.conns[i]->load.load(); }

TEST(TcpConnPicker, a_lone_thread_spreads_its_slices_round_robin_over_every_connection) {
  auto p = peerWith(3);
  bool home = true;
  EXPECT_EQ(post(*p, 7, 1000, 4, true, &home), (std::vector<uint32_t>{0, 1, 2, 0}));
  EXPECT_FALSE(home);
  // The next post goes on where the last one ended.
  EXPECT_EQ(post(*p, 7, 2000, 2), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(loadOf(*p, 0), 2 * kSlice);
  EXPECT_EQ(loadOf(*p, 1), 2 * kSlice);
  EXPECT_EQ(loadOf(*p, 2), 2 * kSlice);
}

TEST(TcpConnPicker, while_two_threads_submit_each_keeps_to_its_home_connection) {
  auto p = peerWith(2);
  post(*p, 4, 1000, 2);  // the first thread alone: spread
  bool home = false;
  // A second thread posts within the window: both keep to their homes
  // (seat modulo the connection count).
  EXPECT_EQ(post(*p, 5, 2000, 3, true, &home), (std::vector<uint32_t>{1, 1, 1}));
  EXPECT_TRUE(home);
  EXPECT_EQ(post(*p, 4, 3000, 3), (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(post(*p, 5, 4000, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(loadOf(*p, 0), 4 * kSlice);
  EXPECT_EQ(loadOf(*p, 1), 5 * kSlice);
}

TEST(TcpConnPicker, a_home_connection_past_the_slack_hands_slices_to_the_least_loaded_one) {
  auto p = peerWith(3);
  post(*p, 0, 1000, 1);
  post(*p, 1, 1000, 1);  // shared from here on
  p->conns[0]->load = 0;
  p->conns[1]->load = 2 * kSlice;
  p->conns[2]->load = kSlice;
  // Seat 1's home (connection 1) takes slices while it is at most 4 MiB
  // beyond the least loaded; past that the least loaded (the lower index
  // among equals) takes one.
  std::vector<uint32_t> got = post(*p, 1, 2000, 10);
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 1, 1, 0, 1, 0, 2, 1, 0, 2}));
  EXPECT_EQ(loadOf(*p, 0), 3 * kSlice);
  EXPECT_EQ(loadOf(*p, 1), 7 * kSlice);
  EXPECT_EQ(loadOf(*p, 2), 3 * kSlice);
}

TEST(TcpConnPicker, once_no_other_thread_posted_for_the_window_a_thread_spreads_again) {
  auto p = peerWith(2);
  post(*p, 2, 1000, 1);
  post(*p, 3, 2000, 1);  // shared until 2000 + window
  bool home = false;
  post(*p, 3, 2000 + kWindowNs - 1, 1, true, &home);
  EXPECT_TRUE(home);
  post(*p, 3, 2000 + kWindowNs, 2, true, &home);
  EXPECT_FALSE(home);
}

TEST(TcpConnPicker, home_connections_off_always_spreads) {
  auto p = peerWith(2);
  post(*p, 0, 1000, 1, false);
  bool home = true;
  EXPECT_EQ(post(*p, 1, 1001, 4, false, &home), (std::vector<uint32_t>{1, 0, 1, 0}));
  EXPECT_FALSE(home);
}

TEST(TcpConnPicker, one_connection_needs_no_choice) {
  auto p = peerWith(1);
  post(*p, 0, 1000, 1);
  bool home = true;
  EXPECT_EQ(post(*p, 1, 1001, 2, true, &home), (std::vector<uint32_t>{0, 0}));
  EXPECT_FALSE(home);
  EXPECT_EQ(loadOf(*p, 0), 3 * kSlice);
}

TEST(TcpConnPicker, loads_reach_the_connections_when_the_picker_moves_to_another_peer) {
  auto a = peerWith(2), b = peerWith(2);
  ConnPicker picker(true, kSlack, kWindowMs, 0, 1000);
  picker.pick(a.get(), 100, 1);
  EXPECT_EQ(loadOf(*a, 0) + loadOf(*a, 1), 0);  // not yet
  picker.pick(b.get(), 200, 1);
  EXPECT_EQ(loadOf(*a, 0) + loadOf(*a, 1), 100);
  picker.flush();
  EXPECT_EQ(loadOf(*b, 0) + loadOf(*b, 1), 200);
}

}  // namespace
}  // namespace hawser
