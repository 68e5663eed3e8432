// The tcp transport's wire checks, settings and transport selection.
#include <gtest/gtest.h>

#include <cstddef>

#include <fmt/format.h>

#include "base/config.h"
#include "metadata/descriptor.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace hawser {
namespace {

using tcp::WireHeader;

WireHeader readReq(uint32_t size) {
  WireHeader h;
  h.type = tcp::kReadReq;
  h.size = size;
  h.addr = 0x1000;
  h.id = 7;
  return h;
}

WireHeader writeReq(uint32_t size) {
  WireHeader h = readReq(size);
  h.type = tcp::kWriteReq;
  h.length = size;
  return h;
}

TEST(TcpWire, header_is_32_bytes_with_fields_at_fixed_offsets) {
  EXPECT_EQ(sizeof(WireHeader), 32u);
  EXPECT_EQ(offsetof(WireHeader, magic), 0u);
  EXPECT_EQ(offsetof(WireHeader, version), 4u);
  EXPECT_EQ(offsetof(WireHeader, type), 6u);
  EXPECT_EQ(offsetof(WireHeader, status), 7u);
  EXPECT_EQ(offsetof(WireHeader, length), 8u);
  EXPECT_EQ(offsetof(WireHeader, size), 12u);
  EXPECT_EQ(offsetof(WireHeader, id), 16u);
  EXPECT_EQ(offsetof(WireHeader, addr), 24u);
}

TEST(TcpWire, well_formed_requests_are_accepted) {
  EXPECT_TRUE(tcp::checkRequest(readReq(4096), 1 << 20).ok());
  EXPECT_TRUE(tcp::checkRequest(writeReq(1 << 20), 1 << 20).ok());
}

TEST(TcpWire, bad_magic_is_rejected_naming_the_value) {
  WireHeader h = readReq(16);
  h.magic = 0xdeadbeef;
  Status s = tcp::checkRequest(h, 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("0xdeadbeef"), std::string::npos) << s.message();
}

TEST(TcpWire, unknown_version_is_rejected) {
  for (uint16_t v : {uint16_t{0}, uint16_t{3}}) {
    WireHeader h = readReq(16);
    h.version = v;
    Status s = tcp::checkRequest(h, 1 << 20);
    EXPECT_EQ(s.code(), Code::kRemoteError);
    EXPECT_NE(s.message().find(fmt::format("unsupported version {}", v)), std::string::npos) << s.message();
  }
}

// Version 2: bound to a registration, whose number follows the header.
WireHeader bound(WireHeader h) {
  h.version = tcp::kBoundVersion;
  h.length += tcp::kBindingSize;
  return h;
}

TEST(TcpWire, a_bound_request_carries_its_registration_right_after_the_header) {
  tcp::RequestHeader r;
  EXPECT_EQ(sizeof(r), 40u);
  EXPECT_EQ(reinterpret_cast<char*>(&r.seq) - reinterpret_cast<char*>(&r), 32);
  EXPECT_EQ(tcp::bindingBytes(r), 0u) << "version 1: no binding";
  r.version = tcp::kBoundVersion;
  EXPECT_EQ(tcp::bindingBytes(r), 8u);
}

TEST(TcpWire, bound_requests_whose_length_counts_the_binding_are_accepted_and_others_rejected) {
  EXPECT_TRUE(tcp::checkRequest(bound(readReq(4096)), 1 << 20).ok());
  EXPECT_TRUE(tcp::checkRequest(bound(writeReq(1 << 20)), 1 << 20).ok());
  WireHeader h = readReq(4096);
  h.version = tcp::kBoundVersion;  // its binding not counted
  Status s = tcp::checkRequest(h, 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("READ_REQ of version 2 has length 0 (must be 8)"), std::string::npos) << s.message();
  h = writeReq(4096);
  h.version = tcp::kBoundVersion;
  s = tcp::checkRequest(h, 1 << 20);
  EXPECT_NE(s.message().find("WRITE_REQ of version 2 has length 4096 where its size is 4096"), std::string::npos)
      << s.message();
  EXPECT_EQ(tcp::checkRequest(bound(bound(writeReq(64))), 1 << 20).code(), Code::kRemoteError) << "two bindings";
}

TEST(TcpWire, response_type_or_unknown_type_in_a_request_is_rejected) {
  for (uint8_t t : {uint8_t{0}, uint8_t{tcp::kReadResp}, uint8_t{tcp::kWriteResp}, uint8_t{99}}) {
    WireHeader h = readReq(16);
    h.type = t;
    EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError) << int(t);
  }
}

