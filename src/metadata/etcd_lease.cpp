// etcd_client.h, leases: grant, keepalive, revoke.
#include "metadata/etcd_client.h"
#include "metadata/etcd_replies.h"

namespace hawser::etcd {

Status Client::leaseGrant(int64_t ttl_s, int64_t& id, int64_t& granted_ttl_s, const CallOptions& co_in) {
  nlohmann::json reply;
  CallOptions co = co_in;
  co.idempotent = false;
  Status st = call("lease/grant", {{"TTL", std::to_string(ttl_s)}}, reply, co);
  if (!st.ok()) return st;
  std::string err;
  decodeLeaseGrant(reply, id, granted_ttl_s, err);
  if (id == 0 || granted_ttl_s <= 0) {
    return Status(Code::kMetadataError, "etcd at " + endpointsText() + " did not grant a lease of " +
                                            std::to_string(ttl_s) + " s" + (err.empty() ? "" : ": " + err));
  }
  return Status::OK();
}

Status Client::leaseKeepAlive(int64_t id, int64_t& ttl_s, const CallOptions& co_in) {
  ttl_s = 0;
  nlohmann::json reply;
  int gc = 0;
  CallOptions co = co_in;
  co.grpc_code = &gc;
  Status st = call("lease/keepalive", {{"ID", std::to_string(id)}}, reply, co);
  if (!st.ok()) {
    if (gc == 5) return Status::OK();  // lease not found: lost
    return st;
  }
  ttl_s = decodeKeepAlive(reply);
  return Status::OK();
}

Status Client::leaseRevoke(int64_t id, const CallOptions& co_in) {
  nlohmann::json reply;
  int gc = 0;
  CallOptions co = co_in;
  co.grpc_code = &gc;
  Status st = call("lease/revoke", {{"ID", std::to_string(id)}}, reply, co);
  if (!st.ok() && gc == 5) return Status::OK();
  return st;
}

}  // namespace hawser::etcd
