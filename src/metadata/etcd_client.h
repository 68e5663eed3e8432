// A small etcd v3 client over etcd's HTTP/JSON gateway (grpc-gateway), built
// on libcurl. Every call is a POST of a JSON body to /v3/<service>/<method>;
// keys and values travel base64-encoded, int64 fields come back as strings
// (etcd_codec.h).
//
// One class, implemented by concept: etcd_gateway.cpp (the HTTP transport:
// call, failover, retries), etcd_kv.cpp (range, put, compare-and-swap),
// etcd_lease.cpp (grant, keepalive, revoke), etcd_watch.cpp (watch streams,
// parsed by etcd_watch_stream.h).
//
// Endpoints: a list of "host:port"; a call goes to the endpoint that last
// answered and fails over to the next one when it cannot be reached. A call
// is retried (bounded rounds, exponential backoff) while its deadline allows.
// Thread-safe: requests go through http::Client (http_client.h), whose curl
// handles come from a pool, one per concurrent call.
//
// Security (etcd_security.h, etcd_auth.cpp): with Options::security.tls
// every request is https with etcd's certificate verified (and a client
// certificate when one is set); with a user, the first call authenticates
// (POST /v3/auth/authenticate) and every request carries the token in its
// Authorization header; a request that etcd answers "invalid auth token"
// (it expired, or etcd restarted) authenticates again and is sent again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "hawser/status.h"
#include "metadata/etcd_codec.h"
#include "metadata/etcd_security.h"
#include "metadata/etcd_uri.h"
#include "metadata/etcd_watch_stream.h"
#include "metadata/http_client.h"

namespace hawser::etcd {

struct Options {
  // Deadline of one foreground call, retries included.
  std::chrono::milliseconds timeout{3000};
  // Per attempt, to establish the TCP connection to one endpoint.
  std::chrono::milliseconds connect_timeout{1000};
  // Extra rounds over all endpoints after the first one fails.
  int retries = 2;
  // First backoff between rounds (doubles each round).
  std::chrono::milliseconds backoff{100};
  // TLS and authentication (etcds://, etcd users).
  Security security;
};

// Per-call overrides.
struct CallOptions {
  // false: retry only when the request surely was not sent (txn, grant).
  bool idempotent = true;
  // Gets the gRPC status code of a refusal (5 = not found), 0 otherwise.
  int* grpc_code = nullptr;
  // 0: Options::timeout.
  std::chrono::milliseconds timeout{0};
  // -1: Options::retries.
  int retries = -1;
  // Sent without a token (authentication itself).
  bool no_auth = false;
};

class Client {
 public:
  Client(std::vector<Endpoint> endpoints, Options options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Options& options() const { return options_; }
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  // "a:1,b:2" — for error messages.
  std::string endpointsText() const;

  using CallOptions = etcd::CallOptions;

  // POSTs `body` to /v3/<path> ("kv/range"). On success `reply` holds the
  // parsed JSON. Errors: kUnavailable (no endpoint reachable, no leader),
  // kTimeout (deadline passed), kMetadataError (etcd refused the request or
  // answered something that is not JSON).
  Status call(std::string_view path, const nlohmann::json& body, nlohmann::json& reply);
  Status call(std::string_view path, const nlohmann::json& body, nlohmann::json& reply, const CallOptions& co);

  // Asks every endpoint in turn for its status until one answers; kUnavailable
  // naming every endpoint and why when none does. With a user, also
  // authenticates: a wrong password fails here (kPermissionDenied).
  Status probe();

  // Times this client got a token from etcd (the first, then each renewal).
  uint64_t authentications() const { return authentications_.load(); }

  // Single key. `out` empty when the key does not exist. `revision` gets the
  // store revision of the answer.
  Status get(const std::string& key, std::optional<KeyValue>& out, int64_t* revision = nullptr);
  // Every key starting with `prefix`, sorted by key.
  Status getPrefix(const std::string& prefix, std::vector<KeyValue>& out, int64_t* revision = nullptr,
                   bool keys_only = false, const CallOptions& co = CallOptions());
  Status put(const std::string& key, const std::string& value, int64_t lease = 0, const CallOptions& co = CallOptions());
  // Puts iff the key's mod_revision equals `expect_mod_revision` (0: iff the
  // key does not exist). On a lost race `succeeded` is false and `current`
  // holds the key as it is now (empty if absent).
  Status putIf(const std::string& key, const std::string& value, int64_t expect_mod_revision,
               int64_t lease, bool& succeeded, std::optional<KeyValue>& current);
  // Deletes iff mod_revision matches (0 = any). `deleted` = keys removed.
  Status removeIf(const std::string& key, int64_t expect_mod_revision, int64_t& deleted);

  Status leaseGrant(int64_t ttl_s, int64_t& id, int64_t& granted_ttl_s, const CallOptions& co = CallOptions());
  // `ttl_s` <= 0 means the lease is gone (expired, revoked, or unknown to a
  // freshly started etcd).
  Status leaseKeepAlive(int64_t id, int64_t& ttl_s, const CallOptions& co = CallOptions());
  // An unknown lease counts as revoked (Ok).
  Status leaseRevoke(int64_t id, const CallOptions& co = CallOptions());

  // Runs one watch stream on keys starting with `prefix`, from
  // `start_revision`, calling `on_events` for each batch of events and
  // `on_created` once the stream is established. Returns when `stop` becomes
  // true (Ok), when the stream breaks (kUnavailable), or when etcd cancels the
  // watch (kMetadataError; `compacted` set if history was compacted past
  // start_revision).
  Status watch(const std::string& prefix, int64_t start_revision, const std::atomic<bool>& stop,
               const std::function<void()>& on_created,
               const std::function<void(int64_t revision, const std::vector<WatchEvent>&)>& on_events,
               bool& compacted);

 private:
  // One POST to one endpoint. transient=true when another endpoint or a retry may help;
  // token_invalid=true when etcd refused `token` as invalid (authenticate again, resend).
  Status postOnce(const Endpoint& ep, const std::string& url_path, const std::string& body,
                  const std::string& token, std::chrono::milliseconds timeout, nlohmann::json& reply,
                  bool& transient, bool& maybe_sent, bool& token_invalid, int* grpc_code);

  // etcd_auth.cpp. The token to send ("" without a user, or while etcd has
  // authentication disabled).
  std::string token() const;
  // Gets a token unless one other than `stale` is already there.
  Status refreshToken(const std::string& stale);
  // "https://host:port/v3/..." or "http://...".
  std::string urlOf(const Endpoint& ep, const std::string& url_path) const;
  // The Authorization header line carrying `token` ("" when `token` is empty).
  static std::string authHeader(const std::string& token);

  std::vector<Endpoint> endpoints_;
  Options options_;
  std::atomic<size_t> preferred_{0};
  http::Client http_;  // the HTTP mechanism (pooled curl handles)

  mutable std::mutex token_mu_;
  std::string token_;                 // under token_mu_
  std::mutex auth_call_mu_;           // one authentication at a time
  std::atomic<uint64_t> authentications_{0};
  std::atomic<bool> auth_disabled_{false};  // etcd said authentication is not enabled
};

}  // namespace hawser::etcd
