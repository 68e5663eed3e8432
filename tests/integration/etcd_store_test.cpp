// The etcd metadata store against a real etcd on loopback: URI parsing,
// errors for unreachable and slow endpoints, failover, the key layout, file
// segments with compare-and-swap updates, leases (keepalive, revoke at stop,
// re-grant after loss), change tracking, and etcd restarts.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/etcd_server.h"
#include "common/util.h"
#include "base/config.h"
#include "metadata/etcd_client.h"
#include "metadata/etcd_store.h"
#include "rpc/rpc.h"
#include "rpc/socket.h"

#if HAWSER_HAVE_ETCD
namespace hawser {
namespace {

using namespace std::chrono_literals;
using test::EtcdServer;

using test::eventually;

Config fastConfig(const std::string& prefix = "hawser") {
  Config c;
  c.set("metadata.prefix", prefix);
  c.set("etcd.lease_ttl_s", "2");
  c.set("etcd.timeout_ms", "1000");
  c.set("etcd.connect_timeout_ms", "300");
  c.set("etcd.retries", "1");
  c.set("etcd.backoff_max_ms", "200");
  return c;
}

SegmentDesc memoryDesc(const std::string& name, uint16_t port, uint64_t gen = 1) {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = name;
  d.host = "127.0.0.1";
  d.rpc_port = port;
  d.server_name = name;
  d.pid = ::getpid();
  d.generation = gen;
  BufferDesc b;
  b.addr = 0x10000;
  b.length = 4096 * gen;
  d.buffers.push_back(b);
  return d;
}

SegmentDesc fileDesc(const std::string& name, const std::string& path, uint64_t len) {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = name;
  FileDesc f;
  f.file_path = path;
  f.length = len;
  d.files.push_back(f);
  return d;
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
    ASSERT_TRUE(etcd_.start()) << etcd_.error();
  }
  std::unique_ptr<EtcdStore> open(Config c) {
    std::unique_ptr<EtcdStore> s;
    Status st = makeEtcdStoreTyped(etcd_.uri(), c, s);
    EXPECT_TRUE(st.ok()) << st.toString();
    return s;
  }
  std::unique_ptr<EtcdStore> open() { return open(fastConfig()); }
  EtcdServer etcd_;
};

// ---- URI parsing and configuration (no server needed) ----------------------

TEST(EtcdUri, malformed_uris_are_invalid_argument_naming_the_uri) {
  const char* bad[] = {"etcd://",          "etcd://host",        "etcd://:2379",         "etcd://h:0",
                       "etcd://h:65536",   "etcd://h:23x9",      "etcd://h:2379,",       "etcd://,h:2379",
                       "etcd://h:2379/v3", "etcd://h :2379",     "etcd://h:2379,h:2379", "http://h:2379",
                       "etcd:/h:2379",     "etcd://[::1]2379",   "etcd://h:-1",          "etcd://h:123456"};
  for (const char* uri : bad) {
    std::vector<etcd::Endpoint> eps;
    Status st = etcd::parseUri(uri, eps);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << uri;
    EXPECT_NE(st.message().find(uri), std::string::npos) << st.message();
  }
}

TEST(EtcdUri, make_etcd_store_rejects_malformed_uri_before_connecting) {
  Config c;
  std::unique_ptr<MetadataStore> out;
  Status st = makeEtcdStore("etcd://node-1:2379,", c, out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("etcd://node-1:2379,"), std::string::npos) << st.message();
  EXPECT_EQ(out, nullptr);
}

TEST(EtcdUri, several_endpoints_including_ipv6_are_parsed_in_order) {
  std::vector<etcd::Endpoint> eps;
  ASSERT_TRUE(etcd::parseUri("etcd://10.0.0.1:2379,etcd-b.local:32379,[::1]:2380", eps).ok());
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_EQ(eps[0].text(), "10.0.0.1:2379");
  EXPECT_EQ(eps[1].host, "etcd-b.local");
  EXPECT_EQ(eps[1].port, 32379);
  EXPECT_EQ(eps[2].host, "::1");
  EXPECT_EQ(eps[2].text(), "[::1]:2380");
}

TEST(EtcdUri, base64_round_trips_every_byte_and_rejects_junk) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    std::string in = all.substr(0, n), out;
    ASSERT_TRUE(etcd::base64Decode(etcd::base64Encode(in), out));
    EXPECT_EQ(out, in);
  }
  std::string out;
  EXPECT_EQ(etcd::base64Encode("ab"), "YWI=");
  EXPECT_FALSE(etcd::base64Decode("YW!=", out));
  EXPECT_FALSE(etcd::base64Decode("Y===", out));
  EXPECT_EQ(etcd::prefixRangeEnd("hawser/"), "hawser0");
}

