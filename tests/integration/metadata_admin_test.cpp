// hawser::MetadataAdmin (hawser/metadata.h), the admin verbs of the metadata
// stores behind `hawser segment`: on the p2p file segments JSON file and on a
// real etcd on loopback. Register (create-if-absent / replace), show and list
// with raw state and decode errors, map a file's path for a host (concurrent
// maps all kept: flock on p2p, compare-and-swap on etcd), remove (memory
// segments only with force), and backing-file inspection.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/config.h"
#include "common/etcd_server.h"
#include "common/util.h"
#include "hawser/metadata.h"
#include "metadata/p2p_file_segments.h"
#if HAWSER_HAVE_ETCD
#include "metadata/etcd_store.h"
#endif

namespace hawser {
namespace {

using test::EtcdServer;
namespace fs = std::filesystem;

void writeBytes(const std::string& path, size_t n) { std::ofstream(path, std::ios::binary) << std::string(n, 'x'); }

FileDesc fileOf(const std::string& path, uint64_t length, const std::string& host = "node-a") {
  FileDesc f;
  f.file_path = path;
  f.length = length;
  f.local_path_map[host] = path;
  return f;
}

// Keeps the environment from choosing a file segments file for the test.
struct NoFileSegmentsEnv {
  NoFileSegmentsEnv() { ::unsetenv("HAWSER_FILE_SEGMENTS"); }
};

// ---- names and backing files (no store needed) --------------------------------

TEST(MetadataAdminNames, bad_names_are_invalid_argument) {
  EXPECT_EQ(MetadataAdmin::checkName("").code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::checkName("a/b").code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::checkName("a b").code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::checkName("a\x01").code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::checkName(std::string(256, 'x')).code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::checkName("file:x").code(), Code::kInvalidArgument);
  EXPECT_TRUE(MetadataAdmin::checkName("ckpt-0").ok());
  EXPECT_TRUE(MetadataAdmin::checkName("10.0.0.1:5000").ok());
  EXPECT_TRUE(MetadataAdmin::checkName(std::string(255, 'x')).ok());
}

TEST(MetadataAdminInspectFile, regular_file_gives_absolute_resolved_path_and_size) {
  test::TempDir dir;
  writeBytes(dir.path + "/f", 4097);
  ASSERT_EQ(::symlink((dir.path + "/f").c_str(), (dir.path + "/link").c_str()), 0);
  FileDesc f;
  f.local_path_map["stale"] = "/x";
  ASSERT_TRUE(MetadataAdmin::inspectFile(dir.path + "/link", f).ok());
  EXPECT_EQ(f.file_path, fs::canonical(dir.path + "/f").string());
  EXPECT_EQ(f.length, 4097u);
  EXPECT_TRUE(f.local_path_map.empty());
}

TEST(MetadataAdminInspectFile, each_failure_has_its_code) {
  test::TempDir dir;
  FileDesc f;
  Status s = MetadataAdmin::inspectFile(dir.path + "/missing", f);
  EXPECT_EQ(s.code(), Code::kFileNotFound);
  EXPECT_NE(s.message().find(dir.path + "/missing"), std::string::npos) << s.message();
  writeBytes(dir.path + "/empty", 0);
  EXPECT_EQ(MetadataAdmin::inspectFile(dir.path + "/empty", f).code(), Code::kInvalidArgument);
  EXPECT_EQ(MetadataAdmin::inspectFile(dir.path, f).code(), Code::kInvalidArgument);  // a directory
  writeBytes(dir.path + "/plain", 1);
  EXPECT_EQ(MetadataAdmin::inspectFile(dir.path + "/plain/below", f).code(), Code::kFileNotFound);
}

// ---- p2p: the file segments JSON file --------------------------------------------

class P2pAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::canonical(dir_.path).string();
    json_ = base_ + "/segments.json";
    writeBytes(base_ + "/a0", 100);
    writeBytes(base_ + "/a1", 50);
  }
  std::unique_ptr<MetadataAdmin> open() {
    std::unique_ptr<MetadataAdmin> a;
    Status s = MetadataAdmin::open("p2p", {{"file_segments", json_}}, a);
    EXPECT_TRUE(s.ok()) << s.toString();
    return a;
  }
  NoFileSegmentsEnv env_;
  test::TempDir dir_;
  std::string base_;  // dir_ with symbolic links resolved
  std::string json_;
};

