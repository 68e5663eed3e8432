#include "metadata/etcd_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <thread>

#include "base/log.h"

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

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool validHostChar(unsigned char c) { return std::isalnum(c) || c == '.' || c == '-' || c == '_'; }

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64Value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string kvJson(const std::string& s) { return base64Encode(s); }

}  // namespace

std::string Endpoint::text() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Status parseUri(const std::string& uri, std::vector<Endpoint>& out) {
  out.clear();
  auto bad = [&](const std::string& why) {
    return Status(Code::kInvalidArgument,
                  "metadata URI '" + uri + "': " + why + " (expected etcd://host:port[,host:port...])");
  };
  constexpr std::string_view kScheme = "etcd://";
  if (uri.compare(0, kScheme.size(), kScheme) != 0) return bad("scheme is not etcd://");
  std::string_view rest(uri);
  rest.remove_prefix(kScheme.size());
  if (rest.empty()) return bad("no endpoint");
  std::set<std::string> seen;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    std::string p(part);
    if (part.empty()) return bad("empty endpoint in the list");
    Endpoint ep;
    std::string_view port_text;
    if (part.front() == '[') {
      size_t close = part.find(']');
      if (close == std::string_view::npos || close + 1 >= part.size() || part[close + 1] != ':')
        return bad("endpoint '" + p + "' is not [ipv6]:port");
      ep.host = std::string(part.substr(1, close - 1));
      port_text = part.substr(close + 2);
      if (ep.host.empty() ||
          !std::all_of(ep.host.begin(), ep.host.end(),
                       [](unsigned char c) { return std::isxdigit(c) || c == ':' || c == '.'; }))
        return bad("endpoint '" + p + "' has a malformed IPv6 address");
    } else {
      size_t colon = part.rfind(':');
      if (colon == std::string_view::npos) return bad("endpoint '" + p + "' has no port");
      ep.host = std::string(part.substr(0, colon));
      port_text = part.substr(colon + 1);
      if (ep.host.empty()) return bad("endpoint '" + p + "' has an empty host");
      if (!std::all_of(ep.host.begin(), ep.host.end(), validHostChar))
        return bad("endpoint '" + p + "' has a malformed host");
    }
    if (!isDigits(port_text) || port_text.size() > 5) return bad("endpoint '" + p + "' has a malformed port");
    int port = std::stoi(std::string(port_text));
    if (port < 1 || port > 65535) return bad("endpoint '" + p + "' has port out of range 1..65535");
    ep.port = static_cast<uint16_t>(port);
    if (!seen.insert(ep.text()).second) return bad("endpoint '" + p + "' is listed twice");
    out.push_back(std::move(ep));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return Status::OK();
}

std::string base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  size_t rem = in.size() - i;
  if (rem == 1) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (rem == 2) {
    uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool base64Decode(std::string_view in, std::string& out) {
  out.clear();
  size_t pad = 0;
  while (!in.empty() && in.back() == '=') {
    in.remove_suffix(1);
    if (++pad > 2) return false;
  }
  if ((in.size() + pad) % 4 != 0 && pad != 0) return false;
  if (in.size() % 4 == 1) return false;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    int v = b64Value(c);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return true;
}

std::string prefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xFF) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

int64_t jsonInt(const nlohmann::json& j, const char* field, int64_t def) {
  if (!j.is_object()) return def;
  auto it = j.find(field);
  if (it == j.end()) return def;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    try {
      size_t used = 0;
      long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (...) {
    }
  }
  return def;
}

bool parseKv(const nlohmann::json& j, KeyValue& out) {
  if (!j.is_object()) return false;
  auto k = j.find("key");
  if (k == j.end() || !k->is_string() || !base64Decode(k->get<std::string>(), out.key)) return false;
  out.value.clear();
  auto v = j.find("value");
  if (v != j.end()) {
    if (!v->is_string() || !base64Decode(v->get<std::string>(), out.value)) return false;
  }
  out.create_revision = jsonInt(j, "create_revision");
  out.mod_revision = jsonInt(j, "mod_revision");
  out.version = jsonInt(j, "version");
  out.lease = jsonInt(j, "lease");
  return true;
}

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
  nlohmann::json j = nlohmann::json::parse(h->reply, nullptr, /*allow_exceptions=*/false);
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

