// A peer's descriptor as the transports decode it: the one JSON integer
// reader (base/json_integer.h), the start every openPeer shares
// (base/peer_entry.h), and the descriptor decoders the transports register
// with their factories (engine/transport_list.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "base/json_integer.h"
#include "base/peer_entry.h"
#include "engine/transport_list.h"
#include "transport/nvlink/nvlink_internal.h"
#include "transport/shm/shm_internal.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

using namespace hawser;
using json = nlohmann::json;

// ---- the JSON integer reader ----------------------------------------------

TEST(JsonInteger, takes_integers_within_the_range_of_the_type) {
  uint64_t u = 0;
  ASSERT_TRUE(jsonInteger(json(std::numeric_limits<uint64_t>::max()), "n", u).ok());
  EXPECT_EQ(u, std::numeric_limits<uint64_t>::max());
  int64_t i = 0;
  ASSERT_TRUE(jsonInteger(json(std::numeric_limits<int64_t>::min()), "n", i).ok());
  EXPECT_EQ(i, std::numeric_limits<int64_t>::min());
  int8_t small = 0;
  ASSERT_TRUE(jsonInteger(json(-128), "n", small).ok());
  EXPECT_EQ(small, -128);
  uint16_t port = 0;
  ASSERT_TRUE(jsonInteger(json::parse("65535"), "n", port).ok());  // parsed text: an unsigned number
  EXPECT_EQ(port, 65535);
}

TEST(JsonInteger, refusals_name_the_field_and_the_value) {
  uint8_t u8 = 7;
  Status s = jsonInteger(json(300), "attrs.x.slot", u8);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "attrs.x.slot is out of range: 300 is not in [0, 255]");
  EXPECT_EQ(u8, 7);  // untouched
  s = jsonInteger(json(-1), "pid", u8);
  EXPECT_EQ(s.message(), "pid is out of range: -1 is not in [0, 255]");
  int8_t i8 = 0;
  s = jsonInteger(json(-129), "v", i8);
  EXPECT_EQ(s.message(), "v is out of range: -129 is not in [-128, 127]");
  uint32_t u32 = 0;
  s = jsonInteger(json(1.5), "mtu", u32);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "mtu must be an integer, got 1.5");
  s = jsonInteger(json("12"), "mtu", u32);
  EXPECT_EQ(s.message(), "mtu must be an integer, got \"12\"");
  s = jsonInteger(json(true), "mtu", u32);
  EXPECT_EQ(s.message(), "mtu must be an integer, got true");
  s = jsonInteger(json(std::string(60, 'a')), "mtu", u32);
  EXPECT_EQ(s.message(), "mtu must be an integer, got \"" + std::string(39, 'a') + "...");
  int64_t i64 = 0;
  s = jsonInteger(json(std::numeric_limits<uint64_t>::max()), "n", i64);
  EXPECT_EQ(s.message(), "n is out of range: 18446744073709551615 is not in [-9223372036854775808, "
                         "9223372036854775807]");
}

TEST(JsonInteger, fields_of_an_object) {
  const json j = {{"pid", 42}, {"neg", -3}};
  int32_t pid = 0;
  ASSERT_TRUE(jsonIntegerField(j, "transports.shm", "pid", pid).ok());
  EXPECT_EQ(pid, 42);
  Status s = jsonIntegerField(j, "transports.shm", "nonce", pid);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "transports.shm.nonce is missing");
  uint64_t u = 0;
  s = jsonIntegerField(j, "", "neg", u);
  EXPECT_EQ(s.message(), "neg is out of range: -3 is not in [0, 18446744073709551615]");
  s = jsonIntegerField(json::array(), "t", "pid", pid);  // not an object: nothing is there
  EXPECT_EQ(s.message(), "t.pid is missing");
  int mtu = 0;
  ASSERT_TRUE(jsonIntegerFieldOr(j, "nic", "mtu", 4096, mtu).ok());
  EXPECT_EQ(mtu, 4096);
  uint32_t u32 = 0;
  s = jsonIntegerFieldOr(j, "nic", "neg", 1u, u32);  // present and wrong: still refused
  EXPECT_EQ(s.message(), "nic.neg is out of range: -3 is not in [0, 4294967295]");
}

// ---- how openPeer starts ----------------------------------------------------

static SegmentDesc memorySegment() {
  SegmentDesc d;
  d.name = "10.0.0.1:5000";
  d.host = "10.0.0.1";
  d.rpc_port = 5000;
  return d;
}

