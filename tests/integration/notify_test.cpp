// Notifications (TransferEngine::sendNotify / getNotifies / submitTransfer
// with a notification): the bounded receiving queue refuses at the sender,
// in this process and across processes; bad input is refused with its own
// code before anything is sent; what the receiver drains carries the
// sender's segment name and the exact bytes, in order. The per-transport
// guarantees (delivered after the writes, in issue order, never for a failed
// transfer) are in the transport suite (common/transport_suite.h).
#include <gtest/gtest.h>

#include <future>

#include "common/engine_pair.h"
#include "common/util.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

EngineOptions opts(std::map<std::string, std::string> config) {
  EngineOptions o;
  o.config = std::move(config);
  o.config["transport"] = "tcp";
  return o;
}

class Notify : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(receiver_.init("p2p", "receiver", "127.0.0.1", 0, opts({{"notify.queue_depth", "2"}})).ok());
    ASSERT_TRUE(sender_.init("p2p", "sender", "127.0.0.1", 0, opts({{"notify.max_message_bytes", "100"}})).ok());
    ASSERT_TRUE(receiver_.registerLocalMemory(target_.p, target_.n, "cpu:0", true).ok());
    ASSERT_TRUE(sender_.registerLocalMemory(local_.p, local_.n, "cpu:0", false).ok());
    ASSERT_TRUE(sender_.openSegment(receiver_.segmentName(), seg_).ok());
  }
  uint64_t remote(size_t off) const { return reinterpret_cast<uint64_t>(target_.p) + off; }

  Buffer target_{1u << 20}, local_{1u << 20};
  TransferEngine receiver_, sender_;
  SegmentID seg_ = kInvalidSegment;
};

TEST_F(Notify, receiver_drains_them_oldest_first_with_the_senders_segment_name_and_exact_bytes) {
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(sender_.sendNotify(seg_, Notification{"first", binary}).ok());
  ASSERT_TRUE(sender_.sendNotify(seg_, Notification{std::string("n\0", 2), ""}).ok());
  std::vector<ReceivedNotification> got{{"stale", "stale", "stale"}};
  ASSERT_TRUE(receiver_.getNotifies(got).ok());
  ASSERT_EQ(got.size(), 2u) << "getNotifies replaces what `out` held";
  EXPECT_EQ(got[0].peer, sender_.segmentName());
  EXPECT_EQ(got[0].name, "first");
  EXPECT_EQ(got[0].message, binary);
  EXPECT_EQ(got[1].name, std::string("n\0", 2));
  EXPECT_EQ(got[1].message, "");
  ASSERT_TRUE(receiver_.getNotifies(got).ok());
  EXPECT_TRUE(got.empty()) << "drained";
  EXPECT_EQ(counter(sender_, "", "notifies_delivered"), 2u);
  EXPECT_EQ(counter(receiver_, "", "notifies_received"), 2u);
}

TEST_F(Notify, a_full_queue_is_an_error_at_the_sender_naming_the_receiver_and_draining_makes_room) {
  ASSERT_TRUE(sender_.sendNotify(seg_, Notification{"a", "1"}).ok());
  ASSERT_TRUE(sender_.sendNotify(seg_, Notification{"b", "2"}).ok());
  Status full = sender_.sendNotify(seg_, Notification{"c", "3"});
  EXPECT_EQ(full.code(), Code::kCapacityExceeded) << full.toString();
  EXPECT_NE(full.message().find("notification queue of segment '" + receiver_.segmentName() + "' is full"),
            std::string::npos)
      << full.toString();
  EXPECT_NE(full.message().find("notify.queue_depth"), std::string::npos) << full.toString();

  // After a transfer: the bytes land, the notification is refused, and the
  // batch says so; transferSync returns the refusal.
  fillPattern(local_.p, 4096, 9);
  BatchID b;
  ASSERT_TRUE(sender_.allocateBatchID(1, b).ok());
  ASSERT_TRUE(
      sender_.submitTransfer(b, {{OpCode::kWrite, local_.p, seg_, remote(0), 4096}}, Notification{"d", "4"}).ok());
  ASSERT_TRUE(sender_.waitTransfer(b, std::chrono::seconds(20)).ok());
  TransferStatus st;
  ASSERT_TRUE(sender_.getTransferStatus(b, 0, st).ok());
  EXPECT_EQ(st.s, TransferState::kCompleted);
  EXPECT_EQ(checkPattern(target_.p, 4096, 9), -1);
  std::vector<NotifyStatus> ns;
  ASSERT_TRUE(sender_.getNotifyStatus(b, ns).ok());
  ASSERT_EQ(ns.size(), 1u);
  EXPECT_EQ(ns[0].s, NotifyState::kFailed) << notifyStateName(ns[0].s);
  EXPECT_EQ(ns[0].error.code(), Code::kCapacityExceeded) << ns[0].error.toString();
  ASSERT_TRUE(sender_.freeBatchID(b).ok());
  Status sync = sender_.transferSync({{OpCode::kWrite, local_.p, seg_, remote(0), 4096}}, Notification{"e", "5"},
                                     std::chrono::seconds(20));
  EXPECT_EQ(sync.code(), Code::kCapacityExceeded) << sync.toString();
  EXPECT_EQ(counter(receiver_, "", "notifies_refused_queue_full"), 3u);
  EXPECT_EQ(counter(sender_, "", "notifies_failed"), 3u);

  std::vector<ReceivedNotification> got;
  ASSERT_TRUE(receiver_.getNotifies(got).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "a");
  EXPECT_EQ(got[1].name, "b");
  Status after = sender_.transferSync({{OpCode::kWrite, local_.p, seg_, remote(0), 4096}}, Notification{"f", "6"},
                                      std::chrono::seconds(20));
  EXPECT_TRUE(after.ok()) << after.toString();
  ASSERT_TRUE(receiver_.getNotifies(got).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "f");
}

