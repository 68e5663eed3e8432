// Peers that hold connections and announce bodies they never send (issue
// 30): the listener's memory follows the bytes that came, frames that do not
// come whole in time close their connections, connections over the caps are
// refused at accept with a logged reason, and every other peer keeps being
// served — on control connections, on Hellos, and on the tcp data channel.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/log_capture.h"
#include "common/rpc_echo.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

using namespace hawser;
using hawser::test::eventually;

namespace {

// A connection to 127.0.0.1:port from `source` (any 127/8 address: the
// loopback answers them all, so each is another peer address).
net::Fd connectFrom(const std::string& source, uint16_t port) {
  net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &a.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return net::Fd();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return net::Fd();
  return fd;
}

std::string frame(uint16_t type, uint32_t length) {
  rpc::Frame f;
  f.type = type;
  f.length = length;
  return std::string(reinterpret_cast<char*>(&f), sizeof(f));
}

bool sendBytes(int fd, const std::string& b) { return net::sendAll(fd, b.data(), b.size()).ok(); }

// Whether the server ended the connection (EOF or reset) within `limit`.
bool endsWithin(int fd, std::chrono::milliseconds limit) {
  net::setTimeouts(fd, limit);
  char c;
  ssize_t n;
  do {
    n = ::recv(fd, &c, 1, 0);
  } while (n > 0 || (n < 0 && errno == EINTR));
  return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

// The process's peak resident set (VmHWM) in bytes, after resetPeak().
uint64_t peakRss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}
bool resetPeak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f.flush());
}

class RpcLimits : public ::testing::Test {
 protected:
  void start(const rpc::ServerLimits& limits) { ASSERT_TRUE(echo_.start(limits).ok()); }
  void TearDown() override { server_.stop(); }
  bool echoWorks() { return echo_.echoWorks(); }
  test::EchoServer echo_;
  rpc::Server& server_ = echo_.server;
};

