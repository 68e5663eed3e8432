// etcd_client.h, the transport: one POST per attempt (http::Client,
// http_client.h), failover across endpoints, bounded retries with backoff, error mapping.
#include "metadata/etcd_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "metadata/etcd_replies.h"

namespace hawser::etcd {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Replies larger than this are refused (a descriptor is at most etcd's
// 1.5 MiB request limit; a listing of many of them stays far below).
constexpr size_t kMaxReplyBytes = 256u << 20;

}  // namespace

Client::Client(std::vector<Endpoint> endpoints, Options options)
    : endpoints_(std::move(endpoints)), options_(options), http_(kMaxReplyBytes) {}

Client::~Client() = default;

std::string Client::endpointsText() const {
  std::string s;
  for (const auto& ep : endpoints_) {
    if (!s.empty()) s += ',';
    s += ep.text();
  }
  return s;
}

Status Client::postOnce(const Endpoint& ep, const std::string& url_path, const std::string& body,
                        const std::string& token, milliseconds timeout, nlohmann::json& reply, bool& transient,
                        bool& maybe_sent, bool& token_invalid, int* grpc_code) {
  transient = true;
  maybe_sent = true;
  token_invalid = false;
  const Security& sec = options_.security;
  http::Request req;
  req.method = "POST";
  req.url = urlOf(ep, url_path);
  req.body = &body;
  req.content_type = "application/json";
  if (!token.empty()) req.headers.push_back(authHeader(token));
  req.timeout = timeout;
  req.connect_timeout = options_.connect_timeout;
  req.tune = [&sec](void* curl) { applyTls(curl, sec); };
  http::Response res;
  Status sent = http_.send(req, res, &maybe_sent);
  if (!sent.ok()) {
    // A TLS setting at fault: no retry helps.
    Status tls = tlsFailure(res.curl_code, res.curl_error, sec, ep.text());
    if (tls.ok() && unexplainedTlsFailure(res.curl_code, sec))
      tls = diagnoseTls(http_, sec, ep.text(), std::min(timeout, options_.connect_timeout * 2));
    if (!tls.ok()) {
      transient = false;
      maybe_sent = false;
      return tls;
    }
    // http::Client names the method and URL; etcd's messages name the endpoint.
    const std::string& m = sent.message();
    const size_t colon = m.find(": ");
    std::string why = colon == std::string::npos ? m : m.substr(colon + 2);
    if (res.curl_code == CURLE_GOT_NOTHING && !sec.tls)
      why += " (if etcd serves TLS on this endpoint, use an etcds:// URI)";
    return Status(sent.code(), ep.text() + ": " + why);
  }
  const long http = res.status;
  int gc = 0;
  Status st = decodeReply(http, res.body, ep.text(), url_path, reply, transient, gc);
  if (grpc_code) *grpc_code = gc;
  if (st.ok()) return st;
  if (gc == 0 && transient) {
    // Not JSON. Two answers of etcd's that say which setting is wrong.
    if (res.body.find("CommonName of client") != std::string::npos) {
      // etcd >= 3.4.10 with authentication enabled refuses, on its JSON
      // gateway, client certificates that carry a CommonName.
      transient = false;
      return Status(Code::kPermissionDenied,
                    ep.text() + ": etcd refuses the client certificate etcd.cert_file '" + sec.cert_file +
                        "' on its HTTP gateway because it has a CommonName (CN) while etcd authentication is "
                        "enabled: use a client certificate whose subject has no CN (e.g. /O=hawser)");
    }
    if (!sec.tls && res.body.find("HTTPS server") != std::string::npos) {
      transient = false;
      return Status(Code::kPermissionDenied, ep.text() + ": etcd serves TLS on this endpoint: use an etcds:// URI "
                                                         "(with etcd.ca_file, and etcd.cert_file/etcd.key_file if "
                                                         "etcd checks client certificates)");
    }
    return st;
  }
  if (transient) return st;  // no leader, etcd's own deadline
  if (!token.empty() && tokenInvalid(gc, st.message())) {
    token_invalid = true;
    return Status(Code::kPermissionDenied, st.message());
  }
  Status auth = authFailure(gc, st.message(), sec);
  return auth.ok() ? st : auth;
}

Status Client::call(std::string_view path, const nlohmann::json& body, nlohmann::json& reply) {
  return call(path, body, reply, CallOptions{});
}

Status Client::call(std::string_view path, const nlohmann::json& body, nlohmann::json& reply,
                    const CallOptions& co) {
  int* grpc_code = co.grpc_code;
  const bool idempotent = co.idempotent;
  const milliseconds timeout = co.timeout.count() > 0 ? co.timeout : options_.timeout;
  const int retries = co.retries >= 0 ? co.retries : options_.retries;
  if (grpc_code) *grpc_code = 0;
  if (endpoints_.empty()) return Status(Code::kInvalidArgument, "etcd client has no endpoint");
  std::string tok;
  if (options_.security.auth() && !co.no_auth) {
    tok = token();
    if (tok.empty() && !auth_disabled_.load()) {
      Status a = refreshToken(tok);
      if (!a.ok()) return a;
      tok = token();
    }
  }
  bool renewed = false;  // the token was renewed once for this call
  const std::string url_path = "/v3/" + std::string(path);
  const std::string text = body.dump();
  const auto deadline = Clock::now() + timeout;
  std::vector<std::pair<std::string, std::string>> failures;  // endpoint -> last error, in order
  int attempts = 0;
  Code last = Code::kUnavailable;
  bool all_timeouts = true;
  const size_t n = endpoints_.size();
  Status result;
  bool done = false;
  for (int round = 0; round <= retries && !done; ++round) {
    size_t start = preferred_.load();
    for (size_t i = 0; i < n; ++i) {
      auto remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (remaining.count() <= 0) {
        all_timeouts = true;
        done = true;
        break;
      }
      size_t idx = (start + i) % n;
      bool transient = false, maybe_sent = false, token_invalid = false;
      Status st = postOnce(endpoints_[idx], url_path, text, tok, remaining, reply, transient, maybe_sent,
                           token_invalid, grpc_code);
      if (token_invalid && !renewed) {
        // etcd refused the request (it did nothing): a fresh token, the same endpoint again.
        renewed = true;
        HLOG_INFO("etcd {}: the auth token of user '{}' is no longer valid; authenticating again", url_path,
                  options_.security.user);
        Status a = refreshToken(tok);
        if (!a.ok()) return a;
        tok = token();
        if (grpc_code) *grpc_code = 0;
        --i;
        continue;
      }
      if (st.ok()) {
        preferred_.store(idx);
        return st;
      }
      if (!transient) return st;
      HLOG_DEBUG("etcd {} failed: {}", url_path, st.message());
      ++attempts;
      const std::string ep = endpoints_[idx].text();
      auto f = std::find_if(failures.begin(), failures.end(), [&](const auto& p) { return p.first == ep; });
      if (f == failures.end()) failures.emplace_back(ep, st.message());
      else f->second = st.message();
      last = st.code();
      if (st.code() != Code::kTimeout) all_timeouts = false;
      if (!idempotent && maybe_sent) {
        done = true;
        break;
      }
    }
    if (done || round == retries) break;
    auto pause = options_.backoff * (1 << std::min(round, 10));
    auto remaining = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (remaining <= pause) {
      // No time for another round: report what we saw rather than sleeping.
      break;
    }
    std::this_thread::sleep_for(pause);
  }
  Code code = all_timeouts && last == Code::kTimeout ? Code::kTimeout : last;
  std::string what = code == Code::kTimeout ? "did not answer within " + std::to_string(timeout.count()) +
                                                  " ms (etcd.timeout_ms)"
                                            : "unreachable";
  std::string detail;
  for (const auto& [ep, msg] : failures) detail += (detail.empty() ? "" : "; ") + msg;
  if (detail.empty()) detail = "deadline passed before any attempt";
  return Status(code, "etcd at " + endpointsText() + " " + what + " for " + url_path + " (" +
                          std::to_string(attempts) + " attempts): " + detail);
}

Status Client::probe() {
  nlohmann::json reply;
  Status st = call("maintenance/status", nlohmann::json::object(), reply);
  if (!st.ok()) return st;
  if (options_.security.auth() && !auth_disabled_.load() && token().empty()) {
    st = refreshToken("");  // maintenance/status needs no token: check the credentials now
    if (!st.ok()) return st;
  }
  if (options_.security.auth() && !auth_disabled_.load() && token().empty()) {
    st = refreshToken("");  // maintenance/status needs no token: check the credentials now
    if (!st.ok()) return st;
  }
  if (!reply.contains("version")) {
    return Status(Code::kMetadataError, "etcd at " + endpointsText() + " answered maintenance/status without a version");
  }
  return Status::OK();
}

}  // namespace hawser::etcd
