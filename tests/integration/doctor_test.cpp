// `hawser doctor` reports every transport of the build through the engine's
// diagnose(), and for a peer which transport each memory kind would take.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/util.h"

using namespace hawser::test;
using json = nlohmann::json;

namespace {

// `env`: "KEY=VALUE ..." for the doctor process.
json doctor(const std::string& args, const std::string& env = "") {
  std::string out;
  int rc = sh(env + " " + hawserBin() + " doctor --json " + args, &out);
  EXPECT_EQ(rc, 0) << out;
  return json::parse(lastLine(out));
}

const json* transport(const json& j, const std::string& name) {
  for (auto& t : j["transports"])
    if (t["name"] == name) return &t;
  return nullptr;
}

}  // namespace

TEST(Doctor, every_transport_of_the_build_says_if_it_installed_and_what_it_moves) {
  json j = doctor("");
  ASSERT_TRUE(j["metadata"]["reachable"].get<bool>());
  const json* tcp = transport(j, "tcp");
  ASSERT_NE(tcp, nullptr) << j.dump();
  EXPECT_TRUE((*tcp)["installed"].get<bool>());
  EXPECT_EQ((*tcp)["cost_rank"].get<int>(), 40);
  EXPECT_NE((*tcp)["moves"].get<std::string>().find("memory segments"), std::string::npos);
  const json* file = transport(j, "file");
  ASSERT_NE(file, nullptr) << j.dump();
  EXPECT_TRUE((*file)["installed"].get<bool>());
  EXPECT_FALSE((*file)["facts"].empty()) << "the file transport says what it found (io_uring, engine)";
  for (auto& t : j["transports"]) {
    if (!t["installed"].get<bool>()) {
      EXPECT_FALSE(t["reason"].get<std::string>().empty()) << t.dump();
    }
  }
}

TEST(Doctor, unreachable_metadata_is_reported_and_transports_still_listed) {
  json j = doctor("--metadata etcd://127.0.0.1:1");
  EXPECT_FALSE(j["metadata"]["reachable"].get<bool>());
  EXPECT_FALSE(j["metadata"]["error"].get<std::string>().empty());
  EXPECT_NE(transport(j, "tcp"), nullptr) << j.dump();
}

TEST(Doctor, for_a_peer_it_names_the_transport_each_memory_kind_would_take_and_why) {
  Child serve;
  ASSERT_TRUE(serve.start({"serve", "--listen", "127.0.0.1:0", "--memory", "4M"}));
  std::string seg = serve.waitFor("segment: ");
  ASSERT_FALSE(seg.empty());
  ASSERT_FALSE(serve.waitFor("ready").empty());
  // No CUDA driver in the doctor (even on a GPU host): GPU memory has no route.
  json j = doctor("--peer " + seg.substr(9), "HAWSER_GPU_CUDA_DRIVER=/nonexistent/libcuda.so.1");
  ASSERT_TRUE(j.contains("peer")) << j.dump();
  auto& routes = j["peer"]["routes"];
  // Host memory: the peer is a process of this host, so shm (cross-memory
  // attach; the tests run as root, which the kernel lets attach).
  EXPECT_EQ(routes["cpu:0"]["transport"], "shm") << routes.dump();
  EXPECT_NE(routes["cpu:0"]["why"].get<std::string>().find("shm (rank 20)"), std::string::npos) << routes.dump();
  // GPU memory never goes to shm (nor tcp): nothing here moves it.
  EXPECT_EQ(routes["cuda:0"]["transport"], "") << routes.dump();
  for (const char* t : {"shm", "tcp"})
    EXPECT_NE(routes["cuda:0"]["why"].get<std::string>().find(std::string(t) + ": does not move local GPU memory"),
              std::string::npos)
        << routes.dump();
}

TEST(Doctor, an_unknown_peer_is_an_error_naming_it) {
  json j = doctor("--peer 127.0.0.1:1");
  ASSERT_TRUE(j.contains("peer")) << j.dump();
  EXPECT_NE(j["peer"]["error"].get<std::string>().find("127.0.0.1:1"), std::string::npos) << j.dump();
}
