// The http:// metadata store (Mooncake's HTTP metadata server protocol)
// against a small server of that protocol on loopback
// (common/http_metadata_server.h): put, get and delete of descriptors with
// the keys and answers the protocol has, change tracking by polling,
// engines that move bytes with it, and a server that is down.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/config.h"
#include "common/http_metadata_server.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "metadata/store.h"

#if HAWSER_HAVE_ETCD
namespace hawser {
namespace {

using test::eventually;
using test::HttpMetadataServer;

Config fastConfig() {
  Config c;
  c.set("metadata.http_timeout_ms", "1000");
  c.set("metadata.http_poll_ms", "50");
  return c;
}

SegmentDesc fileDesc(const std::string& name, uint64_t len) {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = name;
  FileDesc f;
  f.file_path = "/data/" + name;
  f.length = len;
  f.local_path_map["node-a"] = "/mnt/a/" + name;
  d.files.push_back(f);
  return d;
}

TEST(HttpMetadataStore, file_segments_are_put_got_and_deleted_under_the_prefix_keys) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  Config c = fastConfig();
  std::unique_ptr<MetadataStore> store;
  Status s = makeMetadataStore(server.url(), c, nullptr, store);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(store->putFileSegment(fileDesc("ckpt", 4096)).ok());
  // The value on the server is hawser's descriptor JSON, under <prefix>/files/<name>.
  auto values = server.values();
  ASSERT_EQ(values.count("hawser/files/ckpt"), 1u);
  auto j = nlohmann::json::parse(values["hawser/files/ckpt"]);
  EXPECT_EQ(j["kind"], "file");
  EXPECT_EQ(j["files"][0]["local_path_map"]["node-a"], "/mnt/a/ckpt");
  SegmentDesc got;
  ASSERT_TRUE(store->getSegment("ckpt", got).ok());
  EXPECT_EQ(got.kind, SegmentDesc::Kind::kFile);
  EXPECT_EQ(got.fileSpan(), 4096u);
  ASSERT_TRUE(store->removeSegment("ckpt").ok());
  EXPECT_FALSE(server.has("hawser/files/ckpt"));
  EXPECT_EQ(store->getSegment("ckpt", got).code(), Code::kSegmentNotFound);
  EXPECT_EQ(store->removeSegment("ckpt").code(), Code::kSegmentNotFound) << "the server answered 404";
  // The admin verbs: create-if-absent refuses a taken name.
  ASSERT_TRUE(store->registerFileSegment(fileDesc("f2", 10), false).ok());
  EXPECT_EQ(store->registerFileSegment(fileDesc("f2", 20), false).code(), Code::kInvalidArgument);
  ASSERT_TRUE(store->updateFileSegment("f2", [](SegmentDesc& d) {
                      d.files[0].length = 30;
                      return Status::OK();
                    }).ok());
  ASSERT_TRUE(store->getSegment("f2", got).ok());
  EXPECT_EQ(got.fileSpan(), 30u);
  // No listing in this protocol.
  std::vector<SegmentDesc> all;
  Status list = store->listSegments(all);
  EXPECT_EQ(list.code(), Code::kNotSupported);
  EXPECT_NE(list.message().find("no listing"), std::string::npos) << list.toString();
  // A key with characters that need escaping travels intact.
  server.set("hawser/segments/a+b%c", server.values()["hawser/files/f2"]);
  EXPECT_EQ(store->getSegment("a+b%c", got).code(), Code::kMetadataError) << "found, and of the wrong kind";
}

TEST(HttpMetadataStore, a_changed_value_is_noticed_by_polling) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  Config c = fastConfig();
  std::unique_ptr<MetadataStore> store;
  ASSERT_TRUE(makeMetadataStore(server.url(), c, nullptr, store).ok());
  ASSERT_TRUE(store->putFileSegment(fileDesc("seg", 100)).ok());
  EXPECT_TRUE(store->mayHaveChanged("seg", 0)) << "never fetched: unknown";
  SegmentDesc got;
  ASSERT_TRUE(store->getSegment("seg", got).ok());
  EXPECT_FALSE(store->mayHaveChanged("seg", 0));
  ASSERT_TRUE(store->start("me", [] { return SegmentDesc{}; }).ok());  // starts the poller
  EXPECT_TRUE(test::holdsFor([&] { return !store->mayHaveChanged("seg", 0); }, std::chrono::milliseconds(200)));
  // The change count a submit reads instead of asking: it stays while the
  // answer is "no", and has moved once the answer turns.
  const uint64_t unchanged_at = store->changeCount();
  EXPECT_NE(unchanged_at, 0u) << "the http store counts its changes";
  EXPECT_EQ(store->changeCount(), unchanged_at);
  ASSERT_TRUE(store->putFileSegment(fileDesc("seg", 200)).ok());
  EXPECT_TRUE(eventually([&] { return store->mayHaveChanged("seg", 0); }));
  EXPECT_NE(store->changeCount(), unchanged_at);
  ASSERT_TRUE(store->getSegment("seg", got).ok());
  EXPECT_EQ(got.fileSpan(), 200u);
  EXPECT_FALSE(store->mayHaveChanged("seg", 0)) << "re-fetched";
  store->stop();
}