TEST_F(P2pAdminTest, open_needs_a_file_segments_file) {
  std::unique_ptr<MetadataAdmin> a;
  Status s = MetadataAdmin::open("p2p", {}, a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("file_segments"), std::string::npos) << s.message();
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(MetadataAdmin::open("zookeeper://h:1", {}, a).code(), Code::kInvalidArgument);
}

TEST_F(P2pAdminTest, register_creates_once_then_replace_overwrites) {
  auto a = open();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->where(), "file segments '" + json_ + "'");
  SegmentRecord r;
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(base_ + "/a0", 100)}, false, &r).ok());
  EXPECT_EQ(r.name, "ckpt");
  EXPECT_TRUE(r.is_file);
  EXPECT_EQ(r.bytes, 100u);
  EXPECT_TRUE(r.key.empty());

  Status s = a->registerFileSegment("ckpt", {fileOf(base_ + "/a1", 50)}, false);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  ASSERT_TRUE(a->show("ckpt", r).ok());
  EXPECT_EQ(r.files.at(0).file_path, base_ + "/a0");  // the refused create changed nothing

  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(base_ + "/a1", 50)}, true).ok());
  ASSERT_TRUE(a->show("ckpt", r).ok());
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].file_path, base_ + "/a1");
  EXPECT_EQ(r.bytes, 50u);
}

TEST_F(P2pAdminTest, register_refuses_bad_files_before_writing) {
  auto a = open();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->registerFileSegment("ckpt", {}, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->registerFileSegment("ckpt", {fileOf("relative", 1)}, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->registerFileSegment("ckpt", {fileOf("/abs", 0)}, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->registerFileSegment("a/b", {fileOf("/abs", 1)}, false).code(), Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(json_));
}

TEST_F(P2pAdminTest, the_file_is_what_ap2p_engine_loads) {
  auto a = open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(
      a->registerFileSegment("ckpt", {fileOf(base_ + "/a0", 100), fileOf(base_ + "/a1", 50)}, false).ok());
  FileSegmentMap loaded;
  ASSERT_TRUE(loadFileSegments(json_, loaded).ok());
  ASSERT_EQ(loaded.count("ckpt"), 1u);
  EXPECT_EQ(loaded["ckpt"].files.size(), 2u);
  EXPECT_EQ(loaded["ckpt"].fileSpan(), 150u);

  SegmentRecord r;
  ASSERT_TRUE(a->show("ckpt", r).ok());
  auto j = nlohmann::json::parse(r.descriptor_json, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.descriptor_json;
  EXPECT_EQ(j["kind"], "file");
  EXPECT_EQ(j["name"], "ckpt");
  EXPECT_EQ(j["files"][1]["length"], 50);
}

TEST_F(P2pAdminTest, map_finds_the_file_by_index_path_resolved_path_or_mapped_path) {
  auto a = open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(
      a->registerFileSegment("ckpt", {fileOf(base_ + "/a0", 100), fileOf(base_ + "/a1", 50)}, false).ok());
  size_t which = 9;
  ASSERT_TRUE(a->mapFile("ckpt", "1", "h1", "/mnt/h1/a1", &which).ok());
  EXPECT_EQ(which, 1u);
  ASSERT_TRUE(a->mapFile("ckpt", base_ + "/a0", "h2", "/mnt/h2/a0", &which).ok());
  EXPECT_EQ(which, 0u);
  ASSERT_EQ(::symlink((base_ + "/a1").c_str(), (base_ + "/link").c_str()), 0);
  ASSERT_TRUE(a->mapFile("ckpt", base_ + "/link", "h3", "/mnt/h3/a1", &which).ok());
  EXPECT_EQ(which, 1u);
  ASSERT_TRUE(a->mapFile("ckpt", "/mnt/h2/a0", "h4", "/mnt/h4/a0", &which).ok());  // a mapped path
  EXPECT_EQ(which, 0u);

  SegmentRecord r;
  ASSERT_TRUE(a->show("ckpt", r).ok());
  using Map = std::map<std::string, std::string>;
  EXPECT_EQ(r.files[0].local_path_map, (Map{{"node-a", base_ + "/a0"}, {"h2", "/mnt/h2/a0"}, {"h4", "/mnt/h4/a0"}}));
  EXPECT_EQ(r.files[1].local_path_map, (Map{{"node-a", base_ + "/a1"}, {"h1", "/mnt/h1/a1"}, {"h3", "/mnt/h3/a1"}}));
}

TEST_F(P2pAdminTest, map_failures_change_nothing) {
  auto a = open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(base_ + "/a0", 100)}, false).ok());
  Status s = a->mapFile("ckpt", "/not/a/file/of/it", "h", "/x");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("[0] " + base_ + "/a0"), std::string::npos) << s.message();  // lists its files
  EXPECT_EQ(a->mapFile("ckpt", "1", "h", "/x").code(), Code::kInvalidArgument);  // index out of range
  EXPECT_EQ(a->mapFile("ckpt", "0", "h", "relative").code(), Code::kInvalidArgument);
  EXPECT_EQ(a->mapFile("ckpt", "0", "", "/x").code(), Code::kInvalidArgument);
  EXPECT_EQ(a->mapFile("nope", "0", "h", "/x").code(), Code::kSegmentNotFound);
  SegmentRecord r;
  ASSERT_TRUE(a->show("ckpt", r).ok());
  EXPECT_EQ(r.files[0].local_path_map.size(), 1u);
}