TEST(TcpWire, zero_size_is_rejected) { EXPECT_EQ(tcp::checkRequest(readReq(0), 1 << 20).code(), Code::kRemoteError); }

TEST(TcpWire, size_over_max_frame_is_rejected_naming_both) {
  Status s = tcp::checkRequest(writeReq((1 << 20) + 1), 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("1048577"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1048576"), std::string::npos) << s.message();
  EXPECT_EQ(tcp::checkRequest(readReq((1 << 20) + 1), 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, read_request_carrying_payload_is_rejected) {
  WireHeader h = readReq(16);
  h.length = 16;
  EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, write_request_whose_length_differs_from_size_is_rejected) {
  WireHeader h = writeReq(16);
  h.length = 8;
  EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, request_with_non_zero_status_is_rejected) {
  WireHeader h = readReq(16);
  h.status = 4;
  EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError);
}

tcp::Awaited awaitedRead(uint32_t len) { return tcp::Awaited{true, 7, true, len}; }

WireHeader readResp(uint32_t size) {
  WireHeader h;
  h.type = tcp::kReadResp;
  h.size = size;
  h.length = size;
  h.id = 7;
  return h;
}

TEST(TcpWire, response_answering_the_awaited_request_is_accepted) {
  EXPECT_TRUE(tcp::checkResponse(readResp(4096), awaitedRead(4096)).ok());
  WireHeader w = readResp(4096);
  w.type = tcp::kWriteResp;
  w.length = 0;
  EXPECT_TRUE(tcp::checkResponse(w, tcp::Awaited{true, 7, false, 4096}).ok());
  WireHeader err = readResp(0);
  err.status = static_cast<uint8_t>(Code::kOutOfRange);
  err.length = 12;
  EXPECT_TRUE(tcp::checkResponse(err, awaitedRead(4096)).ok());
}

TEST(TcpWire, response_with_no_request_awaiting_is_rejected) {
  Status s = tcp::checkResponse(readResp(4096), tcp::Awaited{});
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("no request awaiting"), std::string::npos) << s.message();
}

TEST(TcpWire, response_with_wrong_id_type_or_length_is_rejected) {
  WireHeader h = readResp(4096);
  h.id = 8;
  EXPECT_NE(tcp::checkResponse(h, awaitedRead(4096)).message().find("response id 8 where 7"), std::string::npos);
  h = readResp(4096);
  h.type = tcp::kWriteResp;
  EXPECT_NE(tcp::checkResponse(h, awaitedRead(4096)).message().find("WRITE_RESP answers a READ_REQ"),
            std::string::npos);
  h = readResp(4095);
  EXPECT_EQ(tcp::checkResponse(h, awaitedRead(4096)).code(), Code::kRemoteError);
  h = readResp(4096);
  h.magic = 0;
  EXPECT_EQ(tcp::checkResponse(h, awaitedRead(4096)).code(), Code::kRemoteError);
}

TEST(TcpWire, error_response_with_unknown_code_or_long_reason_is_rejected) {
  WireHeader h = readResp(0);
  h.status = 200;
  h.length = 4;
  EXPECT_EQ(tcp::checkResponse(h, awaitedRead(4096)).code(), Code::kRemoteError);
  h.status = static_cast<uint8_t>(Code::kOutOfRange);
  h.length = tcp::kMaxReason + 1;
  EXPECT_EQ(tcp::checkResponse(h, awaitedRead(4096)).code(), Code::kRemoteError);
}

// ---- RUNS requests (frames of many runs) ---------------------------------------------

WireHeader runsReq(uint8_t type, uint64_t runs, uint32_t size) {
  WireHeader h;
  h.type = type;
  h.addr = runs;
  h.size = size;
  h.length = static_cast<uint32_t>(tcp::runTableBytes(runs) + (type == tcp::kWriteRunsReq ? size : 0));
  h.id = 7;
  return h;
}

TEST(TcpWire, run_entry_is_16_bytes_address_then_length) {
  EXPECT_EQ(sizeof(tcp::RunEntry), 16u);
  EXPECT_EQ(offsetof(tcp::RunEntry, addr), 0u);
  EXPECT_EQ(offsetof(tcp::RunEntry, len), 8u);
  EXPECT_EQ(offsetof(tcp::RunEntry, zero), 12u);
  EXPECT_EQ(tcp::runTableBytes(1024), 16384u);
}

TEST(TcpWire, runs_requests_of_1_to_max_runs_whose_length_is_table_and_payload_are_accepted) {
  EXPECT_TRUE(tcp::checkRequest(runsReq(tcp::kReadRunsReq, 1, 1), 1 << 20).ok());
  EXPECT_TRUE(tcp::checkRequest(runsReq(tcp::kReadRunsReq, tcp::kMaxFrameRuns, 1 << 20), 1 << 20).ok());
  EXPECT_TRUE(tcp::checkRequest(runsReq(tcp::kWriteRunsReq, 300, 300 * 4096), 4 << 20).ok());
}

TEST(TcpWire, runs_request_with_no_runs_or_more_than_max_runs_is_rejected_naming_the_count) {
  Status s = tcp::checkRequest(runsReq(tcp::kReadRunsReq, 0, 16), 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("carries 0 runs (must be 1..1024)"), std::string::npos) << s.message();
  s = tcp::checkRequest(runsReq(tcp::kWriteRunsReq, tcp::kMaxFrameRuns + 1, 2048), 1 << 20);
  EXPECT_NE(s.message().find("carries 1025 runs"), std::string::npos) << s.message();
  // A run count that would wrap the table's size around.
  EXPECT_EQ(tcp::checkRequest(runsReq(tcp::kReadRunsReq, 1ull << 60, 16), 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, runs_request_whose_length_is_not_table_plus_payload_is_rejected) {
  WireHeader h = runsReq(tcp::kWriteRunsReq, 4, 64);
  h.length -= 1;
  Status s = tcp::checkRequest(h, 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("has length 127 (must be 128)"), std::string::npos) << s.message();
  h = runsReq(tcp::kReadRunsReq, 4, 64);
  h.length += 64;  // a read carrying payload
  EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, a_bound_runs_request_counts_binding_table_and_payload) {
  EXPECT_TRUE(tcp::checkRequest(bound(runsReq(tcp::kReadRunsReq, 3, 300)), 1 << 20).ok());
  EXPECT_TRUE(tcp::checkRequest(bound(runsReq(tcp::kWriteRunsReq, 3, 300)), 1 << 20).ok());
  WireHeader h = runsReq(tcp::kWriteRunsReq, 4, 64);
  h.version = tcp::kBoundVersion;
  Status s = tcp::checkRequest(h, 1 << 20);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("has length 128 (must be 136)"), std::string::npos) << s.message();
}

TEST(TcpWire, runs_request_over_max_frame_or_of_size_0_is_rejected) {
  EXPECT_EQ(tcp::checkRequest(runsReq(tcp::kReadRunsReq, 2, (1 << 20) + 1), 1 << 20).code(), Code::kRemoteError);
  EXPECT_EQ(tcp::checkRequest(runsReq(tcp::kWriteRunsReq, 2, 0), 1 << 20).code(), Code::kRemoteError);
}

TEST(TcpWire, run_table_whose_runs_add_up_to_the_size_is_accepted) {
  const tcp::RunEntry runs[] = {{0x1000, 1, 0}, {0x9000, 4095, 0}, {0x100, 60, 0}};
  EXPECT_TRUE(tcp::checkRunTable(runsReq(tcp::kReadRunsReq, 3, 4156), runs).ok());
}

TEST(TcpWire, run_table_with_an_empty_run_a_reserved_word_or_a_wrong_sum_is_rejected_naming_the_run) {
  const tcp::RunEntry empty[] = {{0x1000, 8, 0}, {0x2000, 0, 0}};
  Status s = tcp::checkRunTable(runsReq(tcp::kReadRunsReq, 2, 8), empty);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("run 1 of 2 has length 0"), std::string::npos) << s.message();
  const tcp::RunEntry reserved[] = {{0x1000, 8, 3}};
  s = tcp::checkRunTable(runsReq(tcp::kReadRunsReq, 1, 8), reserved);
  EXPECT_NE(s.message().find("run 0 of 1 has reserved word 3"), std::string::npos) << s.message();
  const tcp::RunEntry runs[] = {{0x1000, 8, 0}, {0x2000, 8, 0}};
  s = tcp::checkRunTable(runsReq(tcp::kWriteRunsReq, 2, 17), runs);
  EXPECT_NE(s.message().find("add up to 16 bytes where its size is 17"), std::string::npos) << s.message();
  s = tcp::checkRunTable(runsReq(tcp::kWriteRunsReq, 2, 12), runs);
  EXPECT_NE(s.message().find("runs 0..1 of 2 add up to 16 bytes, more than its size 12"), std::string::npos)
      << s.message();
}

TEST(TcpWire, response_to_a_runs_request_must_be_of_the_runs_type) {
  tcp::Awaited frame{true, 7, true, 8192, true};
  WireHeader h = readResp(8192);
  Status s = tcp::checkResponse(h, frame);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.message().find("READ_RESP answers a READ_RUNS_REQ"), std::string::npos) << s.message();
  h.type = tcp::kReadRunsResp;
  EXPECT_TRUE(tcp::checkResponse(h, frame).ok());
  h.length = 8191;
  EXPECT_EQ(tcp::checkResponse(h, frame).code(), Code::kRemoteError);
  // A plain request is not answered by a RUNS response either.
  h = readResp(8192);
  h.type = tcp::kReadRunsResp;
  EXPECT_EQ(tcp::checkResponse(h, awaitedRead(8192)).code(), Code::kRemoteError);
  // Writes: no payload in the answer; a refusal carries a reason.
  WireHeader w;
  w.type = tcp::kWriteRunsResp;
  w.size = 8192;
  w.id = 7;
  EXPECT_TRUE(tcp::checkResponse(w, tcp::Awaited{true, 7, false, 8192, true}).ok());
  w.status = static_cast<uint8_t>(Code::kOutOfRange);
  w.size = 0;
  w.length = 40;
  EXPECT_TRUE(tcp::checkResponse(w, tcp::Awaited{true, 7, false, 8192, true}).ok());
  EXPECT_EQ(tcp::responseTo(tcp::kReadRunsReq), tcp::kReadRunsResp);
  EXPECT_EQ(tcp::responseTo(tcp::kWriteReq), tcp::kWriteResp);
}

TEST(TcpSettings, defaults_when_nothing_is_set) {
  Config c;
  TcpSettings s;
  ASSERT_TRUE(TcpTransport::loadSettings(c, s).ok());
  TcpSettings d;
  EXPECT_EQ(s.connections, d.connections);
  EXPECT_EQ(s.slice_size, d.slice_size);
  EXPECT_EQ(s.timeout_ms, d.timeout_ms);
  EXPECT_EQ(s.max_frame, d.max_frame);
  EXPECT_TRUE(s.home_connections);
  EXPECT_EQ(s.home_slack, 4u << 20);
  EXPECT_EQ(s.home_window_ms, 50u);
  EXPECT_EQ(s.group_bytes, 1u << 20);
}

TEST(TcpSettings, explicit_values_with_size_suffixes_are_read) {
  Config c;
  c.set("tcp.connections", "3");
  c.set("tcp.slice_size", "256K");
  c.set("tcp.timeout_ms", "750");
  c.set("tcp.sock_buf", "4M");
  c.set("tcp.home_connections", "false");
  c.set("tcp.home_slack", "512K");
  c.set("tcp.group_bytes", "0");
  TcpSettings s;
  ASSERT_TRUE(TcpTransport::loadSettings(c, s).ok());
  EXPECT_EQ(s.connections, 3u);
  EXPECT_EQ(s.slice_size, 256u << 10);
  EXPECT_EQ(s.timeout_ms, 750u);
  EXPECT_EQ(s.sock_buf, 4u << 20);
  EXPECT_FALSE(s.home_connections);
  EXPECT_EQ(s.home_slack, 512u << 10);
  EXPECT_EQ(s.group_bytes, 0u);
}

TEST(TcpSettings, junk_value_is_invalid_argument_naming_key_and_value) {
  Config c;
  c.set("tcp.connections", "lots");
  TcpSettings s;
  Status st = TcpTransport::loadSettings(c, s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tcp.connections"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("HAWSER_TCP_CONNECTIONS"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lots"), std::string::npos) << st.message();
}

TEST(TcpSettings, out_of_range_value_is_invalid_argument) {
  Config c;
  c.set("tcp.connections", "0");
  TcpSettings s;
  EXPECT_EQ(TcpTransport::loadSettings(c, s).code(), Code::kInvalidArgument);
  Config d;
  d.set("tcp.timeout_ms", "1");
  EXPECT_EQ(TcpTransport::loadSettings(d, s).code(), Code::kInvalidArgument);
}

TEST(TcpSettings, slice_larger_than_max_frame_is_invalid_argument) {
  Config c;
  c.set("tcp.slice_size", "8M");
  c.set("tcp.max_frame", "4M");
  TcpSettings s;
  Status st = TcpTransport::loadSettings(c, s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tcp.slice_size"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace hawser
