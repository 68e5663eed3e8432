// Engines (in-process and `hawser serve` children) using etcd metadata: they
// find each other by name and move verified data; a SIGKILLed engine's
// segment vanishes with its lease; etcd restarts are survived without
// restarting the engines; bad URIs and unreachable endpoints fail init with
// exact codes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/etcd_server.h"
#include "common/util.h"
#include "base/config.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "metadata/etcd_store.h"

#if HAWSER_HAVE_ETCD
namespace hawser {
namespace {

using namespace std::chrono_literals;
using test::Buffer;
using test::EtcdServer;
using test::eventually;
using test::hasTransport;

// Reads `len` bytes from seg at `remote` into `local` (all one task).
Status move(TransferEngine& e, OpCode op, void* local, SegmentID seg, uint64_t remote, size_t len) {
  Status submit;
  auto st = test::runBatch(e, seg, {TransferRequest{op, local, seg, remote, len}}, 20000, &submit);
  if (!submit.ok()) return submit;
  if (st.size() != 1) return Status(Code::kInternal, "no status");
  if (st[0].s != TransferState::kCompleted)
    return Status(Code::kIoError, std::string("task ended ") + std::string(stateName(st[0].s)) + ": " +
                                      st[0].error.toString());
  return Status::OK();
}

class EtcdEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
    // Short lease and quick outage handling for every engine of this process
    // (and the `hawser` children, which inherit the environment).
    ::setenv("HAWSER_ETCD_LEASE_TTL_S", "2", 1);
    ::setenv("HAWSER_ETCD_TIMEOUT_MS", "1000", 1);
    ::setenv("HAWSER_ETCD_CONNECT_TIMEOUT_MS", "300", 1);
    ::setenv("HAWSER_ETCD_RETRIES", "1", 1);
    ::setenv("HAWSER_ETCD_BACKOFF_MAX_MS", "300", 1);
    ASSERT_TRUE(etcd_.start()) << etcd_.error();
  }
  // A reader of the metadata, independent of the engines.
  std::unique_ptr<EtcdStore> admin() {
    Config c = Config::fromEnv();
    std::unique_ptr<EtcdStore> s;
    Status st = makeEtcdStoreTyped(etcd_.uri(), c, s);
    EXPECT_TRUE(st.ok()) << st.toString();
    return s;
  }
  EtcdServer etcd_;
};

TEST_F(EtcdEngineTest, two_engines_find_each_other_by_name_and_move_verified_data) {
  constexpr size_t kLen = 256 << 10;
  Buffer bm(kLen), am(kLen);
  TransferEngine a, b;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());
  EXPECT_EQ(b.segmentName(), "node-b");
  ASSERT_TRUE(hasTransport(a, "tcp")) << "tcp is always built and always installs";
  test::fillPattern(bm.p, kLen, 7);
  ASSERT_TRUE(b.registerLocalMemory(bm.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());

  SegmentID seg = kInvalidSegment;
  Status s = a.openSegment("node-b", seg);
  ASSERT_TRUE(s.ok()) << s.toString();
  const uint64_t remote = reinterpret_cast<uint64_t>(bm.p);
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, remote, kLen)).ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(am.p, kLen, 7), -1);

  test::fillPattern(am.p, kLen, 11);
  ASSERT_TRUE((s = move(a, OpCode::kWrite, am.p, seg, remote, kLen)).ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(bm.p, kLen, 11), -1);

  // The descriptor in etcd is B's, with its data-path address.
  SegmentDesc d;
  ASSERT_TRUE(admin()->getSegment("node-b", d).ok());
  EXPECT_EQ(d.rpc_port, b.rpcPort());
  EXPECT_EQ(d.buffers.size(), 1u);
}

TEST_F(EtcdEngineTest, memory_registered_after_open_is_found_through_the_republished_descriptor) {
  constexpr size_t kLen = 64 << 10;
  Buffer first(kLen), later(kLen), am(kLen);
  TransferEngine a, b;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());
  ASSERT_TRUE(hasTransport(a, "tcp")) << "tcp is always built and always installs";
  ASSERT_TRUE(b.registerLocalMemory(first.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(a.openSegment("node-b", seg).ok());
  test::fillPattern(later.p, kLen, 3);
  ASSERT_TRUE(b.registerLocalMemory(later.p, kLen).ok());
  Status s = move(a, OpCode::kRead, am.p, seg, reinterpret_cast<uint64_t>(later.p), kLen);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(am.p, kLen, 3), -1);
}