TEST_F(P2pAdminTest, concurrent_maps_under_the_flock_are_all_kept) {
  ASSERT_TRUE(open()->registerFileSegment("ckpt", {fileOf(base_ + "/a0", 100)}, false).ok());
  constexpr int kThreads = 8;
  std::vector<std::thread> ts;
  std::vector<Status> results(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&, i] {
      auto a = open();  // each its own admin: its own lock file descriptor
      if (!a) return;
      results[i] = a->mapFile("ckpt", "0", "h" + std::to_string(i), "/mnt/h" + std::to_string(i));
    });
  }
  for (auto& t : ts) t.join();
  for (auto& s : results) EXPECT_TRUE(s.ok()) << s.toString();
  SegmentRecord r;
  ASSERT_TRUE(open()->show("ckpt", r).ok());
  EXPECT_EQ(r.files[0].local_path_map.size(), size_t(kThreads + 1));
}

TEST_F(P2pAdminTest, list_show_and_remove) {
  auto a = open();
  ASSERT_TRUE(a);
  std::vector<SegmentRecord> all;
  ASSERT_TRUE(a->list(all).ok());  // no file yet: no segments
  EXPECT_TRUE(all.empty());
  ASSERT_TRUE(a->registerFileSegment("b", {fileOf(base_ + "/a0", 100)}, false).ok());
  ASSERT_TRUE(a->registerFileSegment("a", {fileOf(base_ + "/a1", 50)}, false).ok());
  ASSERT_TRUE(a->list(all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "a");
  EXPECT_EQ(all[1].name, "b");
  EXPECT_TRUE(all[0].error.ok());

  SegmentRecord r;
  EXPECT_EQ(a->show("nope", r).code(), Code::kSegmentNotFound);
  ASSERT_TRUE(a->remove("a", false).ok());
  EXPECT_EQ(a->remove("a", false).code(), Code::kSegmentNotFound);
  EXPECT_EQ(a->show("a", r).code(), Code::kSegmentNotFound);
  ASSERT_TRUE(a->list(all).ok());
  EXPECT_EQ(all.size(), 1u);
}

TEST_F(P2pAdminTest, malformed_file_is_metadata_error) {
  std::ofstream(json_) << "{\"version\":\"1.0\",\"segments\":[{\"version\":\"9.0\",\"kind\":\"file\",\"name\":\"x\"}]}";
  auto a = open();
  ASSERT_TRUE(a);
  std::vector<SegmentRecord> all;
  Status s = a->list(all);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_NE(s.message().find(json_), std::string::npos) << s.message();
  EXPECT_EQ(a->registerFileSegment("x", {fileOf(base_ + "/a0", 100)}, false).code(), Code::kMetadataError);
}

// ---- etcd ------------------------------------------------------------------------

#if HAWSER_HAVE_ETCD

SegmentDesc memoryDesc(const std::string& name, uint16_t port) {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = name;
  d.host = "127.0.0.1";
  d.rpc_port = port;
  d.server_name = name;
  d.pid = ::getpid();
  BufferDesc b;
  b.addr = 0x10000;
  b.length = 8192;
  d.buffers.push_back(b);
  return d;
}

class EtcdAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
    ASSERT_TRUE(etcd_.start()) << etcd_.error();
    writeBytes(dir_.path + "/a0", 100);
  }
  std::map<std::string, std::string> fast(const std::string& prefix = "hawser") {
    return {{"metadata.prefix", prefix}, {"etcd.timeout_ms", "1000"}, {"etcd.connect_timeout_ms", "300"},
            {"etcd.retries", "1"}, {"etcd.lease_ttl_s", "2"}};
  }
  std::unique_ptr<MetadataAdmin> open(const std::string& prefix = "hawser") {
    std::unique_ptr<MetadataAdmin> a;
    Status s = MetadataAdmin::open(etcd_.uri(), fast(prefix), a);
    EXPECT_TRUE(s.ok()) << s.toString();
    return a;
  }
  // A running engine's memory segment: the key under its lease.
  std::unique_ptr<EtcdStore> engine(const std::string& name, uint16_t port) {
    Config c;
    for (auto& [k, v] : fast()) c.set(k, v);
    std::unique_ptr<EtcdStore> s;
    Status st = makeEtcdStoreTyped(etcd_.uri(), c, s);
    EXPECT_TRUE(st.ok()) << st.toString();
    if (!s) return s;
    st = s->start(name, [name, port] { return memoryDesc(name, port); });
    EXPECT_TRUE(st.ok()) << st.toString();
    return s;
  }
  EtcdServer etcd_;
  test::TempDir dir_;
};