TEST(HttpMetadataStore, bad_uris_are_refused_naming_them) {
  Config c = fastConfig();
  std::unique_ptr<MetadataStore> store;
  for (std::string uri : {"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://:8080/metadata",
                          "http://127.0.0.1:99999/metadata", "http://127.0.0.1:80x/metadata"}) {
    Status s = makeMetadataStore(uri, c, nullptr, store);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << uri << ": " << s.toString();
    EXPECT_NE(s.message().find(uri), std::string::npos) << s.toString();
  }
}

TEST(HttpMetadataEngine, engines_publish_find_each_other_and_move_bytes) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  TransferEngine a, b;
  EngineOptions o;
  o.config = {{"metadata.http_poll_ms", "50"}};
  Status s = a.init(server.url(), "node-a", "127.0.0.1", 0, o);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(b.init(server.url(), "node-b", "127.0.0.1", 0, o).ok());
  EXPECT_EQ(a.segmentName(), "node-a");
  EXPECT_TRUE(server.has("hawser/segments/node-a"));
  EXPECT_TRUE(server.has("hawser/segments/node-b"));
  test::Buffer target(4u << 20), local(4u << 20);
  ASSERT_TRUE(a.registerLocalMemory(target.p, target.n, "cpu:0", true).ok());
  ASSERT_TRUE(b.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  SegmentID seg;
  s = b.openSegment("node-a", seg);
  ASSERT_TRUE(s.ok()) << s.toString();
  test::fillPattern(local.p, local.n, 77);
  const uint64_t remote = reinterpret_cast<uint64_t>(target.p);
  std::vector<TransferStatus> st;
  s = b.transferSync({{OpCode::kWrite, local.p, seg, remote, local.n}}, std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(target.p, target.n, 77), -1);
  std::memset(local.p, 0, local.n);
  s = b.transferSync({{OpCode::kRead, local.p, seg, remote + 4096, local.n - 4096}}, std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(local.p, local.n - 4096, 77, 4096), -1);
  // More memory registered by a: b reaches it (the descriptor on the server changed).
  test::Buffer more(1u << 20);
  ASSERT_TRUE(a.registerLocalMemory(more.p, more.n, "cpu:0", true).ok());
  test::fillPattern(more.p, more.n, 78);
  s = b.transferSync({{OpCode::kRead, local.p, seg, reinterpret_cast<uint64_t>(more.p), more.n}},
                     std::chrono::seconds(30), &st);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(local.p, more.n, 78), -1);
  // A name held by a live engine is refused; at a clean stop the key goes.
  TransferEngine dup;
  Status taken = dup.init(server.url(), "node-a", "127.0.0.1", 0);
  EXPECT_EQ(taken.code(), Code::kInvalidArgument) << taken.toString();
  EXPECT_NE(taken.message().find("live engine"), std::string::npos) << taken.toString();
  a.~TransferEngine();
  new (&a) TransferEngine();
  EXPECT_FALSE(server.has("hawser/segments/node-a"));
  EXPECT_TRUE(server.has("hawser/segments/node-b"));
}

