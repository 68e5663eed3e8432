#include "metadata/http_client.h"

#include <curl/curl.h>

#include <algorithm>

namespace hawser::http {

namespace {

void globalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Sink {
  std::string* out;
  size_t limit;
};

size_t appendBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* s = static_cast<Sink*>(user);
  size_t n = size * nmemb;
  if (s->out->size() + n > s->limit) return 0;  // aborts the transfer
  s->out->append(data, n);
  return n;
}

}  // namespace

struct Client::Handle {
  CURL* easy = nullptr;
  char error[CURL_ERROR_SIZE] = {};
};

Client::Client(size_t max_reply) : max_reply_(max_reply) { globalInit(); }

Client::~Client() {
  for (Handle* h : pool_) {
    curl_easy_cleanup(h->easy);
    delete h;
  }
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
  CURL* easy = curl_easy_init();
  if (easy == nullptr) return nullptr;
  auto* h = new Handle;
  h->easy = easy;
  return h;
}

void Client::release(Handle* h) {
  std::lock_guard<std::mutex> lk(pool_mu_);
  pool_.push_back(h);
}

std::string Client::escape(const std::string& s) {
  globalInit();
  char* e = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
  if (e == nullptr) return std::string();
  std::string out(e);
  curl_free(e);
  return out;
}

Status Client::send(const Request& req, Response& out, bool* maybe_sent) {
  if (maybe_sent) *maybe_sent = true;
  out = Response{};
  Handle* h = acquire();
  if (h == nullptr) return Status(Code::kInternal, "curl_easy_init failed");
  CURL* c = h->easy;
  // The handle is reused: start from its defaults, keeping its connections.
  curl_easy_reset(c);
  curl_slist* headers = nullptr;
  if (!req.content_type.empty()) headers = curl_slist_append(headers, ("Content-Type: " + req.content_type).c_str());
  // No "Expect: 100-continue" round trip on PUT/POST bodies.
  headers = curl_slist_append(headers, "Expect:");
  for (const std::string& line : req.headers)
    if (curl_slist* more = curl_slist_append(headers, line.c_str())) headers = more;
  Sink sink{&out.body, max_reply_};
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  if (req.method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    if (req.method == "POST" || req.method == "PUT") {
      static const std::string kEmpty;
      const std::string& body = req.body ? *req.body : kEmpty;
      curl_easy_setopt(c, CURLOPT_POST, 1L);
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    if (req.method != "POST") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, appendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  h->error[0] = '\0';
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  const long total_ms = std::max<long>(1, static_cast<long>(req.timeout.count()));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, total_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   std::max<long>(1, std::min<long>(total_ms, static_cast<long>(req.connect_timeout.count()))));
  if (req.tune) req.tune(c);
  const CURLcode rc = curl_easy_perform(c);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  Status st;
  if (rc != CURLE_OK) {
    if (maybe_sent && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)) *maybe_sent = false;
    const Code code = rc == CURLE_OPERATION_TIMEDOUT ? Code::kTimeout : Code::kUnavailable;
    out.curl_code = static_cast<int>(rc);
    out.curl_error = h->error;
    std::string why = out.curl_error.empty() ? curl_easy_strerror(rc) : out.curl_error;
    if (rc == CURLE_WRITE_ERROR) why = "reply larger than " + std::to_string(max_reply_) + " bytes";
    st = Status(code, req.method + " " + req.url + ": " + why);
  } else {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  }
  release(h);
  return st;
}

}  // namespace hawser::http