TEST(EtcdUri, out_of_range_tunables_are_invalid_argument_naming_the_key) {
  Config c;
  c.set("etcd.lease_ttl_s", "1");
  EtcdStoreOptions o;
  Status st = etcdOptionsFromConfig(c, o);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("etcd.lease_ttl_s"), std::string::npos) << st.message();
  Config p;
  p.set("metadata.prefix", "team/");
  st = etcdOptionsFromConfig(p, o);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("metadata.prefix"), std::string::npos) << st.message();
}

TEST(EtcdUri, bad_segment_names_are_invalid_argument) {
  EXPECT_EQ(checkSegmentName("").code(), Code::kInvalidArgument);
  EXPECT_EQ(checkSegmentName("a/b").code(), Code::kInvalidArgument);
  EXPECT_EQ(checkSegmentName("a b").code(), Code::kInvalidArgument);
  EXPECT_EQ(checkSegmentName(std::string(256, 'x')).code(), Code::kInvalidArgument);
  EXPECT_TRUE(checkSegmentName("node-a").ok());
  EXPECT_TRUE(checkSegmentName("10.0.0.1:5000").ok());
}

// ---- outages at init ---------------------------------------------------------

TEST(EtcdOutage, unreachable_endpoints_are_unavailable_naming_each_endpoint) {
  uint16_t p1 = test::freeLoopbackPort(), p2 = test::freeLoopbackPort();
  std::string uri = "etcd://127.0.0.1:" + std::to_string(p1) + ",127.0.0.1:" + std::to_string(p2);
  Config c = fastConfig();
  std::unique_ptr<MetadataStore> out;
  Status st = makeEtcdStore(uri, c, out);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.toString();
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(p1)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(p2)), std::string::npos) << st.message();
}

TEST(EtcdOutage, silent_endpoint_is_timeout_after_etcd_timeout_ms) {
  // A listener that accepts and never answers: a hung etcd.
  net::Fd lfd;
  uint16_t port = 0;
  ASSERT_TRUE(net::listenOn("127.0.0.1", 0, 16, lfd, port).ok());
  Config c = fastConfig();
  c.set("etcd.timeout_ms", "300");
  c.set("etcd.retries", "0");
  std::unique_ptr<MetadataStore> out;
  Status st = makeEtcdStore("etcd://127.0.0.1:" + std::to_string(port), c, out);
  EXPECT_EQ(st.code(), Code::kTimeout) << st.toString();
  EXPECT_NE(st.message().find("etcd.timeout_ms"), std::string::npos) << st.message();
}

TEST_F(EtcdStoreTest, fails_over_from_a_dead_endpoint_to_a_live_one) {
  uint16_t dead = test::freeLoopbackPort();
  Config c = fastConfig();
  std::unique_ptr<EtcdStore> s;
  ASSERT_TRUE(makeEtcdStoreTyped("etcd://127.0.0.1:" + std::to_string(dead) + "," + etcd_.endpoint(), c, s).ok());
  ASSERT_TRUE(s->putFileSegment(fileDesc("ckpt", "/d/a", 100)).ok());
  SegmentDesc d;
  ASSERT_TRUE(s->getSegment("ckpt", d).ok());
  EXPECT_EQ(d.files.at(0).length, 100u);
}

// ---- key layout and file segments -------------------------------------------