TEST(HttpMetadataEngine, a_stale_name_left_by_a_dead_engine_is_taken_over) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  // A descriptor whose owner does not answer (a crashed engine: nothing listens there).
  int port = 0;
  {
    TransferEngine gone;
    ASSERT_TRUE(gone.init("p2p", "x", "127.0.0.1", 0).ok());
    port = gone.rpcPort();
  }
  server.set("hawser/segments/node-a",
             R"({"version":"1.0","kind":"memory","name":"node-a","host":"127.0.0.1","rpc_port":)" +
                 std::to_string(port) +
                 R"(,"host_id":"x","server_name":"node-a","pid":1,"transports":{},"buffers":[]})");
  TransferEngine a;
  Status s = a.init(server.url(), "node-a", "127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.toString();
  auto j = nlohmann::json::parse(server.values()["hawser/segments/node-a"]);
  EXPECT_EQ(j["rpc_port"], a.rpcPort());
}

TEST(HttpMetadataEngine, a_server_that_is_down_is_unavailable_naming_its_url) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  const std::string url = server.url();
  server.stop();
  TransferEngine e;
  Status s = e.init(url, "node-a", "127.0.0.1", 0);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.toString();
  EXPECT_NE(s.message().find(url), std::string::npos) << s.toString();
  // Down after init: opening a segment says so too; cached descriptors keep serving.
  ASSERT_TRUE(server.start(server.port())) << server.error();
  TransferEngine a, b;
  ASSERT_TRUE(a.init(url, "node-a", "127.0.0.1", 0).ok());
  ASSERT_TRUE(b.init(url, "node-b", "127.0.0.1", 0).ok());
  test::Buffer target(1u << 20), local(1u << 20);
  ASSERT_TRUE(a.registerLocalMemory(target.p, target.n, "cpu:0", true).ok());
  ASSERT_TRUE(b.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  SegmentID seg;
  ASSERT_TRUE(b.openSegment("node-a", seg).ok());
  server.stop();
  SegmentID other;
  s = b.openSegment("node-c", other);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.toString();
  EXPECT_NE(s.message().find(url), std::string::npos) << s.toString();
  test::fillPattern(target.p, target.n, 5);
  s = b.transferSync({{OpCode::kRead, local.p, seg, reinterpret_cast<uint64_t>(target.p), local.n}},
                     std::chrono::seconds(30));
  EXPECT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(local.p, local.n, 5), -1);
}

// `hawser segment` on the HTTP server: register, show, read through an
// engine, remove; list is not in the protocol (exit code, message).
TEST(HttpMetadataTool, hawser_segment_registers_shows_and_removes_a_file_segment) {
  HttpMetadataServer server;
  ASSERT_TRUE(server.start()) << server.error();
  test::TempDir dir;
  const std::string path = dir.path + "/part0";
  ASSERT_TRUE(test::writeFile(path, 64 << 10, 41));
  auto run = [&](std::vector<std::string> args, std::string* out = nullptr) {
    test::Child c;
    args.insert(args.begin(), "segment");
    args.insert(args.end(), {"--metadata", server.url()});
    if (!c.start(args)) return -1;
    int rc = c.wait();
    if (out) {
      std::ifstream in(c.out_path);
      std::stringstream ss;
      ss << in.rdbuf();
      *out = ss.str();
    }
    return rc;
  };
  ASSERT_EQ(run({"register", "ckpt", path}), 0);
  EXPECT_TRUE(server.has("hawser/files/ckpt"));
  std::string out;
  EXPECT_EQ(run({"show", "ckpt", "--json"}, &out), 0);
  EXPECT_NE(out.find(path), std::string::npos) << out;
  EXPECT_NE(run({"list"}, &out), 0) << "the protocol has no listing";
  // An engine on the same server reads the file segment by name.
  TransferEngine e;
  ASSERT_TRUE(e.init(server.url(), "reader", "127.0.0.1", 0).ok());
  test::Buffer local(64 << 10);
  ASSERT_TRUE(e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  SegmentID seg;
  Status s = e.openSegment("ckpt", seg);
  ASSERT_TRUE(s.ok()) << s.toString();
  s = e.transferSync({{OpCode::kRead, local.p, seg, 0, local.n}}, std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(local.p, local.n, 41), -1);
  ASSERT_EQ(run({"remove", "ckpt"}), 0);
  EXPECT_FALSE(server.has("hawser/files/ckpt"));
}

}  // namespace
}  // namespace hawser
#else
TEST(HttpMetadata, skipped) { GTEST_SKIP() << "this build has no libcurl (HAWSER_WITH_ETCD=OFF)"; }
#endif
