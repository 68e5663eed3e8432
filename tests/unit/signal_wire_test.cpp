// The wire form of signals (src/engine/signal_wire.h): what is encoded
// decodes to the same records, and every malformed body is refused with
// kInvalidArgument (frames) or kRemoteError (replies), never read past its end.
#include <gtest/gtest.h>

#include "engine/signal_wire.h"

using namespace hawser;

namespace {

SignalFrame sample() {
  SignalFrame f;
  f.from = "10.0.0.1:7000";
  f.host = "10.0.0.1";
  f.port = 7000;
  f.incarnation = 0x1234567890abcdefULL;
  f.seq = 42;
  SignalRecord open;
  open.kind = SignalRecord::kOpen;
  open.id = 7;
  open.signal = "req-7";
  open.requests = 3;
  SignalRecord done;
  done.kind = SignalRecord::kDone;
  done.id = 8;
  done.has_notify = true;
  done.notify_name = "kv";
  done.code = static_cast<int32_t>(Code::kOutOfRange);
  done.reason = SignalReason::kRefused;
  done.error = std::string("bytes\0inside", 12);
  f.records = {open, done};
  return f;
}

TEST(SignalWire, a_frame_decodes_to_the_records_it_was_encoded_from) {
  const SignalFrame f = sample();
  SignalFrame g;
  ASSERT_TRUE(decodeSignalFrame(encodeSignalFrame(f), g).ok());
  EXPECT_EQ(g.from, f.from);
  EXPECT_EQ(g.host, f.host);
  EXPECT_EQ(g.port, f.port);
  EXPECT_EQ(g.incarnation, f.incarnation);
  EXPECT_EQ(g.seq, f.seq);
  ASSERT_EQ(g.records.size(), 2u);
  EXPECT_EQ(g.records[0].kind, SignalRecord::kOpen);
  EXPECT_EQ(g.records[0].signal, "req-7");
  EXPECT_EQ(g.records[0].requests, 3u);
  EXPECT_FALSE(g.records[0].has_notify);
  EXPECT_EQ(g.records[1].id, 8u);
  EXPECT_TRUE(g.records[1].has_notify);
  EXPECT_EQ(g.records[1].notify_name, "kv");
  EXPECT_EQ(g.records[1].code, static_cast<int32_t>(Code::kOutOfRange));
  EXPECT_EQ(g.records[1].reason, SignalReason::kRefused);
  EXPECT_EQ(g.records[1].error, std::string("bytes\0inside", 12));
}

TEST(SignalWire, every_truncation_and_a_trailing_byte_are_refused) {
  const std::string body = encodeSignalFrame(sample());
  for (size_t n = 0; n < body.size(); ++n) {
    SignalFrame g;
    EXPECT_EQ(decodeSignalFrame(body.substr(0, n), g).code(), Code::kInvalidArgument) << n << " bytes";
  }
  SignalFrame g;
  EXPECT_EQ(decodeSignalFrame(body + "x", g).code(), Code::kInvalidArgument);
}

TEST(SignalWire, bad_version_kind_reason_code_and_record_count_are_refused) {
  const std::string body = encodeSignalFrame(sample());
  SignalFrame g;
  std::string bad = body;
  bad[0] = 9;  // version
  EXPECT_NE(decodeSignalFrame(bad, g).message().find("unknown version"), std::string::npos);
  // The record count (after version, two strings, port, incarnation, seq).
  const size_t count_at = 1 + 4 + 13 + 4 + 8 + 2 + 8 + 8;
  bad = body;
  bad[count_at + 3] = 0x7f;
  EXPECT_NE(decodeSignalFrame(bad, g).message().find("more records than bytes"), std::string::npos);
  const size_t first_record = count_at + 4;
  bad = body;
  bad[first_record] = 3;  // kind
  EXPECT_NE(decodeSignalFrame(bad, g).message().find("unknown record kind"), std::string::npos);
  SignalFrame f = sample();
  f.records[1].code = 99;
  EXPECT_NE(decodeSignalFrame(encodeSignalFrame(f), g).message().find("bad code"), std::string::npos);
  f = sample();
  f.records[1].reason = static_cast<SignalReason>(77);
  EXPECT_NE(decodeSignalFrame(encodeSignalFrame(f), g).message().find("bad flags or reason"), std::string::npos);
}

TEST(SignalWire, replies_carry_one_outcome_per_done_record) {
  std::vector<Status> got;
  ASSERT_TRUE(decodeOutcomes(encodeOutcomes({Status::OK(), Status(Code::kCapacityExceeded, "full")}), got).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].ok());
  EXPECT_EQ(got[1].code(), Code::kCapacityExceeded);
  EXPECT_EQ(got[1].message(), "full");
  const std::string body = encodeOutcomes({Status(Code::kTimeout, "late")});
  for (size_t n = 0; n < body.size(); ++n)
    EXPECT_EQ(decodeOutcomes(body.substr(0, n), got).code(), Code::kRemoteError) << n << " bytes";
  AliveReply a{0xfeed, 17}, b;
  ASSERT_TRUE(decodeAlive(encodeAlive(a), b).ok());
  EXPECT_EQ(b.incarnation, 0xfeedu);
  EXPECT_EQ(b.abandoned, 17u);
  EXPECT_EQ(decodeAlive("short", b).code(), Code::kRemoteError);
}

}  // namespace