TEST_F(Notify, bad_input_is_refused_before_anything_is_sent) {
  BatchID b;
  ASSERT_TRUE(sender_.allocateBatchID(4, b).ok());
  // No request to follow.
  EXPECT_EQ(sender_.submitTransfer(b, {}, Notification{"x", ""}).code(), Code::kInvalidArgument);
  EXPECT_EQ(sender_.transferSync({}, Notification{"x", ""}, std::chrono::seconds(1)).code(), Code::kInvalidArgument);
  // Larger than notify.max_message_bytes (100): name + message counts.
  Status big = sender_.sendNotify(seg_, Notification{std::string(50, 'n'), std::string(51, 'm')});
  EXPECT_EQ(big.code(), Code::kInvalidArgument) << big.toString();
  EXPECT_NE(big.message().find("notify.max_message_bytes"), std::string::npos) << big.toString();
  EXPECT_EQ(sender_.submitTransfer(b, {{OpCode::kWrite, local_.p, seg_, remote(0), 16}},
                                   Notification{"n", std::string(100, 'm')})
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(sender_.sendNotify(seg_, Notification{std::string(50, 'n'), std::string(50, 'm')}).ok())
      << "exactly the limit is allowed";
  // A segment that is not open.
  EXPECT_EQ(sender_.sendNotify(seg_ + 100, Notification{"x", ""}).code(), Code::kSegmentNotFound);
  // A file segment has no engine to notify.
  TempDir dir;
  const std::string path = dir.path + "/f";
  ASSERT_TRUE(writeFile(path, 8192, 1));
  SegmentID file;
  ASSERT_TRUE(sender_.openSegment("file://" + path, file).ok());
  Status fs = sender_.sendNotify(file, Notification{"x", ""});
  EXPECT_EQ(fs.code(), Code::kInvalidArgument) << fs.toString();
  EXPECT_NE(fs.message().find("file segment"), std::string::npos) << fs.toString();
  EXPECT_EQ(sender_.submitTransfer(b, {{OpCode::kRead, local_.p, file, 0, 4096}}, Notification{"x", ""}).code(),
            Code::kInvalidArgument);
  // Nothing was submitted by the refused calls, nothing was queued.
  TransferStatus agg;
  ASSERT_TRUE(sender_.getBatchTransferStatus(b, agg).ok());
  EXPECT_EQ(agg.s, TransferState::kWaiting);
  std::vector<NotifyStatus> ns;
  ASSERT_TRUE(sender_.getNotifyStatus(b, ns).ok());
  EXPECT_TRUE(ns.empty());
  ASSERT_TRUE(sender_.freeBatchID(b).ok());
  EXPECT_EQ(sender_.getNotifyStatus(b, ns).code(), Code::kInvalidBatch);
  std::vector<ReceivedNotification> got;
  ASSERT_TRUE(receiver_.getNotifies(got).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, std::string(50, 'n'));
  TransferEngine idle;
  EXPECT_EQ(idle.getNotifies(got).code(), Code::kInvalidArgument);
  EXPECT_EQ(idle.sendNotify(1, Notification{}).code(), Code::kInvalidArgument);
}

TEST_F(Notify, a_receiver_that_is_gone_is_unavailable_at_the_sender) {
  ASSERT_TRUE(sender_.sendNotify(seg_, Notification{"x", ""}).ok());
  const std::string name = receiver_.segmentName();
  receiver_.~TransferEngine();
  new (&receiver_) TransferEngine();
  Status s = sender_.sendNotify(seg_, Notification{"y", ""});
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.toString();
  EXPECT_NE(s.message().find("'y' to segment '" + name + "'"), std::string::npos) << s.toString();
}

// Issue order, pinned with a transport whose slices can be held: a
// notification waits for an earlier one whose transfer has not ended, and a
// failed transfer's notification is skipped, never sent.
TEST(NotifyOrder, a_later_notification_waits_for_an_earlier_ones_transfer_and_a_failed_one_is_skipped) {
  EnginePair p;
  ASSERT_TRUE(p.setup_status.ok()) << p.setup_status.toString();
  p.fake_init->hold(true);
  BatchID b1, b2;
  ASSERT_TRUE(p.init.allocateBatchID(1, b1).ok());
  ASSERT_TRUE(p.init.allocateBatchID(1, b2).ok());
  ASSERT_TRUE(p.init.submitTransfer(b1, {{OpCode::kWrite, p.local(0), p.seg, p.remote(0), 8192}},
                                    Notification{"first", ""})
                  .ok());
  ASSERT_TRUE(p.init.submitTransfer(b2, {{OpCode::kWrite, p.local(8192), p.seg, p.remote(8192), 4096}},
                                    Notification{"second", ""})
                  .ok());
  // Issued after both submits (the thread starts here).
  auto third = std::async(std::launch::async, [&] { return p.init.sendNotify(p.seg, Notification{"third", ""}); });
  std::vector<ReceivedNotification> got;
  // Held: nothing may arrive, and sendNotify waits behind "first".
  EXPECT_TRUE(holdsFor(
      [&] {
        return p.target.getNotifies(got).ok() && got.empty() &&
               third.wait_for(std::chrono::seconds(0)) == std::future_status::timeout;
      },
      std::chrono::milliseconds(300)));
  std::vector<NotifyStatus> ns;
  ASSERT_TRUE(p.init.getNotifyStatus(b1, ns).ok());
  ASSERT_EQ(ns.size(), 1u);
  EXPECT_EQ(ns[0].s, NotifyState::kWaiting);
  // The first transfer fails; the rest go, in order.
  p.fake_init->setVerdict([&](const FakeTransport::Slice& s) {
    return s.remote < p.remote(8192) ? TransferState::kFailed : TransferState::kCompleted;
  });
  p.fake_init->hold(false);
  ASSERT_TRUE(third.get().ok());
  ASSERT_TRUE(p.init.waitTransfer(b1, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(p.init.waitTransfer(b2, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(p.init.getNotifyStatus(b1, ns).ok());
  EXPECT_EQ(ns[0].s, NotifyState::kNotSent);
  EXPECT_NE(ns[0].error.message().find("'first' not sent: task 0 of batch"), std::string::npos)
      << ns[0].error.toString();
  ASSERT_TRUE(p.init.getNotifyStatus(b2, ns).ok());
  EXPECT_EQ(ns[0].s, NotifyState::kDelivered) << "waitTransfer returns once the notification is settled";
  ASSERT_TRUE(p.target.getNotifies(got).ok());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "second");
  EXPECT_EQ(got[1].name, "third");
  EXPECT_TRUE(p.init.freeBatchID(b1).ok());
  EXPECT_TRUE(p.init.freeBatchID(b2).ok());
}

// Across processes: a `hawser serve` that never drains, with a queue of 3.
TEST(NotifyAcrossProcesses, a_full_queue_in_another_process_is_refused_at_the_sender) {
  Child child;
  ASSERT_TRUE(child.start({"serve", "--listen", "127.0.0.1:0", "--memory", "1M"}, {"HAWSER_NOTIFY_QUEUE_DEPTH=3"}));
  std::string seg = child.waitFor("segment: ", 20000);
  ASSERT_FALSE(seg.empty());
  ASSERT_FALSE(child.waitFor("ready", 20000).empty());
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "sender", "127.0.0.1", 0).ok());
  SegmentID id;
  ASSERT_TRUE(e.openSegment(seg.substr(9), id).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e.sendNotify(id, Notification{"n" + std::to_string(i), ""}).ok()) << i;
  Status s = e.sendNotify(id, Notification{"n3", ""});
  EXPECT_EQ(s.code(), Code::kCapacityExceeded) << s.toString();
  EXPECT_NE(s.message().find("'" + seg.substr(9) + "' is full (3 undrained"), std::string::npos) << s.toString();
}

}  // namespace
}  // namespace hawser::test
