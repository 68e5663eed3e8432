// The tcp transport's wire checks, settings and transport selection.
#include <gtest/gtest.h>

#include <cstddef>

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
  WireHeader h = readReq(16);
  h.version = 2;
  EXPECT_EQ(tcp::checkRequest(h, 1 << 20).code(), Code::kRemoteError);
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
}

TEST(TcpSettings, explicit_values_with_size_suffixes_are_read) {
  Config c;
  c.set("tcp.connections", "3");
  c.set("tcp.slice_size", "256K");
  c.set("tcp.timeout_ms", "750");
  c.set("tcp.sock_buf", "4M");
  c.set("tcp.home_connections", "false");
  c.set("tcp.home_slack", "512K");
  TcpSettings s;
  ASSERT_TRUE(TcpTransport::loadSettings(c, s).ok());
  EXPECT_EQ(s.connections, 3u);
  EXPECT_EQ(s.slice_size, 256u << 10);
  EXPECT_EQ(s.timeout_ms, 750u);
  EXPECT_EQ(s.sock_buf, 4u << 20);
  EXPECT_FALSE(s.home_connections);
  EXPECT_EQ(s.home_slack, 512u << 10);
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