TEST_F(RpcLimits, silent_clients_announcing_16_mib_bodies_pin_no_memory_and_end_at_the_frame_deadline) {
  rpc::ServerLimits l;
  l.frame_timeout = std::chrono::milliseconds(1500);
  ASSERT_NO_FATAL_FAILURE(start(l));
  if (!resetPeak()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak RSS here";
  const uint64_t before = peakRss();
  constexpr int kClients = 64;  // 64 x 16 MiB = 1 GiB if bodies were allocated when announced
  std::vector<net::Fd> fds;
  for (int i = 0; i < kClients; ++i) {
    fds.push_back(connectFrom("127.0.0.1", server_.port()));
    ASSERT_TRUE(fds.back()) << i;
    ASSERT_TRUE(sendBytes(fds.back().get(), frame(rpc::kConnControl, 0) + frame(rpc::kPing, rpc::kMaxControlBody) +
                                                std::string(100, 'b')));
  }
  // Everyone else is served meanwhile.
  EXPECT_TRUE(echoWorks());
  for (int i = 0; i < kClients; ++i) EXPECT_TRUE(endsWithin(fds[i].get(), std::chrono::seconds(20))) << i;
  EXPECT_TRUE(eventually([&] { return server_.lateFrames() == kClients; })) << server_.lateFrames();
  const uint64_t grown = peakRss() - before;
  EXPECT_LT(grown, 64u << 20) << "the peak RSS grew by " << grown << " bytes for bodies that never came";
  EXPECT_TRUE(echoWorks());
}

TEST_F(RpcLimits, a_hello_or_a_header_that_never_completes_ends_at_the_frame_deadline) {
  rpc::ServerLimits l;
  l.frame_timeout = std::chrono::milliseconds(300);
  ASSERT_NO_FATAL_FAILURE(start(l));
  // Half a Hello header; a Hello announcing a token it never sends; half a
  // call header; a call header and half its body.
  const std::vector<std::string> partial = {
      frame(rpc::kConnControl, 0).substr(0, 10),
      frame(rpc::kConnControl, 100) + "abc",
      frame(rpc::kConnControl, 0) + frame(rpc::kPing, 10).substr(0, 5),
      frame(rpc::kConnControl, 0) + frame(rpc::kPing, 1000) + std::string(500, 'x'),
  };
  std::vector<net::Fd> fds;
  for (auto& p : partial) {
    fds.push_back(connectFrom("127.0.0.1", server_.port()));
    ASSERT_TRUE(fds.back());
    ASSERT_TRUE(sendBytes(fds.back().get(), p));
  }
  for (size_t i = 0; i < fds.size(); ++i) EXPECT_TRUE(endsWithin(fds[i].get(), std::chrono::seconds(20))) << i;
  EXPECT_TRUE(eventually([&] { return server_.lateFrames() == partial.size(); })) << server_.lateFrames();
  EXPECT_TRUE(echoWorks());
}

TEST_F(RpcLimits, an_idle_control_connection_between_frames_is_not_a_late_frame) {
  rpc::ServerLimits l;
  l.frame_timeout = std::chrono::milliseconds(100);
  ASSERT_NO_FATAL_FAILURE(start(l));
  net::Fd fd = connectFrom("127.0.0.1", server_.port());
  ASSERT_TRUE(fd);
  ASSERT_TRUE(sendBytes(fd.get(), frame(rpc::kConnControl, 0)));
  // Idle for several frame timeouts: the connection stays (persistent
  // control connections, rpc::Connection, idle between calls).
  ASSERT_TRUE(eventually([&] { return server_.openControlConnections() == 1; }));
  EXPECT_TRUE(test::holdsFor([&] { return server_.openControlConnections() == 1; }, std::chrono::milliseconds(500)));
  // Then a call on it is answered.
  ASSERT_TRUE(sendBytes(fd.get(), frame(rpc::kPing, 2) + "hi"));
  rpc::Frame r;
  net::setTimeouts(fd.get(), std::chrono::seconds(5));
  ASSERT_TRUE(net::recvAll(fd.get(), &r, sizeof(r)).ok());
  EXPECT_EQ(r.type, rpc::kPing | rpc::kReplyBit);
  EXPECT_EQ(r.length, 2u);
  EXPECT_EQ(server_.lateFrames(), 0u);
}

TEST_F(RpcLimits, control_connections_over_the_caps_are_refused_at_accept_with_a_logged_reason) {
  rpc::ServerLimits l;
  l.max_control_per_peer = 4;
  l.max_control = 6;
  ASSERT_NO_FATAL_FAILURE(start(l));
  test::LogCapture log;
  std::vector<net::Fd> held;
  auto hold = [&](const std::string& from) {
    held.push_back(connectFrom(from, server_.port()));
    return held.back() && sendBytes(held.back().get(), frame(rpc::kConnControl, 0));
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(hold("127.0.0.2"));
  ASSERT_TRUE(eventually([&] { return server_.openControlConnections() == 4; }));
  // A fifth from the same address: refused at once.
  net::Fd over = connectFrom("127.0.0.2", server_.port());
  ASSERT_TRUE(over);
  EXPECT_TRUE(endsWithin(over.get(), std::chrono::seconds(20)));
  EXPECT_TRUE(eventually([&] { return server_.refusedConnections() == 1; }));
  EXPECT_NE(log.text().find("refusing a connection from 127.0.0.2: 4 control connections from that address are "
                            "open (rpc.max_control_per_peer)"),
            std::string::npos)
      << log.text();
  // Another address is still served, up to the total.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(hold("127.0.0.3"));
  ASSERT_TRUE(eventually([&] { return server_.openControlConnections() == 6; }));
  net::Fd total = connectFrom("127.0.0.4", server_.port());
  ASSERT_TRUE(total);
  EXPECT_TRUE(endsWithin(total.get(), std::chrono::seconds(20)));
  EXPECT_TRUE(eventually([&] { return server_.refusedConnections() == 2; }));
  // (The second refusal falls within a second of the first: counted, and
  // named on the next line logged.)
  // Once some close, calls are served again.
  held.clear();
  ASSERT_TRUE(eventually([&] { return server_.openControlConnections() == 0; }));
  EXPECT_TRUE(echoWorks());
}

TEST_F(RpcLimits, the_total_connection_cap_counts_data_connections_too) {
  rpc::ServerLimits l;
  l.max_connections = 3;
  const rpc::Channel kind = rpc::channel("test.limits.stream");
  std::atomic<int> streams{0};
  ASSERT_TRUE(server_.onStream(kind, [&](net::Fd fd) {
    streams++;
    char c;
    while (::recv(fd.get(), &c, 1, 0) > 0) {
    }
  }).ok());
  ASSERT_NO_FATAL_FAILURE(start(l));
  std::vector<net::Fd> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(connectFrom("127.0.0.5", server_.port()));
    ASSERT_TRUE(sendBytes(held.back().get(), frame(kind.id, 0)));
  }
  ASSERT_TRUE(eventually([&] { return streams.load() == 3; }));
  EXPECT_EQ(server_.openControlConnections(), 0u) << "a data connection is not a control connection";
  net::Fd over = connectFrom("127.0.0.6", server_.port());
  EXPECT_TRUE(endsWithin(over.get(), std::chrono::seconds(20)));
  EXPECT_TRUE(eventually([&] { return server_.refusedConnections() == 1; }));
  held.pop_back();
  ASSERT_TRUE(eventually([&] { return server_.openConnections() == 2; }));
  EXPECT_TRUE(echoWorks());
}

// Two engines over tcp; the target is flooded by silent peers of another
// address on its control port and its tcp data channel. The initiator's
// descriptor fetches and transfers keep working; the silent connections end
// at their deadlines; the target's memory does not follow what they announced.
TEST(RpcFlood, a_legitimate_peer_keeps_fetching_descriptors_and_moving_bytes_while_others_hold_connections) {
  constexpr size_t kMem = 4u << 20;  // the legitimate peer's; silent writes go to the target's second half
  test::Buffer target_mem(2 * kMem), local_mem(kMem);
  EngineOptions topt;
  topt.config = {{"transport", "tcp"},
                 {"tcp.timeout_ms", "1500"},
                 {"rpc.frame_timeout_ms", "1500"},
                 {"rpc.max_control_per_peer", "40"}};
  EngineOptions iopt;
  iopt.config = {{"transport", "tcp"}};
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0, topt).ok());
  ASSERT_TRUE(init.init("p2p", "initiator", "127.0.0.1", 0, iopt).ok());
  ASSERT_TRUE(target.registerLocalMemory(target_mem.p, 2 * kMem, "cpu:0", true).ok());
  ASSERT_TRUE(init.registerLocalMemory(local_mem.p, kMem, "cpu:0", false).ok());
  const uint16_t port = target.rpcPort();
  const uint64_t remote = reinterpret_cast<uint64_t>(target_mem.p);

  test::LogCapture log;
  if (!resetPeak()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak RSS here";
  const uint64_t before = peakRss();
  std::vector<net::Fd> silent;
  // Control: 40 connections announcing 16 MiB each (the per-peer cap), and
  // 10 more refused at accept.
  for (int i = 0; i < 50; ++i) {
    silent.push_back(connectFrom("127.0.0.7", port));
    ASSERT_TRUE(silent.back());
    (void)sendBytes(silent.back().get(), frame(rpc::kConnControl, 0) + frame(rpc::kPing, rpc::kMaxControlBody));
  }
  // Data: writes announcing 4 MiB into registered memory and 64 MiB
  // outside it (refused: the payload is drained), and a half header.
  tcp::WireHeader w;
  w.type = tcp::kWriteReq;
  w.id = 1;
  const std::string hello = frame(kTcpDataChannel.id, 0);
  for (int i = 0; i < 8; ++i) {
    w.addr = i % 2 ? remote + kMem : 4096;
    w.size = w.length = i % 2 ? kMem : 64u << 20;
    std::string msg = hello + std::string(reinterpret_cast<char*>(&w), sizeof(w)) + std::string(1000, 'w');
    if (i == 7) msg = hello + std::string(reinterpret_cast<char*>(&w), sizeof(w) / 2);
    silent.push_back(connectFrom("127.0.0.8", port));
    ASSERT_TRUE(silent.back());
    ASSERT_TRUE(sendBytes(silent.back().get(), msg));
  }

  // Meanwhile, the legitimate peer: a fresh descriptor fetch, and transfers.
  for (int round = 0; round < 3; ++round) {
    SegmentID seg;
    ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok()) << round;
    test::fillPattern(local_mem.p, kMem, 100 + round);
    auto st = test::runBatch(init, seg, {{OpCode::kWrite, local_mem.p, seg, remote, kMem}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
    std::memset(local_mem.p, 0, kMem);
    st = test::runBatch(init, seg, {{OpCode::kRead, local_mem.p, seg, remote, kMem}});
    ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
    EXPECT_EQ(test::checkPattern(local_mem.p, kMem, 100 + round), -1);
    ASSERT_TRUE(init.closeSegment(seg).ok());
  }
  // Every silent connection ends (at its deadline, or at accept).
  for (size_t i = 0; i < silent.size(); ++i) EXPECT_TRUE(endsWithin(silent[i].get(), std::chrono::seconds(30))) << i;
  const uint64_t grown = peakRss() - before;
  EXPECT_LT(grown, 128u << 20) << "the peak RSS grew by " << grown << " bytes for bodies that never came";
  EXPECT_NE(log.text().find("(rpc.max_control_per_peer)"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("frame not whole within 1500 ms"), std::string::npos) << log.text();
  EXPECT_NE(log.text().find("no bytes from the peer for 1500 ms"), std::string::npos) << log.text();
}

}  // namespace