TEST_F(EtcdStoreTest, file_segment_lives_under_prefix_files_without_lease) {
  auto s = open(fastConfig("clusterA"));
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->putFileSegment(fileDesc("ckpt", "/d/a", 4096)).ok());
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE(s->client().get("clusterA/files/ckpt", kv).ok());
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, 0);
  SegmentDesc d;
  ASSERT_TRUE(decodeSegmentText(kv->value, d).ok());
  EXPECT_EQ(d.kind, SegmentDesc::Kind::kFile);
  EXPECT_EQ(d.files.at(0).file_path, "/d/a");
}

TEST_F(EtcdStoreTest, prefixes_separate_clusters_sharing_one_etcd) {
  auto a = open(fastConfig("clusterA"));
  auto b = open(fastConfig("clusterB"));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->putFileSegment(fileDesc("ckpt", "/a", 1)).ok());
  SegmentDesc d;
  EXPECT_EQ(b->getSegment("ckpt", d).code(), Code::kSegmentNotFound);
  std::vector<SegmentDesc> list;
  ASSERT_TRUE(b->listSegments(list).ok());
  EXPECT_TRUE(list.empty());
  ASSERT_TRUE(a->listSegments(list).ok());
  ASSERT_EQ(list.size(), 1u);
}

TEST_F(EtcdStoreTest, unknown_segment_is_segment_not_found_naming_both_keys) {
  auto s = open();
  SegmentDesc d;
  Status st = s->getSegment("nope", d);
  EXPECT_EQ(st.code(), Code::kSegmentNotFound);
  EXPECT_NE(st.message().find("hawser/segments/nope"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("hawser/files/nope"), std::string::npos) << st.message();
  EXPECT_EQ(s->removeSegment("nope").code(), Code::kSegmentNotFound);
}

TEST_F(EtcdStoreTest, malformed_descriptor_in_etcd_is_metadata_error_naming_the_key) {
  auto s = open();
  ASSERT_TRUE(s->client().put("hawser/files/junk", "{\"version\":\"9.0\",\"kind\":\"file\"}").ok());
  SegmentDesc d;
  Status st = s->getSegment("junk", d);
  EXPECT_EQ(st.code(), Code::kMetadataError);
  EXPECT_NE(st.message().find("hawser/files/junk"), std::string::npos) << st.message();
}

TEST_F(EtcdStoreTest, create_file_segment_refuses_a_taken_name) {
  auto s = open();
  ASSERT_TRUE(s->createFileSegment(fileDesc("ckpt", "/a", 1)).ok());
  Status st = s->createFileSegment(fileDesc("ckpt", "/b", 2));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("ckpt"), std::string::npos);
  SegmentDesc d;
  ASSERT_TRUE(s->getSegment("ckpt", d).ok());
  EXPECT_EQ(d.files.at(0).file_path, "/a");
}

TEST_F(EtcdStoreTest, concurrent_path_map_edits_are_all_kept) {
  auto s = open();
  ASSERT_TRUE(s->createFileSegment(fileDesc("ckpt", "/a", 1)).ok());
  constexpr int kThreads = 4, kEach = 5;
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      auto mine = open();
      for (int i = 0; i < kEach; ++i) {
        std::string host = "host-" + std::to_string(t) + "-" + std::to_string(i);
        Status st = mine->updateFileSegment("ckpt", [&](SegmentDesc& d) {
          d.files[0].local_path_map[host] = "/mnt/" + host;
          return Status::OK();
        });
        if (!st.ok()) failures++;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  SegmentDesc d;
  ASSERT_TRUE(s->getSegment("ckpt", d).ok());
  EXPECT_EQ(d.files.at(0).local_path_map.size(), size_t(kThreads * kEach));
}

// ---- the local memory segment: lease, publish, revoke -----------------------

TEST_F(EtcdStoreTest, local_segment_is_published_under_the_lease_and_revoked_at_stop) {
  auto s = open();
  uint64_t gen = 1;
  ASSERT_TRUE(s->start("node-a", [&] { return memoryDesc("ignored", 4000, gen); }).ok());
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE(s->client().get("hawser/segments/node-a", kv).ok());
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, s->leaseId());
  SegmentDesc d;
  ASSERT_TRUE(decodeSegmentText(kv->value, d).ok());
  EXPECT_EQ(d.name, "node-a");
  EXPECT_EQ(d.rpc_port, 4000);

  gen = 2;
  ASSERT_TRUE(s->publishLocal().ok());
  auto reader = open();
  ASSERT_TRUE(reader->getSegment("node-a", d).ok());
  EXPECT_EQ(d.generation, 2u);

  // Keys outlive several TTLs while the keepalive runs: present at every
  // look for 3 s.
  ASSERT_TRUE(test::holdsFor([&] { return reader->getSegment("node-a", d).ok(); }, 3s));

  s->stop();
  EXPECT_EQ(reader->getSegment("node-a", d).code(), Code::kSegmentNotFound);
}

