// etcd_client.h, watches: one streaming POST to /v3/watch driven by a curl
// multi handle so that `stop` is noticed within 100 ms; the body is parsed
// by WatchStream. Its own curl handle (http::Client answers whole replies,
// not streams), set up like every call: applyTls() and the Authorization
// header of etcd_auth.cpp.
#include "metadata/etcd_client.h"

#include <curl/curl.h>

#include "metadata/etcd_watch_stream.h"

namespace hawser::etcd {

namespace {

size_t watchWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* ws = static_cast<WatchStream*>(user);
  size_t n = size * nmemb;
  return ws->feed(std::string_view(data, n)) ? n : 0;
}

}  // namespace

Status Client::watch(const std::string& prefix, int64_t start_revision, const std::atomic<bool>& stop,
                     const std::function<void()>& on_created,
                     const std::function<void(int64_t, const std::vector<WatchEvent>&)>& on_events,
                     bool& compacted) {
  compacted = false;
  nlohmann::json create = {{"key", base64Encode(prefix)}, {"range_end", base64Encode(prefixRangeEnd(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = nlohmann::json{{"create_request", create}}.dump();
  std::string failures;
  const size_t n = endpoints_.size();
  size_t start = preferred_.load();
  const Security& sec = options_.security;
  std::string tok;
  if (sec.auth()) {
    tok = token();
    if (tok.empty() && !auth_disabled_.load()) {
      Status a = refreshToken(tok);
      if (!a.ok()) return a;
      tok = token();
    }
  }
  bool renewed = false;
  for (size_t i = 0; i < n && !stop.load(); ++i) {
    const Endpoint& ep = endpoints_[(start + i) % n];
    const std::string url = urlOf(ep, "/v3/watch");
    WatchStream ws;
    ws.on_created = &on_created;
    ws.on_events = &on_events;
    char error[CURL_ERROR_SIZE] = {};
    CURL* c = curl_easy_init();
    CURLM* m = curl_multi_init();
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    if (headers && !tok.empty()) {
      curl_slist* more = curl_slist_append(headers, authHeader(tok).c_str());
      if (more == nullptr) curl_slist_free_all(headers);
      headers = more;
    }
    if (!c || !m || !headers) {
      curl_slist_free_all(headers);
      if (c) curl_easy_cleanup(c);
      if (m) curl_multi_cleanup(m);
      return Status(Code::kInternal, "curl init failed for the etcd watch");
    }
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, watchWrite);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ws);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    applyTls(c, sec);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
    // A dead peer behind a live TCP connection is noticed through keepalive probes.
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
    curl_multi_add_handle(m, c);
    int running = 1;
    CURLcode result = CURLE_OK;
    while (!stop.load()) {
      CURLMcode mc = curl_multi_perform(m, &running);
      if (mc != CURLM_OK) {
        result = CURLE_RECV_ERROR;
        break;
      }
      if (running == 0) {
        CURLMsg* msg;
        int left = 0;
        while ((msg = curl_multi_info_read(m, &left)) != nullptr) {
          if (msg->msg == CURLMSG_DONE) result = msg->data.result;
        }
        break;
      }
      curl_multi_poll(m, nullptr, 0, 100, nullptr);
    }
    long http = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    curl_multi_remove_handle(m, c);
    curl_easy_cleanup(c);
    curl_multi_cleanup(m);
    curl_slist_free_all(headers);
    if (stop.load()) return Status::OK();
    if (ws.canceled && !ws.compacted && sec.auth() && !tok.empty() &&
        (tokenInvalid(16, ws.reason) || ws.reason.find("permission denied") != std::string::npos)) {
      // etcd checks a watch's permission with the token: an expired token
      // reads as "permission denied". Renew it once and try again; a second
      // refusal is a real lack of permission.
      if (!renewed) {
        renewed = true;
        Status a = refreshToken(tok);
        if (!a.ok()) return a;
        tok = token();
        --i;
        continue;
      }
      Status auth = authFailure(7, ep.text() + ": etcd canceled the watch on " + prefix + ": " + ws.reason, sec);
      if (!auth.ok()) return auth;
    }
    if (ws.canceled) {
      compacted = ws.compacted;
      return Status(Code::kMetadataError, ep.text() + ": etcd canceled the watch: " + ws.reason);
    }
    if (ws.bad) return Status(Code::kMetadataError, ep.text() + ": " + ws.reason);
    if (result != CURLE_OK) {
      Status tls = tlsFailure(result, error, sec, ep.text());
      if (tls.ok() && !ws.created && unexplainedTlsFailure(result, sec))
        tls = diagnoseTls(http_, sec, ep.text(), options_.connect_timeout * 2);
      if (!tls.ok()) return tls;
    }
    std::string why = result != CURLE_OK ? (error[0] ? std::string(error) : curl_easy_strerror(result))
                                         : "stream ended (HTTP " + std::to_string(http) + ")";
    if (ws.created) {
      // The stream worked and broke: let the caller resync before retrying.
      return Status(Code::kUnavailable, ep.text() + ": watch stream broke: " + why);
    }
    if (!failures.empty()) failures += "; ";
    failures += ep.text() + ": " + why;
  }
  if (stop.load()) return Status::OK();
  return Status(Code::kUnavailable, "etcd at " + endpointsText() + " unreachable for /v3/watch: " + failures);
}

}  // namespace hawser::etcd
