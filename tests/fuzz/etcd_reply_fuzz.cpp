// The etcd gateway's replies (src/metadata/etcd_replies.h): an HTTP status
// and a body from the network, then every reader the client and the store
// apply to a reply. None may throw (an escaping exception aborts: a crash
// here); refusals carry a known code and a gRPC code in 0..16.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "metadata/etcd_replies.h"
#include "metadata/etcd_txn.h"

using namespace hawser;
using namespace hawser::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  static constexpr long kHttp[] = {200, 200, 200, 400, 404, 500, 503, 0};
  const long http = kHttp[in.take<uint8_t>() % 8];
  nlohmann::json reply;
  bool transient = false;
  int grpc = -1;
  Status s = decodeReply(http, in.rest(), "127.0.0.1:2379", "/v3/kv/range", reply, transient, grpc);
  FUZZ_CHECK(grpc >= 0 && grpc <= 16);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Code::kMetadataError || s.code() == Code::kUnavailable || s.code() == Code::kTimeout);
    return 0;
  }
  FUZZ_CHECK(http == 200 && reply.is_object() && grpc == 0);
  std::vector<KeyValue> kvs;
  int64_t revision = 0;
  s = decodeRange(reply, kvs, revision);
  FUZZ_CHECK(s.ok() || s.code() == Code::kMetadataError);
  for (const auto& kv : kvs) {
    std::string back;
    FUZZ_CHECK(base64Decode(base64Encode(kv.key), back) && back == kv.key);
  }
  (void)txnSucceeded(reply);
  (void)txnDeleted(reply);
  for (size_t i = 0; i < 3; ++i) {
    bool malformed = false;
    std::optional<KeyValue> kv = rangeResult(reply, i, malformed);
    FUZZ_CHECK(!(kv && malformed));
    (void)jsonInt(txnResponse(reply, i, "response_delete_range"), "deleted");
  }
  int64_t id = 0, ttl = 0;
  std::string err;
  decodeLeaseGrant(reply, id, ttl, err);
  (void)decodeKeepAlive(reply);
  return 0;
}
