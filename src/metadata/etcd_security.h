// TLS and authentication towards etcd: `etcds://` endpoints (https, etcd's
// certificate checked against a CA, optionally a client certificate for
// etcd's --client-cert-auth) and etcd users (POST /v3/auth/authenticate
// gives a token, sent as the Authorization header of every request and
// renewed when etcd says it is invalid). The settings come from the config
// table (etcd.ca_file, etcd.cert_file, etcd.key_file, etcd.user,
// etcd.password or etcd.password_file); docs/metadata.md. The password is
// never logged nor put in a message.
#pragma once

#include <chrono>
#include <string>

#include "hawser/status.h"
#include "metadata/http_client.h"

namespace hawser::etcd {

struct Security {
  bool tls = false;       // etcds://: https, etcd's certificate verified (name included)
  std::string ca_file;    // PEM CA bundle that signed etcd's certificate ("": the system's CAs)
  std::string cert_file;  // PEM client certificate ("": none)
  std::string key_file;   // its PEM private key
  std::string user;       // etcd user ("": no authentication)
  std::string password;   // its password

  bool auth() const { return !user.empty(); }
  // "https" or "http".
  const char* scheme() const { return tls ? "https" : "http"; }
};

// Sets the TLS options of a curl easy handle (`curl` is a CURL*) that is
// fresh or reset: what is not set keeps curl's default.
void applyTls(void* curl, const Security& s);

// A curl failure (`curl_code`, with curl's error buffer `detail`) on a TLS
// connection to `endpoint` that no retry can fix, as a kPermissionDenied
// naming the setting at fault: etcd's certificate not trusted by
// etcd.ca_file, a client certificate required or rejected, a file curl
// cannot use, an endpoint that does not speak TLS. OK for anything else
// (a network failure, to be retried as usual).
Status tlsFailure(int curl_code, const std::string& detail, const Security& s, const std::string& endpoint);

// True for the curl failures on a TLS connection that tlsFailure() could
// not place and that a refused client certificate may hide: under TLS 1.3
// etcd checks the client's certificate after the client has finished its
// handshake and sent its request, so its alert races with its close and the
// client may see only a reset (a failed send or receive, no reply).
bool unexplainedTlsFailure(int curl_code, const Security& s);

// After such a failure: one fresh TLS 1.2 handshake to `endpoint` (a GET of
// /version through `http`), where a refused certificate is part of the
// handshake and reported as such. Its tlsFailure() when that names a
// setting; OK otherwise (the failure was the network's: retry as usual).
Status diagnoseTls(http::Client& http, const Security& s, const std::string& endpoint,
                   std::chrono::milliseconds timeout);

// etcd's refusal of a request (`refusal`: the text naming the endpoint, the
// request and etcd's message; gRPC code `grpc_code`), when it is about
// authentication or permission, as a kPermissionDenied that adds what to
// set; OK for any other refusal.
Status authFailure(int grpc_code, const std::string& refusal, const Security& s);

// True when etcd's refusal (`message`) says the token is no longer valid
// (expired, or etcd restarted and forgot it): authenticate again and retry.
bool tokenInvalid(int grpc_code, const std::string& message);

}  // namespace hawser::etcd
