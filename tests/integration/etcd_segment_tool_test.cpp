// `hawser segment` end to end, against a real etcd and against the p2p JSON
// file: register / map / list / show / remove, exit codes for each failure,
// concurrent maps that all survive, and file segments read by engines
// (through each engine's own path map entry).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/etcd_server.h"
#include "common/util.h"
#include "hawser/engine.h"

namespace hawser {
namespace {

using test::Buffer;
using test::EtcdServer;
namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out;  // stdout
  nlohmann::json json() const {
    std::string last;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) last = line;
    return nlohmann::json::parse(last, nullptr, false);
  }
};

CliRun hawser(const std::vector<std::string>& args) {
  test::Child c;
  CliRun r;
  if (!c.start(args)) return r;
  r.rc = c.wait();
  std::ifstream in(c.out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

Status readAll(TransferEngine& e, const std::string& seg_name, void* dst, size_t len) {
  SegmentID seg = kInvalidSegment;
  Status s = e.openSegment(seg_name, seg);
  if (!s.ok()) return s;
  Status submit;
  auto st = test::runBatch(e, seg, {TransferRequest{OpCode::kRead, dst, seg, 0, len}}, 20000, &submit);
  (void)e.closeSegment(seg);
  if (!submit.ok()) return submit;
  if (st.size() != 1 || st[0].s != TransferState::kCompleted)
    return Status(Code::kIoError, "read of " + seg_name + " ended " +
                                      (st.empty() ? std::string("?") : std::string(stateName(st[0].s)) + ": " +
                                                                           st[0].error.toString()));
  return Status::OK();
}

constexpr size_t kA = 64 << 10, kB = 32 << 10;

class SegmentToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
    ::setenv("HAWSER_ETCD_LEASE_TTL_S", "2", 1);
    ::setenv("HAWSER_ETCD_TIMEOUT_MS", "1000", 1);
    ::setenv("HAWSER_ETCD_RETRIES", "1", 1);
    ASSERT_TRUE(etcd_.start()) << etcd_.error();
    dir_ = tmp_.path;
    ASSERT_FALSE(dir_.empty());
    // The segment's two files as node-a sees them ...
    fs::create_directories(dir_ + "/a");
    ASSERT_TRUE(test::writeFile(dir_ + "/a/part0", kA, 5, 0));
    ASSERT_TRUE(test::writeFile(dir_ + "/a/part1", kB, 5, kA));
    // ... and as node-b sees them: other paths, recognisably other content.
    fs::create_directories(dir_ + "/b");
    ASSERT_TRUE(test::writeFile(dir_ + "/b/p0", kA, 9, 0));
    ASSERT_TRUE(test::writeFile(dir_ + "/b/p1", kB, 9, kA));
  }
  std::vector<std::string> seg(std::vector<std::string> args) {
    args.insert(args.begin(), "segment");
    args.push_back("--metadata");
    args.push_back(etcd_.uri());
    return args;
  }
  EtcdServer etcd_;
  test::TempDir tmp_;
  std::string dir_;
};

