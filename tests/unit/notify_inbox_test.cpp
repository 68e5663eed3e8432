// NotifyInbox alone (engine/notify.h): the bounded receiving queue of one
// engine's notifications, its limits, what drain() hands out and its
// counters; and the wire form's round trip. The engine's notification
// methods forward to it (notify_test.cpp drives them end to end).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "engine/notify.h"
#include "rpc/rpc.h"

namespace hawser {
namespace {

ReceivedNotification note(const std::string& name, const std::string& message,
                          NotifyKind kind = NotifyKind::kDelivered) {
  ReceivedNotification n;
  n.peer = "127.0.0.1:1";
  n.name = name;
  n.message = message;
  n.kind = kind;
  if (kind == NotifyKind::kFailed) n.error = {Code::kIoError, "its submit failed"};
  return n;
}

class NotifyInboxTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(inbox_.start(rpc_, /*depth=*/3, /*max_bytes=*/16, "seg-a").ok()); }
  rpc::Server rpc_;  // never started: start() only registers the method
  NotifyInbox inbox_;
};

TEST_F(NotifyInboxTest, drain_hands_out_what_was_pushed_in_order_and_empties_the_queue) {
  ASSERT_TRUE(inbox_.push(note("a", "1")).ok());
  ASSERT_TRUE(inbox_.push(note("b", "2")).ok());
  std::vector<ReceivedNotification> out;
  inbox_.drain(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "a");
  EXPECT_EQ(out[0].message, "1");
  EXPECT_EQ(out[1].name, "b");
  EXPECT_EQ(out[1].peer, "127.0.0.1:1");
  inbox_.drain(out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(inbox_.received(), 2u);
}

TEST_F(NotifyInboxTest, a_full_queue_refuses_with_capacity_exceeded_naming_the_segment_and_counts_it) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(inbox_.push(note("n" + std::to_string(i), "")).ok());
  Status s = inbox_.push(note("late", ""));
  EXPECT_EQ(s.code(), Code::kCapacityExceeded);
  EXPECT_NE(s.message().find("segment 'seg-a' is full (3 undrained"), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("notify.queue_depth"), std::string::npos) << s.toString();
  EXPECT_EQ(inbox_.refusedFull(), 1u);
  std::vector<ReceivedNotification> out;
  inbox_.drain(out);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_TRUE(inbox_.push(note("again", "")).ok()) << "drained: room again";
}

TEST_F(NotifyInboxTest, a_notification_over_max_bytes_is_refused_with_invalid_argument_and_not_queued) {
  // name + message: 16 bytes fit, 17 do not.
  EXPECT_TRUE(inbox_.push(note("12345678", "12345678")).ok());
  Status s = inbox_.push(note("12345678", "123456789"));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 16 bytes"), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("this one has 17"), std::string::npos) << s.toString();
  std::vector<ReceivedNotification> out;
  inbox_.drain(out);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(inbox_.refusedFull(), 0u) << "too large is not full";
}

TEST_F(NotifyInboxTest, failure_records_are_counted_apart_and_handed_out_only_when_asked_for) {
  ASSERT_TRUE(inbox_.push(note("ok", "m")).ok());
  ASSERT_TRUE(inbox_.push(note("bad", "", NotifyKind::kFailed)).ok());
  EXPECT_EQ(inbox_.received(), 1u);
  EXPECT_EQ(inbox_.failuresReceived(), 1u);
  std::vector<ReceivedNotification> out;
  inbox_.drain(out, /*with_failures=*/true);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].kind, NotifyKind::kFailed);
  EXPECT_EQ(out[1].error.code(), Code::kIoError);

  ASSERT_TRUE(inbox_.push(note("bad2", "", NotifyKind::kFailed)).ok());
  ASSERT_TRUE(inbox_.push(note("ok2", "m")).ok());
  inbox_.drain(out);  // without failures: the failure record is dropped
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "ok2");
  inbox_.drain(out, true);
  EXPECT_TRUE(out.empty()) << "the dropped record does not come back";
}

TEST_F(NotifyInboxTest, concurrent_pushers_and_a_drainer_lose_nothing_beyond_the_refusals) {
  NotifyInbox big;
  ASSERT_TRUE(big.start(rpc_, 1000000, 64, "seg-b").ok());
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t)
    pushers.emplace_back([&big, t] {
      for (int i = 0; i < kEach; ++i) ASSERT_TRUE(big.push(note(std::to_string(t), std::to_string(i))).ok());
    });
  size_t drained = 0;
  std::vector<ReceivedNotification> out;
  while (drained < size_t(kThreads) * kEach) {
    big.drain(out);
    drained += out.size();
    if (out.empty()) std::this_thread::yield();
  }
  for (auto& p : pushers) p.join();
  big.drain(out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(drained, size_t(kThreads) * kEach);
  EXPECT_EQ(big.received(), uint64_t(kThreads) * kEach);
}

TEST(NotificationWire, encodes_and_decodes_back_and_refuses_a_truncated_or_padded_body) {
  Notification n;
  n.name = "layer-7";
  n.message = std::string("bytes\0inside", 12);
  const std::string body = encodeNotification("seg-x", n);
  ReceivedNotification r;
  ASSERT_TRUE(decodeNotification(body, r).ok());
  EXPECT_EQ(r.peer, "seg-x");
  EXPECT_EQ(r.name, "layer-7");
  EXPECT_EQ(r.message, n.message);
  Status cut = decodeNotification(body.substr(0, body.size() - 1), r);
  EXPECT_EQ(cut.code(), Code::kInvalidArgument);
  EXPECT_EQ(cut.message(), "malformed notification (" + std::to_string(body.size() - 1) + " bytes)");
  EXPECT_EQ(decodeNotification(body + "x", r).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hawser