TEST_F(EtcdAdminTest, unreachable_etcd_is_unavailable_and_bad_uri_invalid_argument) {
  std::unique_ptr<MetadataAdmin> a;
  uint16_t dead = test::freeLoopbackPort();
  Status s = MetadataAdmin::open("etcd://127.0.0.1:" + std::to_string(dead), fast(), a);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(dead)), std::string::npos) << s.message();
  s = MetadataAdmin::open("etcd://127.0.0.1", fast(), a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  s = MetadataAdmin::open(etcd_.uri(), {{"etcd.timeout_ms", "0"}}, a);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("etcd.timeout_ms"), std::string::npos) << s.message();
}

TEST_F(EtcdAdminTest, register_is_create_if_absent_under_the_prefix) {
  auto a = open("clusterA");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->where(), "etcd " + etcd_.uri() + " (prefix 'clusterA')");
  SegmentRecord r;
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 100)}, false, &r).ok());
  EXPECT_EQ(r.key, "clusterA/files/ckpt");
  EXPECT_GT(r.mod_revision, 0);
  EXPECT_EQ(r.lease, 0);  // file segments are persistent
  EXPECT_EQ(r.bytes, 100u);
  EXPECT_EQ(a->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 1)}, false).code(), Code::kInvalidArgument);
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 7)}, true).ok());
  ASSERT_TRUE(a->show("ckpt", r).ok());
  EXPECT_EQ(r.bytes, 7u);
  // Another prefix is another cluster.
  EXPECT_EQ(open("clusterB")->show("ckpt", r).code(), Code::kSegmentNotFound);
}

TEST_F(EtcdAdminTest, memory_segment_name_cannot_be_taken_by_a_file_segment) {
  auto e = engine("node-a", 4000);
  ASSERT_TRUE(e);
  auto a = open();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->registerFileSegment("node-a", {fileOf(dir_.path + "/a0", 100)}, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->registerFileSegment("node-a", {fileOf(dir_.path + "/a0", 100)}, true).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->mapFile("node-a", "0", "h", "/x").code(), Code::kInvalidArgument);
}