TEST(PeerEntry, refusals_and_their_route_reasons) {
  RouteDecline why;
  Status s = transportNotRunning("tcp", why);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "tcp transport is not running");
  EXPECT_EQ(why.reason, RouteReason::kRefused);
  EXPECT_EQ(why.text, s.message());

  const json* entry = nullptr;
  SegmentDesc file;
  file.kind = SegmentDesc::Kind::kFile;
  file.transports["tcp"] = json::object();
  s = memoryPeerEntry(file, "tcp", entry, why);
  EXPECT_EQ(s.code(), Code::kNotSupported);
  EXPECT_EQ(s.message(), "not a memory segment");
  EXPECT_EQ(why.reason, RouteReason::kRefused);
  EXPECT_EQ(entry, nullptr);

  SegmentDesc seg = memorySegment();
  s = memoryPeerEntry(seg, "tcp", entry, why);
  EXPECT_EQ(s.code(), Code::kNotSupported);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000' publishes no tcp transport");
  EXPECT_EQ(why.reason, RouteReason::kPeerLacksTransport);
  EXPECT_EQ(why.text, s.message());
  seg.transports["tcp"] = 5;  // not an object: as absent
  s = memoryPeerEntry(seg, "tcp", entry, why);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000' publishes no tcp transport");

  seg.transports["tcp"] = json::object();
  ASSERT_TRUE(memoryPeerEntry(seg, "tcp", entry, why).ok());
  EXPECT_EQ(entry, &seg.transports["tcp"]);
  EXPECT_FALSE(why.declined());
  // An empty object, where the rule says it is absent too.
  s = memoryPeerEntry(seg, "tcp", entry, why, {true, "no driver there"});
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000' publishes no tcp transport (no driver there)");
  EXPECT_EQ(why.reason, RouteReason::kPeerLacksTransport);
}

// ---- the transports' descriptor decoders ------------------------------------

TEST(PeerDecoders, every_built_in_transport_registers_one_that_refuses_what_it_cannot_use) {
  ASSERT_FALSE(builtinTransports().empty());
  SegmentDesc bare = memorySegment();  // publishes no transport
  SegmentDesc file;
  file.kind = SegmentDesc::Kind::kFile;
  file.name = "ckpt";
  for (const TransportFactory& f : builtinTransports()) {
    ASSERT_NE(f.decodePeer, nullptr) << f.name;
    RouteDecline a, b;
    const Status sa = f.decodePeer(bare, a), sb = f.decodePeer(file, b);
    // A transport serves one of the kinds: it refuses the other, and a
    // memory transport refuses a peer that publishes nothing for it.
    EXPECT_FALSE(sa.ok() && sb.ok()) << f.name;
    for (auto [s, why] : {std::pair{sa, a}, std::pair{sb, b}}) {
      if (s.ok()) continue;
      EXPECT_EQ(s.code(), Code::kNotSupported) << f.name;
      EXPECT_EQ(why.text, s.message()) << f.name;
      EXPECT_TRUE(why.declined()) << f.name;
    }
  }
}

TEST(PeerDecoders, tcp_reads_its_limits_and_ignores_malformed_optional_ones) {
  SegmentDesc seg = memorySegment();
  seg.transports["tcp"] = {{"version", 2}, {"max_frame", 65536}, {"max_runs", 5000}, {"gpu", true}};
  tcp::PeerDesc d;
  RouteDecline why;
  ASSERT_TRUE(tcp::decodePeerDesc(seg, d, why).ok());
  EXPECT_EQ(d.host, "10.0.0.1");
  EXPECT_EQ(d.port, 5000);
  EXPECT_EQ(d.max_frame, 65536u);
  EXPECT_EQ(d.max_runs, 1024u);  // capped by what this build sends
  EXPECT_TRUE(d.gpu);
  EXPECT_TRUE(d.bound);
  // An older release's: nothing published; malformed limits read as unpublished.
  seg.transports["tcp"] = {{"version", 1}, {"max_frame", 1.5}, {"max_runs", -2}};
  ASSERT_TRUE(tcp::decodePeerDesc(seg, d, why).ok());
  EXPECT_EQ(d.max_frame, 0u);
  EXPECT_EQ(d.max_runs, 0u);
  EXPECT_FALSE(d.gpu);
  EXPECT_FALSE(d.bound);
  seg.transports["tcp"] = {{"max_frame", 100}};  // under 4096: ignored
  ASSERT_TRUE(tcp::decodePeerDesc(seg, d, why).ok());
  EXPECT_EQ(d.max_frame, 0u);
  seg.rpc_port = 0;
  Status s = tcp::decodePeerDesc(seg, d, why);
  EXPECT_EQ(s.code(), Code::kNotSupported);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000' publishes no host and port");
  EXPECT_EQ(why.reason, RouteReason::kPeerIncompatible);
}

