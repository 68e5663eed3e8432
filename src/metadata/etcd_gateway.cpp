// etcd_client.h, the transport: pooled curl handles, one POST per attempt,
// failover across endpoints, bounded retries with backoff, error mapping.
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

void globalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t appendBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* s = static_cast<std::string*>(user);
  size_t n = size * nmemb;
  if (s->size() + n > kMaxReplyBytes) return 0;  // aborts the transfer
  s->append(data, n);
  return n;
}

}  // namespace

struct Client::Handle {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string reply;
};

Client::Client(std::vector<Endpoint> endpoints, Options options)
    : endpoints_(std::move(endpoints)), options_(options) {
  globalInit();
}

Client::~Client() {
  for (Handle* h : pool_) {
    curl_slist_free_all(h->headers);
    curl_easy_cleanup(h->easy);
    delete h;
  }
}

std::string Client::endpointsText() const {
  std::string s;
  for (const auto& ep : endpoints_) {
    if (!s.empty()) s += ',';
    s += ep.text();
  }
  return s;
}

Client::Handle* Client::acquire() {
  {
    std::lock_guard<std::mutex> lk(pool_mu_);
    if (!pool_.empty()) {
      Handle* h = pool_.back();
      pool_.pop_back();
      return h;
    }
  }
  auto* h = new Handle;
  h->easy = curl_easy_init();
  h->headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (h->easy == nullptr || h->headers == nullptr) {
    curl_slist_free_all(h->headers);
    if (h->easy) curl_easy_cleanup(h->easy);
    delete h;
    return nullptr;
  }
  return h;
}

void Client::release(Handle* h) {
  std::lock_guard<std::mutex> lk(pool_mu_);
  pool_.push_back(h);
}

Status Client::postOnce(Handle* h, const Endpoint& ep, const std::string& url_path, const std::string& body,
                        milliseconds timeout, nlohmann::json& reply, bool& transient, bool& maybe_sent,
                        int* grpc_code) {
  transient = true;
  maybe_sent = true;
  const std::string url = "http://" + ep.text() + url_path;
  CURL* c = h->easy;
  h->reply.clear();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, appendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &h->reply);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  long total_ms = std::max<long>(1, static_cast<long>(timeout.count()));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, total_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   std::min<long>(total_ms, static_cast<long>(options_.connect_timeout.count())));
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) maybe_sent = false;
    Code code = rc == CURLE_OPERATION_TIMEDOUT ? Code::kTimeout : Code::kUnavailable;
    return Status(code, ep.text() + ": " + curl_easy_strerror(rc));
  }
  long http = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  int gc = 0;
  Status st = decodeReply(http, h->reply, ep.text(), url_path, reply, transient, gc);
  if (grpc_code) *grpc_code = gc;
  return st;
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
  Handle* h = acquire();
  if (h == nullptr) return Status(Code::kInternal, "curl_easy_init failed");
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
      Status st = postOnce(h, endpoints_[idx], url_path, text, remaining, reply, transient, maybe_sent, grpc_code);
      if (st.ok()) {
        preferred_.store(idx);
        release(h);
        return st;
      }
      if (!transient) {
        release(h);
        return st;
      }
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
  release(h);
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