Status Client::get(const std::string& key, std::optional<KeyValue>& out, int64_t* revision) {
  out.reset();
  nlohmann::json reply;
  Status st = call("kv/range", {{"key", kvJson(key)}}, reply);
  if (!st.ok()) return st;
  if (revision) *revision = jsonInt(reply.value("header", nlohmann::json::object()), "revision");
  auto kvs = reply.find("kvs");
  if (kvs == reply.end() || !kvs->is_array() || kvs->empty()) return Status::OK();
  KeyValue kv;
  if (!parseKv((*kvs)[0], kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv for key '" + key + "'");
  out = std::move(kv);
  return Status::OK();
}

Status Client::getPrefix(const std::string& prefix, std::vector<KeyValue>& out, int64_t* revision, bool keys_only,
                         const CallOptions& co) {
  out.clear();
  nlohmann::json body = {{"key", kvJson(prefix)}, {"range_end", kvJson(prefixRangeEnd(prefix))}};
  if (keys_only) body["keys_only"] = true;
  nlohmann::json reply;
  Status st = call("kv/range", body, reply, co);
  if (!st.ok()) return st;
  if (revision) *revision = jsonInt(reply.value("header", nlohmann::json::object()), "revision");
  auto kvs = reply.find("kvs");
  if (kvs == reply.end() || !kvs->is_array()) return Status::OK();
  for (const auto& j : *kvs) {
    KeyValue kv;
    if (!parseKv(j, kv)) return Status(Code::kMetadataError, "etcd returned a malformed kv under '" + prefix + "'");
    out.push_back(std::move(kv));
  }
  return Status::OK();
}

Status Client::put(const std::string& key, const std::string& value, int64_t lease, const CallOptions& co) {
  nlohmann::json body = {{"key", kvJson(key)}, {"value", kvJson(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  nlohmann::json reply;
  return call("kv/put", body, reply, co);
}

Status Client::putIf(const std::string& key, const std::string& value, int64_t expect_mod_revision, int64_t lease,
                     bool& succeeded, std::optional<KeyValue>& current) {
  succeeded = false;
  current.reset();
  nlohmann::json cmp = {{"key", kvJson(key)}, {"result", "EQUAL"}};
  if (expect_mod_revision == 0) {
    cmp["target"] = "CREATE";
    cmp["create_revision"] = "0";
  } else {
    cmp["target"] = "MOD";
    cmp["mod_revision"] = std::to_string(expect_mod_revision);
  }
  nlohmann::json put = {{"key", kvJson(key)}, {"value", kvJson(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  nlohmann::json body = {{"compare", nlohmann::json::array({cmp})},
                         {"success", nlohmann::json::array({{{"request_put", put}}})},
                         {"failure", nlohmann::json::array({{{"request_range", {{"key", kvJson(key)}}}}})}};
  nlohmann::json reply;
  CallOptions co;
  co.idempotent = false;
  Status st = call("kv/txn", body, reply, co);
  if (!st.ok()) return st;
  succeeded = reply.value("succeeded", false);
  if (succeeded) return Status::OK();
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.empty() && responses[0].contains("response_range")) {
    const auto& rr = responses[0]["response_range"];
    auto kvs = rr.find("kvs");
    if (kvs != rr.end() && kvs->is_array() && !kvs->empty()) {
      KeyValue kv;
      if (!parseKv((*kvs)[0], kv))
        return Status(Code::kMetadataError, "etcd returned a malformed kv for key '" + key + "'");
      current = std::move(kv);
    }
  }
  return Status::OK();
}

Status Client::removeIf(const std::string& key, int64_t expect_mod_revision, int64_t& deleted) {
  deleted = 0;
  nlohmann::json reply;
  if (expect_mod_revision == 0) {
    Status st = call("kv/deleterange", {{"key", kvJson(key)}}, reply);
    if (!st.ok()) return st;
    deleted = jsonInt(reply, "deleted");
    return Status::OK();
  }
  nlohmann::json cmp = {{"key", kvJson(key)},
                        {"result", "EQUAL"},
                        {"target", "MOD"},
                        {"mod_revision", std::to_string(expect_mod_revision)}};
  nlohmann::json body = {
      {"compare", nlohmann::json::array({cmp})},
      {"success", nlohmann::json::array({{{"request_delete_range", {{"key", kvJson(key)}}}}})}};
  CallOptions co;
  co.idempotent = false;
  Status st = call("kv/txn", body, reply, co);
  if (!st.ok()) return st;
  if (!reply.value("succeeded", false)) return Status::OK();
  const auto& responses = reply.value("responses", nlohmann::json::array());
  if (!responses.empty() && responses[0].contains("response_delete_range"))
    deleted = jsonInt(responses[0]["response_delete_range"], "deleted");
  return Status::OK();
}

Status Client::leaseGrant(int64_t ttl_s, int64_t& id, int64_t& granted_ttl_s, const CallOptions& co_in) {
  nlohmann::json reply;
  CallOptions co = co_in;
  co.idempotent = false;
  Status st = call("lease/grant", {{"TTL", std::to_string(ttl_s)}}, reply, co);
  if (!st.ok()) return st;
  id = jsonInt(reply, "ID");
  granted_ttl_s = jsonInt(reply, "TTL");
  if (id == 0 || granted_ttl_s <= 0) {
    std::string err = reply.value("error", std::string());
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
  const auto& result = reply.value("result", nlohmann::json::object());
  ttl_s = jsonInt(result, "TTL");
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

namespace {

struct WatchState {
  std::string buffer;
  bool created = false;
  bool canceled = false;
  bool compacted = false;
  bool bad = false;
  std::string reason;
  const std::function<void()>* on_created = nullptr;
  const std::function<void(int64_t, const std::vector<WatchEvent>&)>* on_events = nullptr;
};

void handleWatchLine(WatchState& ws, std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ws.bad = true;
    ws.reason = "malformed watch message";
    return;
  }
  if (j.contains("error")) {
    ws.canceled = true;
    const auto& e = j["error"];
    ws.reason = e.is_object() ? e.value("message", std::string("watch error")) : std::string("watch error");
    return;
  }
  const auto& r = j.value("result", nlohmann::json::object());
  if (jsonInt(r, "compact_revision") > 0) {
    ws.canceled = true;
    ws.compacted = true;
    ws.reason = "history compacted past the start revision";
    return;
  }
  if (r.value("canceled", false)) {
    ws.canceled = true;
    ws.reason = r.value("cancel_reason", std::string("watch canceled by etcd"));
    return;
  }
  if (r.value("created", false) && !ws.created) {
    ws.created = true;
    if (ws.on_created && *ws.on_created) (*ws.on_created)();
  }
  auto evs = r.find("events");
  if (evs == r.end() || !evs->is_array() || evs->empty()) return;
  std::vector<WatchEvent> events;
  for (const auto& e : *evs) {
    WatchEvent ev;
    ev.is_delete = e.value("type", std::string()) == "DELETE";
    if (!parseKv(e.value("kv", nlohmann::json::object()), ev.kv)) {
      ws.bad = true;
      ws.reason = "malformed kv in a watch event";
      return;
    }
    events.push_back(std::move(ev));
  }
  int64_t rev = jsonInt(r.value("header", nlohmann::json::object()), "revision");
  if (ws.on_events && *ws.on_events) (*ws.on_events)(rev, events);
}

size_t watchWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* ws = static_cast<WatchState*>(user);
  size_t n = size * nmemb;
  ws->buffer.append(data, n);
  size_t pos;
  while ((pos = ws->buffer.find('\n')) != std::string::npos) {
    std::string line = ws->buffer.substr(0, pos);
    ws->buffer.erase(0, pos + 1);
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    handleWatchLine(*ws, line);
    if (ws->bad || ws->canceled) return 0;  // stop the stream
  }
  // A complete object without a trailing newline (defensive).
  if (!ws->buffer.empty() && ws->buffer.size() > (64u << 20)) return 0;
  return n;
}

}  // namespace

Status Client::watch(const std::string& prefix, int64_t start_revision, const std::atomic<bool>& stop,
                     const std::function<void()>& on_created,
                     const std::function<void(int64_t, const std::vector<WatchEvent>&)>& on_events,
                     bool& compacted) {
  compacted = false;
  nlohmann::json create = {{"key", kvJson(prefix)}, {"range_end", kvJson(prefixRangeEnd(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = nlohmann::json{{"create_request", create}}.dump();
  std::string failures;
  const size_t n = endpoints_.size();
  size_t start = preferred_.load();
  for (size_t i = 0; i < n && !stop.load(); ++i) {
    const Endpoint& ep = endpoints_[(start + i) % n];
    const std::string url = "http://" + ep.text() + "/v3/watch";
    WatchState ws;
    ws.on_created = &on_created;
    ws.on_events = &on_events;
    CURL* c = curl_easy_init();
    CURLM* m = curl_multi_init();
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
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
    if (ws.canceled) {
      compacted = ws.compacted;
      return Status(Code::kMetadataError, ep.text() + ": etcd canceled the watch: " + ws.reason);
    }
    if (ws.bad) return Status(Code::kMetadataError, ep.text() + ": " + ws.reason);
    std::string why = result != CURLE_OK ? curl_easy_strerror(result)
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