TEST(PeerDecoders, shm_names_the_malformed_field) {
  SegmentDesc seg = memorySegment();
  const json good = {{"version", shm::kDescVersion}, {"pid", 42}, {"nonce", 7}, {"probe", 4096},
                     {"socket", "@hawser-shm-x"}};
  seg.transports["shm"] = good;
  shm::PeerDesc d;
  RouteDecline why;
  ASSERT_TRUE(shm::decodePeerDesc(seg, d, why).ok());
  EXPECT_EQ(d.pid, 42);
  EXPECT_EQ(d.nonce, 7u);
  EXPECT_EQ(d.probe, 4096u);
  EXPECT_EQ(d.socket, "@hawser-shm-x");
  auto refusal = [&](const char* key, const json& value) {
    seg.transports["shm"] = good;
    seg.transports["shm"][key] = value;
    Status s = shm::decodePeerDesc(seg, d, why);
    EXPECT_EQ(s.code(), Code::kNotSupported);
    EXPECT_EQ(why.reason, RouteReason::kPeerIncompatible);
    EXPECT_EQ(why.text, s.message());
    return s.message();
  };
  EXPECT_EQ(refusal("version", 2), "segment '10.0.0.1:5000': shm version 2 (this build speaks 3)");
  EXPECT_EQ(refusal("version", "3"),
            "segment '10.0.0.1:5000': malformed shm attributes: transports.shm.version must be an integer, got \"3\"");
  EXPECT_EQ(refusal("pid", 0), "segment '10.0.0.1:5000': malformed shm attributes: transports.shm.pid must be > 0, got 0");
  EXPECT_EQ(refusal("pid", 1ull << 31), "segment '10.0.0.1:5000': malformed shm attributes: transports.shm.pid is out "
                                         "of range: 2147483648 is not in [-2147483648, 2147483647]");
  EXPECT_EQ(refusal("nonce", -1), "segment '10.0.0.1:5000': malformed shm attributes: transports.shm.nonce is out of "
                                  "range: -1 is not in [0, 18446744073709551615]");
  EXPECT_EQ(refusal("socket", ""),
            "segment '10.0.0.1:5000': malformed shm attributes: transports.shm.socket must be a non-empty string");
}

TEST(PeerDecoders, nvlink_names_the_malformed_field_and_decodes_each_buffer) {
  SegmentDesc seg = memorySegment();
  RouteDecline why;
  nvlink::PeerDesc d;
  seg.transports["nvlink"] = json::object();  // an engine without a CUDA driver publishes nothing
  Status s = nvlink::decodePeerDesc(seg, d, why);
  EXPECT_EQ(s.code(), Code::kNotSupported);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000' publishes no nvlink transport (its engine has no CUDA driver)");
  EXPECT_EQ(why.reason, RouteReason::kPeerLacksTransport);
  seg.transports["nvlink"] = {{"pid", 42}, {"start", 9}, {"pidns", 4}, {"table_fd", -1}};
  s = nvlink::decodePeerDesc(seg, d, why);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000': malformed transports.nvlink: transports.nvlink.table_fd must be "
                         ">= 0, got -1");
  EXPECT_EQ(why.reason, RouteReason::kPeerIncompatible);
  seg.transports["nvlink"] = {{"pid", 42}, {"pidns", 4}, {"table_fd", 3}};
  s = nvlink::decodePeerDesc(seg, d, why);
  EXPECT_EQ(s.message(), "segment '10.0.0.1:5000': malformed transports.nvlink: transports.nvlink.start is missing");
  seg.transports["nvlink"] = {{"pid", 42}, {"start", 9}, {"pidns", 4}, {"table_fd", 3}, {"socket", "@s"},
                              {"nonce", 11}, {"readers", nvlink::kReaderSlots}};
  BufferDesc host{0x1000, 4096, "cpu:0", json::object()};
  seg.buffers.push_back(host);
  ASSERT_TRUE(nvlink::decodePeerDesc(seg, d, why).ok());
  EXPECT_FALSE(why.declined());
  EXPECT_EQ(d.pid, 42);
  EXPECT_EQ(d.start, 9u);
  EXPECT_EQ(d.pidns, 4u);
  EXPECT_EQ(d.table_fd, 3);
  EXPECT_EQ(d.socket, "@s");
  EXPECT_EQ(d.nonce, 11u);
  EXPECT_TRUE(d.readers);
  ASSERT_EQ(d.buffers.size(), 1u);
  EXPECT_FALSE(d.buffers[0].usable);  // host memory: not nvlink's
  EXPECT_EQ(d.buffers[0].info.why, "it is cpu:0 memory");
}
