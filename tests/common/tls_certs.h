// Certificates for TLS tests, made by the openssl command-line tool in a
// directory: a CA, a server certificate for 127.0.0.1/localhost signed by it
// (server and client auth: etcd's gateway connects to etcd with it), a
// client certificate signed by it without a CommonName (etcd's gateway
// refuses client certificates with a CN while authentication is enabled),
// one with a CN, and a second, unrelated CA with a client certificate of its
// own (the wrong CA). EC P-256 keys, valid two days.
#pragma once

#include <string>

namespace hawser::test {

struct TlsCerts {
  // "" on success, else what failed (openssl's output).
  std::string generate(const std::string& dir);
  // Why the openssl tool cannot be used here ("" when it can).
  static std::string missingReason();

  std::string ca, server_cert, server_key, client_cert, client_key, cn_client_cert, cn_client_key;
  std::string other_ca, other_client_cert, other_client_key;
};

}  // namespace hawser::test