TEST_F(EtcdAdminTest, list_and_show_give_owner_lease_and_buffers_of_memory_segments) {
  auto e = engine("node-a", 4000);
  ASSERT_TRUE(e);
  auto a = open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 100)}, false).ok());
  std::vector<SegmentRecord> all;
  ASSERT_TRUE(a->list(all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "ckpt");  // by key: files/ before segments/
  EXPECT_EQ(all[1].name, "node-a");
  const SegmentRecord& m = all[1];
  EXPECT_FALSE(m.is_file);
  EXPECT_EQ(m.key, "hawser/segments/node-a");
  EXPECT_EQ(m.lease, e->leaseId());
  EXPECT_EQ(m.server_name, "node-a");
  EXPECT_EQ(m.host, "127.0.0.1");
  EXPECT_EQ(m.rpc_port, 4000);
  EXPECT_EQ(m.pid, ::getpid());
  ASSERT_EQ(m.buffers.size(), 1u);
  EXPECT_EQ(m.buffers[0].addr, 0x10000u);
  EXPECT_EQ(m.bytes, 8192u);
  SegmentRecord r;
  ASSERT_TRUE(a->show("node-a", r).ok());
  EXPECT_EQ(r.lease, e->leaseId());
  auto j = nlohmann::json::parse(r.descriptor_json, nullptr, false);
  EXPECT_EQ(j["kind"], "memory") << r.descriptor_json;
}

TEST_F(EtcdAdminTest, undecodable_descriptor_is_listed_with_its_error) {
  auto e = engine("node-a", 4000);  // a store to write a raw key with
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->client().put("hawser/files/junk", "{\"version\":\"9.0\",\"kind\":\"file\"}").ok());
  auto a = open();
  ASSERT_TRUE(a);
  std::vector<SegmentRecord> all;
  ASSERT_TRUE(a->list(all).ok());
  const SegmentRecord* junk = nullptr;
  for (auto& r : all)
    if (r.name == "junk") junk = &r;
  ASSERT_NE(junk, nullptr);
  EXPECT_EQ(junk->error.code(), Code::kMetadataError);
  EXPECT_EQ(junk->key, "hawser/files/junk");
  SegmentRecord r;
  ASSERT_TRUE(a->show("junk", r).ok());
  EXPECT_EQ(r.error.code(), Code::kMetadataError);
  EXPECT_TRUE(r.descriptor_json.empty());
  EXPECT_EQ(a->mapFile("junk", "0", "h", "/x").code(), Code::kMetadataError);
}

TEST_F(EtcdAdminTest, concurrent_maps_are_all_kept_by_compare_and_swap) {
  ASSERT_TRUE(open()->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 100)}, false).ok());
  constexpr int kThreads = 8;
  std::vector<std::thread> ts;
  std::vector<Status> results(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&, i] {
      std::unique_ptr<MetadataAdmin> a;
      results[i] = MetadataAdmin::open(etcd_.uri(), fast(), a);
      if (results[i].ok()) results[i] = a->mapFile("ckpt", "0", "h" + std::to_string(i), "/mnt/h" + std::to_string(i));
    });
  }
  for (auto& t : ts) t.join();
  for (auto& s : results) EXPECT_TRUE(s.ok()) << s.toString();
  SegmentRecord r;
  ASSERT_TRUE(open()->show("ckpt", r).ok());
  EXPECT_EQ(r.files[0].local_path_map.size(), size_t(kThreads + 1));
}

TEST_F(EtcdAdminTest, memory_segment_is_removed_only_with_force) {
  auto e = engine("node-a", 4000);
  ASSERT_TRUE(e);
  auto a = open();
  ASSERT_TRUE(a);
  Status s = a->remove("node-a", false);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("127.0.0.1:4000"), std::string::npos) << s.message();  // names the owner
  SegmentRecord r;
  ASSERT_TRUE(a->show("node-a", r).ok());
  ASSERT_TRUE(a->remove("node-a", true).ok());
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE(e->client().get("hawser/segments/node-a", kv).ok());
  // Gone, unless the running engine already re-published it (it watches its key).
  if (kv) {
    EXPECT_NE(kv->mod_revision, r.mod_revision);
  }
  EXPECT_EQ(a->remove("nope", true).code(), Code::kSegmentNotFound);
}

TEST_F(EtcdAdminTest, file_segment_removal) {
  auto a = open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->registerFileSegment("ckpt", {fileOf(dir_.path + "/a0", 100)}, false).ok());
  ASSERT_TRUE(a->remove("ckpt", false).ok());
  SegmentRecord r;
  EXPECT_EQ(a->show("ckpt", r).code(), Code::kSegmentNotFound);
  EXPECT_EQ(a->remove("ckpt", false).code(), Code::kSegmentNotFound);
}

#endif  // HAWSER_HAVE_ETCD

}  // namespace
}  // namespace hawser