TEST_F(SegmentToolTest, register_map_list_show_remove_end_to_end_with_engines) {
  CliRun r = hawser(seg({"register", "ckpt", dir_ + "/a/part0", dir_ + "/a/part1", "--name", "node-a", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = r.json();
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["kind"], "file");
  EXPECT_EQ(j["bytes"], kA + kB);
  EXPECT_EQ(j["key"], "hawser/files/ckpt");
  EXPECT_EQ(j["descriptor"]["files"][0]["local_path_map"]["node-a"], dir_ + "/a/part0");

  // node-b's paths, one by file path and one by index.
  r = hawser(seg({"map", "ckpt", dir_ + "/a/part0", dir_ + "/b/p0", "--host", "node-b"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  r = hawser(seg({"map", "ckpt", "1", dir_ + "/b/p1", "--host", "node-b", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json()["descriptor"]["files"][1]["local_path_map"]["node-b"], dir_ + "/b/p1");

  Buffer abuf(kA + kB), bbuf(kA + kB);  // outlive the engines that register them
  TransferEngine a, b;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());

  // list: memory segments with their owner, the file segment with its size.
  r = hawser(seg({"list", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  j = r.json();
  ASSERT_TRUE(j.is_object()) << r.out;
  std::map<std::string, nlohmann::json> by_name;
  for (auto& it : j["segments"]) by_name[it["name"].template get<std::string>()] = it;
  ASSERT_EQ(by_name.size(), 3u) << r.out;
  EXPECT_EQ(by_name["ckpt"]["kind"], "file");
  EXPECT_EQ(by_name["node-a"]["kind"], "memory");
  EXPECT_EQ(by_name["node-a"]["owner"]["rpc_port"], a.rpcPort());
  EXPECT_NE(by_name["node-b"]["lease"], 0);

  r = hawser(seg({"show", "ckpt"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("node-b -> " + dir_ + "/b/p1"), std::string::npos) << r.out;

  // Each engine reads the segment through its own path map entry.
  ASSERT_TRUE(test::hasTransport(a, "file")) << "file is always built and always installs";
  ASSERT_TRUE(a.registerLocalMemory(abuf.p, abuf.n).ok());
  ASSERT_TRUE(b.registerLocalMemory(bbuf.p, bbuf.n).ok());
  Status s = readAll(a, "ckpt", abuf.p, kA + kB);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(abuf.p, kA + kB, 5), -1);
  s = readAll(b, "ckpt", bbuf.p, kA + kB);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(bbuf.p, kA + kB, 9), -1);

  // A file segment registered through one engine's API is read by the other.
  FileDesc f;
  f.file_path = dir_ + "/a/part1";
  f.length = kB;
  f.local_path_map["node-b"] = dir_ + "/b/p1";
  ASSERT_TRUE(a.registerFileSegment("shard", {f}).ok());
  s = readAll(b, "shard", bbuf.p, kB);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(bbuf.p, kB, 9, kA), -1);

  r = hawser(seg({"remove", "ckpt"}));
  ASSERT_EQ(r.rc, 0) << r.out;
  r = hawser(seg({"show", "ckpt", "--json"}));
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_EQ(r.json()["error"]["code"], "segment_not_found") << r.out;
}

TEST_F(SegmentToolTest, exit_codes_name_each_failure) {
  // Taken name, missing file, empty file, bad map target, memory segment removal.
  ASSERT_EQ(hawser(seg({"register", "ckpt", dir_ + "/a/part0"})).rc, 0);
  CliRun r = hawser(seg({"register", "ckpt", dir_ + "/a/part1", "--json"}));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.json()["error"]["code"], "invalid_argument") << r.out;
  EXPECT_EQ(hawser(seg({"register", "ckpt", dir_ + "/a/part1", "--replace"})).rc, 0);
  EXPECT_EQ(hawser(seg({"register", "other", dir_ + "/missing"})).rc, 3);
  std::ofstream(dir_ + "/empty").close();
  EXPECT_EQ(hawser(seg({"register", "other", dir_ + "/empty"})).rc, 2);
  EXPECT_EQ(hawser(seg({"register", "a/b", dir_ + "/a/part0"})).rc, 2);
  EXPECT_EQ(hawser(seg({"map", "ckpt", "/not/a/file/of/it", "/x", "--host", "h"})).rc, 2);
  EXPECT_EQ(hawser(seg({"map", "ckpt", "0", "relative/path", "--host", "h"})).rc, 2);
  EXPECT_EQ(hawser(seg({"map", "nope", "0", "/x", "--host", "h"})).rc, 3);
  EXPECT_EQ(hawser(seg({"remove", "nope"})).rc, 3);
  {
    TransferEngine e;
    ASSERT_TRUE(e.init(etcd_.uri(), "node-a").ok());
    r = hawser(seg({"remove", "node-a"}));
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_EQ(hawser(seg({"map", "node-a", "0", "/x", "--host", "h"})).rc, 2);
  }
  // Metadata problems.
  uint16_t dead = test::freeLoopbackPort();
  r = hawser({"segment", "list", "--metadata", "etcd://127.0.0.1:" + std::to_string(dead), "--json"});
  EXPECT_EQ(r.rc, 4);
  EXPECT_EQ(r.json()["error"]["code"], "unavailable") << r.out;
  r = hawser({"segment", "list", "--metadata", "etcd://127.0.0.1", "--json"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("etcd://127.0.0.1"), std::string::npos);
  EXPECT_EQ(hawser({"segment", "list"}).rc, 2);  // p2p without --file-segments
}

TEST_F(SegmentToolTest, concurrent_maps_from_several_processes_are_all_kept) {
  ASSERT_EQ(hawser(seg({"register", "ckpt", dir_ + "/a/part0"})).rc, 0);
  constexpr int kProcs = 6;
  std::vector<std::unique_ptr<test::Child>> kids;
  for (int i = 0; i < kProcs; ++i) {
    kids.push_back(std::make_unique<test::Child>());
    ASSERT_TRUE(kids.back()->start(
        seg({"map", "ckpt", "0", "/mnt/h" + std::to_string(i) + "/part0", "--host", "h" + std::to_string(i)})));
  }
  for (auto& k : kids) EXPECT_EQ(k->wait(), 0);
  CliRun r = hawser(seg({"show", "ckpt", "--json"}));
  ASSERT_EQ(r.rc, 0);
  auto map = r.json()["descriptor"]["files"][0]["local_path_map"];
  EXPECT_EQ(map.size(), size_t(kProcs + 1)) << map.dump();  // + this host's own entry
}

TEST_F(SegmentToolTest, p2p_file_segments_json_is_what_a_p2p_engine_loads) {
  const std::string json = dir_ + "/segments.json";
  CliRun r = hawser({"segment", "register", "ckpt", dir_ + "/a/part0", dir_ + "/a/part1", "--name", "node-a",
                  "--file-segments", json});
  ASSERT_EQ(r.rc, 0) << r.out;
  r = hawser({"segment", "map", "ckpt", "1", dir_ + "/b/p1", "--host", "node-b", "--file-segments", json});
  ASSERT_EQ(r.rc, 0) << r.out;
  r = hawser({"segment", "list", "--file-segments", json, "--json"});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.json()["segments"].size(), 1u) << r.out;

  ::setenv("HAWSER_FILE_SEGMENTS", json.c_str(), 1);
  Buffer buf(kA + kB);
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "node-a").ok());
  ::unsetenv("HAWSER_FILE_SEGMENTS");
  ASSERT_TRUE(test::hasTransport(e, "file")) << "file is always built and always installs";
  ASSERT_TRUE(e.registerLocalMemory(buf.p, buf.n).ok());
  Status s = readAll(e, "ckpt", buf.p, kA + kB);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(buf.p, kA + kB, 5), -1);

  r = hawser({"segment", "remove", "ckpt", "--file-segments", json});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(hawser({"segment", "show", "ckpt", "--file-segments", json}).rc, 3);
}

}  // namespace
}  // namespace hawser
