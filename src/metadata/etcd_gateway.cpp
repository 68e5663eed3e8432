// etcd_client.h, the transport: one POST per attempt (http::Client,
// http_client.h), failover across endpoints, bounded retries with backoff, error mapping.
#include "metadata/etcd_client.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "base/log.h"

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
                        milliseconds timeout, nlohmann::json& reply, bool& transient, bool& maybe_sent,
                        int* grpc_code) {
  transient = true;
  maybe_sent = true;
  http::Request req;
  req.method = "POST";
  req.url = "http://" + ep.text() + url_path;
  req.body = &body;
  req.content_type = "application/json";
  req.timeout = timeout;
  req.connect_timeout = options_.connect_timeout;
  http::Response res;
  Status sent = http_.send(req, res, &maybe_sent);
  if (!sent.ok()) {
    // http::Client names the method and URL; etcd's messages name the endpoint.
    const std::string& m = sent.message();
    const size_t colon = m.find(": ");
    return Status(sent.code(), ep.text() + ": " + (colon == std::string::npos ? m : m.substr(colon + 2)));
  }
  const long http = res.status;
  nlohmann::json j = nlohmann::json::parse(res.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    // Not the etcd gateway (or a truncated answer): another endpoint may do.
    return Status(Code::kMetadataError, ep.text() + ": HTTP " + std::to_string(http) + " on " + url_path +
                                            " with a non-JSON body (is this an etcd v3 endpoint?)");
  }
  // Streaming methods wrap errors as {"error":{...}} with HTTP 200.
  const nlohmann::json* err = nullptr;
  if (http != 200) {
    err = &j;
  } else if (j.contains("error") && j["error"].is_object()) {
    err = &j["error"];
  }
  if (err != nullptr) {
    int gc = static_cast<int>(jsonInt(*err, "code", 2));
    if (grpc_code) *grpc_code = gc;
    std::string msg = err->value("message", std::string());
    if (msg.empty() && err->contains("error") && (*err)["error"].is_string()) msg = (*err)["error"].get<std::string>();
    std::string text = ep.text() + ": etcd refused " + url_path + ": " + msg + " (grpc code " +
                       std::to_string(gc) + ", HTTP " + std::to_string(http) + ")";
    if (gc == 14) return Status(Code::kUnavailable, text);  // no leader, stopping
    if (gc == 4) return Status(Code::kTimeout, text);       // etcd's own deadline
    transient = false;
    return Status(Code::kMetadataError, text);
  }
  transient = false;
  reply = std::move(j);
  return Status::OK();
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
      bool transient = false, maybe_sent = false;
      Status st = postOnce(endpoints_[idx], url_path, text, remaining, reply, transient, maybe_sent, grpc_code);
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
  if (!reply.contains("version")) {
    return Status(Code::kMetadataError, "etcd at " + endpointsText() + " answered maintenance/status without a version");
  }
  return Status::OK();
}

}  // namespace hawser::etcd
