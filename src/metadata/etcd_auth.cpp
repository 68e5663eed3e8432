// etcd_client.h, authentication: the token of etcd user Options::security.user
// (POST /v3/auth/authenticate), kept for every request and renewed when etcd
// says it is invalid; the URL scheme and headers every request is sent with.
#include "metadata/etcd_client.h"

#include "base/log.h"
#include "metadata/etcd_replies.h"

namespace hawser::etcd {

std::string Client::token() const {
  std::lock_guard<std::mutex> lk(token_mu_);
  return token_;
}

Status Client::refreshToken(const std::string& stale) {
  std::lock_guard<std::mutex> one(auth_call_mu_);
  if (token() != stale) return Status::OK();  // another call renewed it meanwhile
  const Security& s = options_.security;
  nlohmann::json reply;
  int gc = 0;
  CallOptions co;
  co.no_auth = true;
  co.grpc_code = &gc;
  Status st = call("auth/authenticate", {{"name", s.user}, {"password", s.password}}, reply, co);
  if (!st.ok()) {
    if (st.message().find("authentication is not enabled") != std::string::npos) {
      if (!auth_disabled_.exchange(true))
        HLOG_WARN("etcd at {}: etcd.user '{}' is set but etcd has authentication disabled; requests carry no token",
                  endpointsText(), s.user);
      return Status::OK();
    }
    if (st.code() == Code::kPermissionDenied) return st;  // says which setting (etcd_security.cpp)
    return Status(st.code(), "etcd authentication as user '" + s.user + "' (etcd.user) failed: " + st.message());
  }
  const std::string t = memberString(reply, "token");  // any JSON: never throws
  if (t.empty())
    return Status(Code::kMetadataError, "etcd at " + endpointsText() + " answered /v3/auth/authenticate for user '" +
                                            s.user + "' without a token");
  {
    std::lock_guard<std::mutex> lk(token_mu_);
    token_ = t;
  }
  auth_disabled_.store(false);
  authentications_.fetch_add(1);
  HLOG_DEBUG("etcd at {}: authenticated as user '{}'", endpointsText(), s.user);
  return Status::OK();
}

std::string Client::urlOf(const Endpoint& ep, const std::string& url_path) const {
  return std::string(options_.security.scheme()) + "://" + ep.text() + url_path;
}

std::string Client::authHeader(const std::string& token) {
  return token.empty() ? std::string() : "Authorization: " + token;
}

}  // namespace hawser::etcd
