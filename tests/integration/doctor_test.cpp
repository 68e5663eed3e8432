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

// The file transport's typed records: io_uring and cuFile, each with its mode.
const json* deviceOf(const json& t, const std::string& kind) {
  for (auto& d : t["devices"])
    if (d["kind"] == kind) return &d;
  return nullptr;
}

TEST(Doctor, file_records_io_uring_and_cufile_with_their_modes) {
  // file.engine=posix: io_uring is off; a cuFile library that does not load is absent.
  json j = doctor("", "HAWSER_FILE_ENGINE=posix HAWSER_FILE_CUFILE_LIB=/nonexistent/libcufile.so.0");
  const json* file = transport(j, "file");
  ASSERT_NE(file, nullptr) << j.dump();
  const json* uring = deviceOf(*file, "io_uring");
  ASSERT_NE(uring, nullptr) << file->dump();
  EXPECT_EQ((*uring)["name"], "io_uring");
  EXPECT_EQ((*uring)["mode"], "off") << uring->dump();
  EXPECT_FALSE((*uring)["used"].get<bool>());
  EXPECT_EQ((*uring)["reason"], "file.engine=posix");
  const json* cufile = deviceOf(*file, "cufile");
  ASSERT_NE(cufile, nullptr) << file->dump();
  EXPECT_EQ((*cufile)["name"], "/nonexistent/libcufile.so.0");
  EXPECT_EQ((*cufile)["mode"], "absent") << cufile->dump();
  EXPECT_FALSE((*cufile)["used"].get<bool>());
  EXPECT_FALSE((*cufile)["reason"].get<std::string>().empty()) << cufile->dump();
  // file.cufile=off: off, whatever the library.
  j = doctor("", "HAWSER_FILE_CUFILE=off");
  ASSERT_NE(file = transport(j, "file"), nullptr) << j.dump();
  ASSERT_NE(cufile = deviceOf(*file, "cufile"), nullptr) << file->dump();
  EXPECT_EQ((*cufile)["mode"], "off");
  EXPECT_EQ((*cufile)["reason"], "file.cufile=off");
  // io_uring as the engine where the kernel allows it: usable and used, or
  // unavailable with the kernel's refusal.
  ASSERT_NE(uring = deviceOf(*file, "io_uring"), nullptr) << file->dump();
  if ((*uring)["used"].get<bool>()) {
    EXPECT_EQ((*uring)["mode"], "usable");
  } else {
    EXPECT_EQ((*uring)["mode"], "unavailable") << uring->dump();
    EXPECT_FALSE((*uring)["reason"].get<std::string>().empty());
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