TEST_F(EtcdStoreTest, second_live_engine_cannot_claim_the_same_name) {
  // The first "engine" answers on a real rpc listener.
  rpc::Server server;
  ASSERT_TRUE(server.start("127.0.0.1", 0).ok());
  const uint16_t port = server.port();
  auto a = open();
  ASSERT_TRUE(a->start("node-a", [&] { return memoryDesc("node-a", port); }).ok());
  auto b = open();
  Status st = b->start("node-a", [&] { return memoryDesc("node-a", uint16_t(port + 1)); });
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("'node-a'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(std::to_string(port)), std::string::npos) << st.message();
  // The first engine's key is untouched.
  SegmentDesc d;
  ASSERT_TRUE(b->getSegment("node-a", d).ok());
  EXPECT_EQ(d.rpc_port, port);
  server.stop();
}

TEST_F(EtcdStoreTest, stale_key_of_a_dead_engine_is_taken_over) {
  auto w = open();
  // A key left by an engine whose port nobody listens on any more.
  uint16_t dead = test::freeLoopbackPort();
  ASSERT_TRUE(w->client().put("hawser/segments/node-a", encodeSegmentText(memoryDesc("node-a", dead))).ok());
  auto s = open();
  ASSERT_TRUE(s->start("node-a", [&] { return memoryDesc("node-a", 4100); }).ok());
  SegmentDesc d;
  ASSERT_TRUE(w->getSegment("node-a", d).ok());
  EXPECT_EQ(d.rpc_port, 4100);
}

TEST_F(EtcdStoreTest, lost_lease_is_regranted_and_the_segment_republished) {
  auto s = open();
  ASSERT_TRUE(s->start("node-a", [&] { return memoryDesc("node-a", 4000); }).ok());
  int64_t first = s->leaseId();
  auto admin = open();
  // Revoking the lease deletes the key, as a lease expiry during an outage would.
  ASSERT_TRUE(admin->client().leaseRevoke(first).ok());
  SegmentDesc d;
  EXPECT_TRUE(eventually([&] { return admin->getSegment("node-a", d).ok(); }));
  EXPECT_NE(s->leaseId(), first);
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE(admin->client().get("hawser/segments/node-a", kv).ok());
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->lease, s->leaseId());
}

TEST_F(EtcdStoreTest, deleted_local_key_is_republished) {
  auto s = open();
  ASSERT_TRUE(s->start("node-a", [&] { return memoryDesc("node-a", 4000); }).ok());
  ASSERT_TRUE(eventually([&] { return s->watchSynced(); }));
  auto admin = open();
  ASSERT_TRUE(admin->removeSegment("node-a").ok());
  SegmentDesc d;
  EXPECT_TRUE(eventually([&] { return admin->getSegment("node-a", d).ok(); }));
}

// ---- change tracking ---------------------------------------------------------

