// Reading the etcd gateway's replies and watch streams when etcd (or
// whatever answers on its port) sends fields of unexpected types: nothing
// throws, refusals carry the right code. Inputs the fuzzers found are pinned
// here (tests/fuzz/corpus/etcd_*/crash-*).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "metadata/etcd_replies.h"
#include "metadata/etcd_txn.h"
#include "metadata/etcd_watch_stream.h"

namespace hawser::etcd {
namespace {

using json = nlohmann::json;

Status decode(long http, const std::string& body, json& out, bool& transient, int& grpc) {
  return decodeReply(http, body, "127.0.0.1:2379", "/v3/kv/range", out, transient, grpc);
}

TEST(EtcdReplies, non_json_body_is_a_transient_metadata_error) {
  json out;
  bool transient = false;
  int grpc = -1;
  Status s = decode(200, "<html>proxy</html>", out, transient, grpc);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_TRUE(transient);
  EXPECT_EQ(grpc, 0);
  EXPECT_NE(s.message().find("non-JSON body"), std::string::npos) << s.message();
}

TEST(EtcdReplies, refusal_maps_grpc_codes_and_reads_the_message) {
  json out;
  bool transient = true;
  int grpc = 0;
  Status s = decode(404, R"({"code":5,"message":"requested lease not found"})", out, transient, grpc);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_FALSE(transient);
  EXPECT_EQ(grpc, 5);
  EXPECT_NE(s.message().find("requested lease not found"), std::string::npos);
  s = decode(200, R"({"error":{"code":14,"message":"no leader"}})", out, transient, grpc);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_TRUE(transient);
  s = decode(503, R"({"code":"4"})", out, transient, grpc);
  EXPECT_EQ(s.code(), Code::kTimeout);
}

TEST(EtcdReplies, refusal_fields_of_other_types_do_not_throw) {
  json out;
  bool transient = false;
  int grpc = -1;
  // A message that is not a string, and a code outside gRPC's 0..16.
  Status s = decode(500, R"({"code":123456789012,"message":{"x":1},"error":7})", out, transient, grpc);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_EQ(grpc, 2);  // UNKNOWN
}

TEST(EtcdReplies, readers_accept_any_shape_without_throwing) {
  for (const char* text : {R"({"succeeded":"yes","responses":{"a":1}})", R"({"responses":[1,"x",null]})",
                           R"({"responses":[{"response_range":[]}]})", R"({"kvs":{"k":"v"},"header":7})",
                           R"({"ID":"x","TTL":1.5,"error":3,"result":[]})"}) {
    json reply = json::parse(text);
    std::vector<KeyValue> kvs;
    int64_t rev = -1;
    EXPECT_TRUE(decodeRange(reply, kvs, rev).ok()) << text;
    EXPECT_TRUE(kvs.empty());
    EXPECT_FALSE(txnSucceeded(reply)) << text;
    EXPECT_EQ(txnDeleted(reply), 0) << text;
    bool malformed = true;
    EXPECT_FALSE(rangeResult(reply, 0, malformed).has_value());
    EXPECT_FALSE(malformed);
    int64_t id = -1, ttl = -1;
    std::string err;
    decodeLeaseGrant(reply, id, ttl, err);
    EXPECT_EQ(id, 0);
    EXPECT_EQ(decodeKeepAlive(reply), 0);
  }
}

TEST(EtcdReplies, malformed_kv_in_a_range_is_a_metadata_error) {
  std::vector<KeyValue> kvs;
  int64_t rev = 0;
  json reply = json::parse(R"({"header":{"revision":"9"},"kvs":[{"key":"a2V5","value":"!!"}]})");
  EXPECT_EQ(decodeRange(reply, kvs, rev).code(), Code::kMetadataError);
  reply = json::parse(R"({"header":{"revision":"9"},"kvs":[{"key":"a2V5","value":"dmFs"}]})");
  ASSERT_TRUE(decodeRange(reply, kvs, rev).ok());
  ASSERT_EQ(kvs.size(), 1u);
  EXPECT_EQ(kvs[0].key, "key");
  EXPECT_EQ(kvs[0].value, "val");
  EXPECT_EQ(rev, 9);
}

TEST(EtcdReplies, deleted_counts_add_up_over_responses) {
  json reply = json::parse(
      R"({"responses":[{"response_delete_range":{"deleted":"1"}},{"response_delete_range":{"deleted":"2"}}]})");
  EXPECT_EQ(txnDeleted(reply), 3);
}

struct Watch {
  int created = 0;
  std::vector<std::string> keys;
  std::function<void()> on_created = [this] { ++created; };
  std::function<void(int64_t, const std::vector<WatchEvent>&)> on_events = [this](int64_t,
                                                                                 const std::vector<WatchEvent>& e) {
    for (auto& ev : e) keys.push_back((ev.is_delete ? "-" : "+") + ev.kv.key);
  };
  WatchStream ws;
  Watch() {
    ws.on_created = &on_created;
    ws.on_events = &on_events;
  }
};

TEST(EtcdWatchStream, messages_cut_anywhere_give_the_same_events) {
  const std::string body =
      "{\"result\":{\"created\":true}}\n"
      "{\"result\":{\"header\":{\"revision\":\"5\"},\"events\":[{\"kv\":{\"key\":\"YQ==\"}},"
      "{\"type\":\"DELETE\",\"kv\":{\"key\":\"Yg==\"}}]}}\n";
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, body.size()}) {
    Watch w;
    for (size_t off = 0; off < body.size(); off += chunk) ASSERT_TRUE(w.ws.feed(body.substr(off, chunk)));
    EXPECT_EQ(w.created, 1);
    EXPECT_EQ(w.keys, (std::vector<std::string>{"+a", "-b"})) << "chunk " << chunk;
  }
}

TEST(EtcdWatchStream, fields_of_other_types_end_the_stream_without_throwing) {
  {
    Watch w;  // a cancel reason that is not a string
    EXPECT_FALSE(w.ws.feed("{\"result\":{\"canceled\":true,\"cancel_reason\":5}}\n"));
    EXPECT_TRUE(w.ws.canceled);
    EXPECT_EQ(w.ws.reason, "watch canceled by etcd");
  }
  {
    Watch w;  // a result that is not an object: nothing happened
    EXPECT_TRUE(w.ws.feed("{\"result\":[1,2]}\n"));
    EXPECT_FALSE(w.ws.bad);
  }
  {
    Watch w;  // an event that is not an object
    EXPECT_FALSE(w.ws.feed("{\"result\":{\"events\":[7]}}\n"));
    EXPECT_TRUE(w.ws.bad);
    EXPECT_EQ(w.ws.reason, "malformed kv in a watch event");
  }
  {
    Watch w;  // an error whose message is not a string
    EXPECT_FALSE(w.ws.feed("{\"error\":{\"message\":[]}}\n"));
    EXPECT_TRUE(w.ws.canceled);
    EXPECT_EQ(w.ws.reason, "watch error");
  }
}

TEST(EtcdWatchStream, created_twice_is_reported_once) {
  Watch w;
  EXPECT_TRUE(w.ws.feed("{\"result\":{\"created\":true}}\n{\"result\":{\"created\":true}}\n"));
  EXPECT_EQ(w.created, 1);
}

}  // namespace
}  // namespace hawser::etcd
