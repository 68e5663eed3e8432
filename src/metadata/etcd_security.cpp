#include "metadata/etcd_security.h"

#include <curl/curl.h>

namespace hawser::etcd {

namespace {

bool has(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

std::string caText(const Security& s) {
  return s.ca_file.empty() ? "the system's CAs (etcd.ca_file is not set)" : "etcd.ca_file '" + s.ca_file + "'";
}

}  // namespace

void applyTls(void* curl, const Security& s) {
  CURL* c = static_cast<CURL*>(curl);
  // HTTP/1.1: over TLS curl would offer HTTP/2, which etcd routes to gRPC
  // rather than to the JSON gateway.
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  if (!s.tls) return;
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  // Unset stays curl's default (the handle is fresh or reset): the system's
  // CA bundle, no client certificate. (A NULL CAINFO would drop the bundle.)
  if (!s.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, s.ca_file.c_str());
  if (!s.cert_file.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, s.cert_file.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, s.key_file.c_str());
    curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
  }
}

Status tlsFailure(int curl_code, const std::string& detail, const Security& s, const std::string& endpoint) {
  const std::string why = detail.empty() ? curl_easy_strerror(static_cast<CURLcode>(curl_code)) : detail;
  auto denied = [&](const std::string& text) {
    return Status(Code::kPermissionDenied, "etcd at " + endpoint + ": " + text + " (" + why + ")");
  };
  if (!s.tls) return Status::OK();
  switch (curl_code) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return denied("etcd's TLS certificate is not trusted by " + caText(s) +
                    ", or does not name this host: set etcd.ca_file to the CA that signed etcd's --cert-file");
    case CURLE_SSL_CACERT_BADFILE:
      return denied("the CA bundle " + caText(s) + " cannot be used: is it a PEM file of certificates?");
    case CURLE_SSL_CERTPROBLEM:
      return denied("the client certificate etcd.cert_file '" + s.cert_file + "' or its key etcd.key_file '" +
                    s.key_file + "' cannot be used: are they PEM files of one key pair?");
    default: break;
  }
  const bool handshake = curl_code == CURLE_SSL_CONNECT_ERROR || curl_code == CURLE_RECV_ERROR ||
                         curl_code == CURLE_SEND_ERROR || curl_code == CURLE_GOT_NOTHING;
  if (!handshake) return Status::OK();
  if (has(why, "wrong version number") || has(why, "packet length too long") || has(why, "http request"))
    return denied("the endpoint does not speak TLS: use an etcd:// URI for a plain-HTTP etcd");
  if (has(why, "certificate required") || has(why, "bad certificate") || has(why, "unknown ca") ||
      has(why, "certificate unknown") || has(why, "handshake failure") || has(why, "unsupported certificate") ||
      has(why, "access denied") || has(why, "certificate expired") || has(why, "certificate revoked")) {
    if (s.cert_file.empty())
      return denied("etcd requires a client certificate (etcd --client-cert-auth): set etcd.cert_file and "
                    "etcd.key_file to a certificate signed by a CA of etcd's --trusted-ca-file");
    return denied("etcd refused the client certificate etcd.cert_file '" + s.cert_file +
                  "': is it signed by a CA of etcd's --trusted-ca-file, valid now, and meant for client auth?");
  }
  return Status::OK();  // a connection that broke: the usual retries
}

bool unexplainedTlsFailure(int curl_code, const Security& s) {
  return s.tls && (curl_code == CURLE_SEND_ERROR || curl_code == CURLE_RECV_ERROR || curl_code == CURLE_GOT_NOTHING ||
                   curl_code == CURLE_SSL_CONNECT_ERROR);
}

Status diagnoseTls(http::Client& http, const Security& s, const std::string& endpoint,
                   std::chrono::milliseconds timeout) {
  if (!s.tls) return Status::OK();
  http::Request req;
  req.url = "https://" + endpoint + "/version";
  req.timeout = timeout;
  req.connect_timeout = timeout;
  req.tune = [&s](void* curl) {
    applyTls(curl, s);
    CURL* c = static_cast<CURL*>(curl);
    const long tls12_only = static_cast<long>(CURL_SSLVERSION_TLSv1_2) | static_cast<long>(CURL_SSLVERSION_MAX_TLSv1_2);
    curl_easy_setopt(c, CURLOPT_SSLVERSION, tls12_only);
    // A handshake of its own: not a pooled connection, and none left behind.
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
  };
  http::Response res;
  if (http.send(req, res).ok()) return Status::OK();
  return tlsFailure(res.curl_code, res.curl_error, s, endpoint);
}

Status authFailure(int grpc_code, const std::string& refusal, const Security& s) {
  auto denied = [&](const std::string& text) { return Status(Code::kPermissionDenied, refusal + ": " + text); };
  if (has(refusal, "user name is empty") || has(refusal, "token is not provided") ||
      (grpc_code == 16 && !s.auth()))
    return denied("etcd has authentication enabled: set etcd.user and etcd.password (or etcd.password_file, or "
                  "the environment variable HAWSER_ETCD_PASSWORD)");
  if (has(refusal, "authentication failed") || has(refusal, "invalid user ID or password"))
    return denied("check etcd.user ('" + s.user + "') and its password (etcd.password, HAWSER_ETCD_PASSWORD or "
                  "etcd.password_file)");
  if (has(refusal, "user name not found"))
    return denied("etcd has no user '" + s.user + "' (etcd.user)");
  if (grpc_code == 7 || has(refusal, "permission denied"))
    return denied("etcd user '" + s.user + "' may not do this: grant its role readwrite on the key prefix "
                  "(metadata.prefix, e.g. `etcdctl role grant-permission ROLE --prefix=true readwrite hawser/`)");
  if (grpc_code == 16)
    return denied("the token of etcd user '" + s.user + "' is no longer valid");
  return Status::OK();
}

bool tokenInvalid(int grpc_code, const std::string& message) {
  return has(message, "invalid auth token") || (grpc_code == 16 && has(message, "token"));
}

}  // namespace hawser::etcd