TEST_F(EtcdStoreTest, may_have_changed_turns_true_when_the_peers_key_changes) {
  auto owner = open();
  uint64_t gen = 1;
  ASSERT_TRUE(owner->start("node-b", [&] { return memoryDesc("node-b", 4200, gen); }).ok());
  auto peer = open();
  ASSERT_TRUE(peer->start("node-a", [&] { return memoryDesc("node-a", 4201); }).ok());
  SegmentDesc d;
  ASSERT_TRUE(peer->getSegment("node-b", d).ok());
  ASSERT_TRUE(eventually([&] { return peer->watchSynced(); }));
  EXPECT_FALSE(peer->mayHaveChanged("node-b", d.generation));
  EXPECT_TRUE(peer->mayHaveChanged("never-fetched", 1));
  // The change count a submit reads instead of asking: whenever the answer
  // turns to "yes", it has moved from where the last "no" saw it.
  uint64_t unchanged_at = peer->changeCount();
  EXPECT_NE(unchanged_at, 0u) << "the etcd store counts its changes";

  gen = 2;
  ASSERT_TRUE(owner->publishLocal().ok());
  EXPECT_TRUE(eventually([&] { return peer->mayHaveChanged("node-b", d.generation); }));
  EXPECT_NE(peer->changeCount(), unchanged_at);
  ASSERT_TRUE(peer->getSegment("node-b", d).ok());
  EXPECT_EQ(d.generation, 2u);
  EXPECT_TRUE(eventually([&] { return !peer->mayHaveChanged("node-b", d.generation); }));
  unchanged_at = peer->changeCount();

  owner->stop();  // revoke: the key is deleted
  EXPECT_TRUE(eventually([&] { return peer->mayHaveChanged("node-b", d.generation); }));
  EXPECT_NE(peer->changeCount(), unchanged_at);
}

// ---- etcd restarts -----------------------------------------------------------

TEST_F(EtcdStoreTest, etcd_restart_keeps_keys_and_cached_answers_during_the_outage) {
  auto owner = open();
  ASSERT_TRUE(owner->start("node-b", [&] { return memoryDesc("node-b", 4300); }).ok());
  auto peer = open();
  ASSERT_TRUE(peer->start("node-a", [&] { return memoryDesc("node-a", 4301); }).ok());
  SegmentDesc d;
  ASSERT_TRUE(peer->getSegment("node-b", d).ok());
  ASSERT_TRUE(eventually([&] { return peer->watchSynced(); }));

  etcd_.stop();
  // Down: lookups fail clearly, but what was fetched is not declared stale.
  Status st = peer->getSegment("node-b", d);
  EXPECT_TRUE(st.code() == Code::kUnavailable || st.code() == Code::kTimeout) << st.toString();
  EXPECT_NE(st.message().find(etcd_.endpoint()), std::string::npos) << st.message();
  EXPECT_TRUE(eventually([&] { return !peer->watchSynced(); }));
  EXPECT_FALSE(peer->mayHaveChanged("node-b", d.generation));

  ASSERT_TRUE(etcd_.restart()) << etcd_.error();
  EXPECT_TRUE(eventually([&] { return peer->watchSynced(); }));
  ASSERT_TRUE(peer->getSegment("node-b", d).ok());
  ASSERT_TRUE(owner->getSegment("node-a", d).ok());
}

TEST_F(EtcdStoreTest, fresh_etcd_gets_the_segments_republished_without_restarting_the_engine) {
  auto owner = open();
  ASSERT_TRUE(owner->start("node-b", [&] { return memoryDesc("node-b", 4400); }).ok());
  int64_t lease = owner->leaseId();
  ASSERT_TRUE(eventually([&] { return owner->watchSynced(); }));
  etcd_.stop();
  // The owner has seen the outage before a wiped etcd comes back.
  ASSERT_TRUE(eventually([&] { return !owner->watchSynced(); })) << "the owner never noticed etcd going away";
  ASSERT_TRUE(etcd_.restart(/*wipe=*/true)) << etcd_.error();
  auto peer = open();
  SegmentDesc d;
  EXPECT_TRUE(eventually([&] { return peer->getSegment("node-b", d).ok(); }, 15s));
  EXPECT_EQ(d.rpc_port, 4400);
  EXPECT_NE(owner->leaseId(), lease);
  // The counter moves just after the put that made the key visible.
  EXPECT_TRUE(eventually([&] { return owner->republishCount() >= 1u; })) << owner->republishCount();
}

}  // namespace
}  // namespace hawser

#else
TEST(Etcd, not_built) { GTEST_SKIP() << "built without etcd support (HAWSER_WITH_ETCD=OFF)"; }
#endif