TEST_F(EtcdEngineTest, cached_descriptor_follows_a_peer_restarted_under_the_same_name) {
  constexpr size_t kLen = 64 << 10;
  Buffer bm(kLen), am(kLen);
  TransferEngine a;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(hasTransport(a, "tcp")) << "tcp is always built and always installs";
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  const uint64_t remote = reinterpret_cast<uint64_t>(bm.p);
  SegmentID seg = kInvalidSegment;
  uint64_t old_port = 0, gen = 0;
  {
    TransferEngine b1;
    ASSERT_TRUE(b1.init(etcd_.uri(), "node-b").ok());
    old_port = b1.rpcPort();
    test::fillPattern(bm.p, kLen, 1);
    ASSERT_TRUE(b1.registerLocalMemory(bm.p, kLen).ok());
    ASSERT_TRUE(a.openSegment("node-b", seg).ok());
    ASSERT_TRUE(move(a, OpCode::kRead, am.p, seg, remote, kLen).ok());
    EXPECT_EQ(test::checkPattern(am.p, kLen, 1), -1);
    SegmentDesc d;
    ASSERT_TRUE(admin()->getSegment("node-b", d).ok());
    gen = d.generation;
    // Unchanged while b1 lives.
    ASSERT_TRUE(eventually([&] { return !detail::EngineAccess::of(a).store()->mayHaveChanged("node-b", gen); }));
  }
  // A new process under the same name, on another port, with the same range.
  TransferEngine b2;
  ASSERT_TRUE(b2.init(etcd_.uri(), "node-b").ok());
  ASSERT_NE(b2.rpcPort(), old_port);
  test::fillPattern(bm.p, kLen, 2);
  ASSERT_TRUE(b2.registerLocalMemory(bm.p, kLen).ok());
  // A's watch sees the key change; the next submit re-fetches the descriptor.
  auto* store = detail::EngineAccess::of(a).store();
  ASSERT_TRUE(eventually([&] { return store->mayHaveChanged("node-b", gen); }));
  Status s = move(a, OpCode::kRead, am.p, seg, remote, kLen);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(am.p, kLen, 2), -1);
}

TEST_F(EtcdEngineTest, clean_shutdown_removes_the_segment_at_once) {
  auto reader = admin();
  {
    TransferEngine b;
    ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());
    SegmentDesc d;
    ASSERT_TRUE(reader->getSegment("node-b", d).ok());
  }
  SegmentDesc d;
  EXPECT_EQ(reader->getSegment("node-b", d).code(), Code::kSegmentNotFound);
}

TEST_F(EtcdEngineTest, killed_serve_process_segment_vanishes_within_the_lease_ttl) {
  test::Child serve;
  ASSERT_TRUE(serve.start({"serve", "--name", "node-k", "--metadata", etcd_.uri(), "--memory", "1M"}));
  ASSERT_NE(serve.waitFor("ready", 20000), "") << "hawser serve did not become ready";
  auto reader = admin();
  SegmentDesc d;
  ASSERT_TRUE(reader->getSegment("node-k", d).ok());
  EXPECT_EQ(d.pid, serve.pid);
  // Keys outlive the TTL while the process lives (keepalive works): present
  // at every look for longer than the 2 s lease.
  ASSERT_TRUE(test::holdsFor([&] { return reader->getSegment("node-k", d).ok(); }, 2500ms));

  serve.kill(SIGKILL);
  serve.wait();
  // Gone once the 2 s lease expires (etcd expires leases on its own clock; allow slack).
  EXPECT_TRUE(eventually([&] { return reader->getSegment("node-k", d).code() == Code::kSegmentNotFound; }, 15s));
}

TEST_F(EtcdEngineTest, serve_and_bench_find_each_other_through_etcd) {
  test::Child serve;
  ASSERT_TRUE(serve.start({"serve", "--name", "node-a", "--metadata", etcd_.uri(), "--memory", "4M"}));
  ASSERT_NE(serve.waitFor("ready", 20000), "");
  const std::string transports = serve.waitFor("transports: ", 1000);
  ASSERT_NE(transports.find("tcp"), std::string::npos) << "tcp is always built: " << transports;
  test::Child bench;
  ASSERT_TRUE(bench.start({"bench", "--target", "node-a", "--metadata", etcd_.uri(), "--name", "bencher", "--total",
                           "4M", "--block-size", "256K", "--threads", "1", "--json"}));
  int rc = bench.wait();
  std::ifstream in(bench.out_path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  ASSERT_EQ(rc, 0) << last;
  auto j = nlohmann::json::parse(last, nullptr, false);
  ASSERT_TRUE(j.is_object()) << last;
  EXPECT_EQ(j.value("verified", false), true) << last;
  EXPECT_EQ(j.value("target", std::string()), "node-a");
}

TEST_F(EtcdEngineTest, engines_recover_when_etcd_restarts_mid_run) {
  constexpr size_t kLen = 64 << 10;
  Buffer bm(kLen), am(kLen), extra(kLen), cm(kLen);
  TransferEngine a, b;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());
  ASSERT_TRUE(hasTransport(a, "tcp")) << "tcp is always built and always installs";
  test::fillPattern(bm.p, kLen, 21);
  ASSERT_TRUE(b.registerLocalMemory(bm.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(a.openSegment("node-b", seg).ok());
  const uint64_t remote = reinterpret_cast<uint64_t>(bm.p);

  // etcd goes away (and comes back empty, as after losing its data).
  etcd_.kill9();
  // The cached descriptor keeps serving transfers.
  Status s = move(a, OpCode::kRead, am.p, seg, remote, kLen);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(am.p, kLen, 21), -1);
  // A segment not seen before cannot be found, and the error says why.
  SegmentID other = kInvalidSegment;
  s = a.openSegment("node-c", other);
  EXPECT_TRUE(s.code() == Code::kUnavailable || s.code() == Code::kTimeout) << s.toString();
  EXPECT_NE(s.message().find(etcd_.endpoint()), std::string::npos) << s.message();
  // Registration still works locally while metadata is down.
  EXPECT_TRUE(b.registerLocalMemory(extra.p, kLen).ok());

  ASSERT_TRUE(etcd_.restart(/*wipe=*/true)) << etcd_.error();
  // Both engines re-publish under fresh leases, without a restart.
  auto reader = admin();
  SegmentDesc d;
  EXPECT_TRUE(eventually([&] { return reader->getSegment("node-a", d).ok(); }));
  EXPECT_TRUE(eventually([&] { return reader->getSegment("node-b", d).ok() && d.buffers.size() == 2; }));
  // A newcomer finds B through the new etcd and moves data.
  TransferEngine c;
  ASSERT_TRUE(c.init(etcd_.uri(), "node-c").ok());
  ASSERT_TRUE(c.registerLocalMemory(cm.p, kLen).ok());
  SegmentID cseg = kInvalidSegment;
  ASSERT_TRUE(c.openSegment("node-b", cseg).ok());
  ASSERT_TRUE((s = move(c, OpCode::kRead, cm.p, cseg, remote, kLen)).ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(cm.p, kLen, 21), -1);
  // And the old engines still move data.
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, remote, kLen)).ok()) << s.toString();
}

