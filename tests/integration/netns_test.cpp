// Two "hosts" on one machine: network namespaces joined by a veth pair, a
// `hawser serve` in one and a `hawser bench` in the other, moving verified
// data over the engine. Skipped (with the reason) where the machine does not
// allow `ip netns`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/util.h"

using namespace hawser::test;

namespace {

class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (sh("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 (ip) is not installed";
    tag_ = std::to_string(::getpid() % 100000);
    a_ = "hwa" + tag_;
    b_ = "hwb" + tag_;
    // A /30 of our own, unique per test process.
    int n = static_cast<int>(::getpid() % 250) + 1;
    ip_a_ = "10.213." + std::to_string(n) + ".1";
    ip_b_ = "10.213." + std::to_string(n) + ".2";
    std::string err;
    std::string cmd = "set -e; ip netns add " + a_ + "; ip netns add " + b_ + "; ip link add va" + tag_ +
                      " type veth peer name vb" + tag_ + "; ip link set va" + tag_ + " netns " + a_ +
                      "; ip link set vb" + tag_ + " netns " + b_ + "; ip -n " + a_ + " addr add " + ip_a_ +
                      "/30 dev va" + tag_ + "; ip -n " + b_ + " addr add " + ip_b_ + "/30 dev vb" + tag_ +
                      "; ip -n " + a_ + " link set va" + tag_ + " up; ip -n " + b_ + " link set vb" + tag_ +
                      " up; ip -n " + a_ + " link set lo up; ip -n " + b_ + " link set lo up 2>&1";
    if (sh(cmd, &err) != 0) {
      cleanup();
      GTEST_SKIP() << "this machine does not allow ip netns/veth: " << err;
    }
    made_ = true;
  }
  void TearDown() override { cleanup(); }
  void cleanup() {
    sh("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null");
  }
  // `hawser serve` of `memory` bytes in namespace a_; `seg` its segment name.
  void serveInA(Child& serve, const std::string& memory, std::string& seg) {
    ASSERT_TRUE(serve.exec({"ip", "netns", "exec", a_, hawserBin(), "serve", "--listen", ip_a_ + ":0", "--memory",
                            memory}));
    seg = serve.waitFor("segment: ", 20000);
    ASSERT_FALSE(seg.empty()) << "serve did not start in namespace " << a_;
    ASSERT_FALSE(serve.waitFor("ready", 20000).empty());
    seg = seg.substr(9);
  }
  std::string tag_, a_, b_, ip_a_, ip_b_;
  bool made_ = false;
};

TEST_F(NetnsHosts, serve_on_one_host_and_bench_on_another_move_verified_data) {
  Child serve;
  std::string seg;
  ASSERT_NO_FATAL_FAILURE(serveInA(serve, "64M", seg));
  ASSERT_EQ(seg.rfind(ip_a_ + ":", 0), 0u) << seg;
  for (const char* op : {"write", "read"}) {
    std::string out;
    int rc = sh("ip netns exec " + b_ + " " + hawserBin() + " bench --target " + seg + " --host " + ip_b_ +
                    " --op " + op + " --block-size 256K --batch-size 8 --threads 2 --total 128M --json 2>&1",
                &out);
    ASSERT_EQ(rc, 0) << out;
    // The summary is the last line.
    while (!out.empty() && out.back() == '\n') out.pop_back();
    auto last = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
    auto j = nlohmann::json::parse(last, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(j["op"], op);
    EXPECT_EQ(j["verified"], true) << out;
    EXPECT_GE(j["bytes"].get<uint64_t>(), 128u << 20);
    // One host, two network namespaces: shm's abstract socket is not
    // reachable across them; tcp carried the data.
    EXPECT_EQ(j["transports"], nlohmann::json::array({"tcp"})) << out;
  }
  std::string doc;
  ASSERT_EQ(sh("ip netns exec " + b_ + " " + hawserBin() + " doctor --peer " + seg +
                   " --json 2>/dev/null",
               &doc),
            0)
      << doc;
  auto d = nlohmann::json::parse(lastLine(doc), nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << doc;
  EXPECT_EQ(d["peer"]["routes"]["cpu:0"]["transport"], "tcp") << doc;
  EXPECT_NE(d["peer"]["routes"]["cpu:0"]["why"].get<std::string>().find(
                "abstract sockets belong to a network namespace, and the peer runs in another one"),
            std::string::npos)
      << doc;
}

// Two containers of one host: one kernel (boot id), two network
// namespaces. shm could serve them but the engine cannot know the peer is
// reachable by it; the fallback to tcp is counted with its reason
// (docs/routes.md), and doctor --peer shows it.
TEST_F(NetnsHosts, a_peer_in_another_network_namespace_of_this_kernel_is_a_counted_fallback_from_shm) {
  Child serve;
  std::string seg;
  ASSERT_NO_FATAL_FAILURE(serveInA(serve, "16M", seg));
  std::string out;
  ASSERT_EQ(sh("ip netns exec " + b_ + " " + hawserBin() + " bench --target " + seg + " --host " + ip_b_ +
                   " --op read --block-size 64K --batch-size 8 --threads 1 --total 8M --json 2>/dev/null",
               &out),
            0)
      << out;
  auto j = nlohmann::json::parse(lastLine(out), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["transports"], nlohmann::json::array({"tcp"})) << out;
  ASSERT_TRUE(j["metrics"].contains("hawser_route_fallbacks_total")) << out;
  auto& samples = j["metrics"]["hawser_route_fallbacks_total"]["samples"];
  ASSERT_EQ(samples.size(), 1u) << samples.dump();
  EXPECT_EQ(samples[0]["labels"], nlohmann::json({{"from", "shm"}, {"to", "tcp"}, {"reason", "other_net_namespace"}}));
  EXPECT_GE(samples[0]["value"].get<double>(), 128.0) << "every 64 KiB request of 8 MiB, counted";
  ASSERT_EQ(sh("ip netns exec " + b_ + " " + hawserBin() + " doctor --json --peer " + seg +
                   " 2>/dev/null",
               &out),
            0)
      << out;
  auto d = nlohmann::json::parse(lastLine(out), nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << out;
  EXPECT_EQ(d["peer"]["routes"]["cpu:0"]["fallback"]["reason"], "other_net_namespace") << d["peer"].dump();
}

}  // namespace