TEST_F(EtcdEngineTest, engines_ride_out_a_hung_etcd) {
  constexpr size_t kLen = 64 << 10;
  Buffer bm(kLen), am(kLen);
  TransferEngine a, b;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  ASSERT_TRUE(b.init(etcd_.uri(), "node-b").ok());
  ASSERT_TRUE(hasTransport(a, "tcp")) << "tcp is always built and always installs";
  test::fillPattern(bm.p, kLen, 31);
  ASSERT_TRUE(b.registerLocalMemory(bm.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE(a.openSegment("node-b", seg).ok());
  const uint64_t remote = reinterpret_cast<uint64_t>(bm.p);

  etcd_.pause();  // connections stay open, nothing answers
  Status s = move(a, OpCode::kRead, am.p, seg, remote, kLen);
  EXPECT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(test::checkPattern(am.p, kLen, 31), -1);
  SegmentID other = kInvalidSegment;
  s = a.openSegment("node-c", other);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.toString();
  EXPECT_NE(s.message().find("etcd.timeout_ms"), std::string::npos) << s.message();
  etcd_.resume();

  // Whether or not etcd expired the leases meanwhile, both segments are back.
  auto reader = admin();
  SegmentDesc d;
  EXPECT_TRUE(eventually([&] { return reader->getSegment("node-a", d).ok(); }));
  EXPECT_TRUE(eventually([&] { return reader->getSegment("node-b", d).ok(); }));
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, remote, kLen)).ok()) << s.toString();
}

TEST_F(EtcdEngineTest, duplicate_live_name_is_refused_at_init) {
  TransferEngine a, a2;
  ASSERT_TRUE(a.init(etcd_.uri(), "node-a").ok());
  Status s = a2.init(etcd_.uri(), "node-a");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("node-a"), std::string::npos);
}

// ---- init errors (no etcd needed) -------------------------------------------

TEST(EtcdEngineInit, malformed_etcd_uri_is_invalid_argument_naming_it) {
  for (const char* uri : {"etcd://", "etcd://host", "etcd://h:99999", "etcd://h:1,,h:2"}) {
    TransferEngine e;
    Status s = e.init(uri, "node-a");
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << uri << ": " << s.toString();
    EXPECT_NE(s.message().find(uri), std::string::npos) << s.message();
  }
}

TEST(EtcdEngineInit, unreachable_etcd_is_unavailable_naming_the_endpoints) {
  ::setenv("HAWSER_ETCD_TIMEOUT_MS", "1000", 1);
  ::setenv("HAWSER_ETCD_RETRIES", "1", 1);
  uint16_t p1 = test::freeLoopbackPort(), p2 = test::freeLoopbackPort();
  const std::string e1 = "127.0.0.1:" + std::to_string(p1), e2 = "127.0.0.1:" + std::to_string(p2);
  TransferEngine e;
  Status s = e.init("etcd://" + e1 + "," + e2, "node-a");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.toString();
  EXPECT_NE(s.message().find(e1), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(e2), std::string::npos) << s.message();
  // The engine is not half-initialised: calls say so.
  SegmentID seg;
  EXPECT_EQ(e.openSegment("x", seg).code(), Code::kInvalidArgument);
}

TEST(EtcdEngineInit, bad_local_server_name_is_invalid_argument) {
  if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
  EtcdServer etcd;
  ASSERT_TRUE(etcd.start()) << etcd.error();
  TransferEngine e;
  Status s = e.init(etcd.uri(), "bad/name");
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("bad/name"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hawser

#else
TEST(Etcd, not_built) { GTEST_SKIP() << "built without etcd support (HAWSER_WITH_ETCD=OFF)"; }
#endif
