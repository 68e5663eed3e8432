#include "common/tls_certs.h"

#include <fstream>

#include "common/util.h"

namespace hawser::test {

namespace {

constexpr const char* kKey = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

// A self-signed CA: dir/name.pem, dir/name.key.
std::string makeCa(const std::string& dir, const std::string& name, const std::string& cn) {
  std::string out;
  const std::string cmd = std::string("cd '") + dir + "' && openssl req -x509 " + kKey + " -keyout " + name +
                          ".key -out " + name + ".pem -days 2 -subj '/CN=" + cn +
                          "' -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign "
                          "2>&1";
  return sh(cmd, &out) == 0 ? std::string() : "openssl req (CA " + name + "): " + out;
}

// dir/name.pem and dir/name.key, signed by dir/ca.pem with extensions `ext`.
std::string makeLeaf(const std::string& dir, const std::string& name, const std::string& ca, const std::string& subject,
                     const std::string& ext, int serial) {
  {
    std::ofstream f(dir + "/" + name + ".ext");
    f << ext;
    if (!f) return "cannot write " + dir + "/" + name + ".ext";
  }
  std::string out;
  std::string cmd = std::string("cd '") + dir + "' && openssl req " + kKey + " -keyout " + name + ".key -out " +
                    name + ".csr -subj '" + subject + "' 2>&1 && openssl x509 -req -in " + name + ".csr -CA " + ca +
                    ".pem -CAkey " + ca + ".key -set_serial " + std::to_string(serial) + " -days 2 -out " + name +
                    ".pem -extfile " + name + ".ext 2>&1";
  return sh(cmd, &out) == 0 ? std::string() : "openssl (" + name + "): " + out;
}

}  // namespace

std::string TlsCerts::missingReason() {
  std::string out;
  return sh("openssl version 2>&1", &out) == 0
             ? std::string()
             : "the openssl tool is missing (apt-get install openssl; scripts/deps.sh installs it)";
}

std::string TlsCerts::generate(const std::string& dir) {
  std::string e;
  if (!(e = makeCa(dir, "ca", "hawser-test-ca")).empty()) return e;
  if (!(e = makeCa(dir, "other-ca", "hawser-test-other-ca")).empty()) return e;
  const std::string server_ext =
      "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
      "keyUsage=critical,digitalSignature,keyEncipherment\n";
  const std::string client_ext = "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n";
  if (!(e = makeLeaf(dir, "server", "ca", "/CN=hawser-test-etcd", server_ext, 2)).empty()) return e;
  if (!(e = makeLeaf(dir, "client", "ca", "/O=hawser-test-client", client_ext, 3)).empty()) return e;
  if (!(e = makeLeaf(dir, "cn-client", "ca", "/CN=hawser-test-client", client_ext, 5)).empty()) return e;
  if (!(e = makeLeaf(dir, "other-client", "other-ca", "/O=hawser-test-client", client_ext, 4)).empty()) return e;
  ca = dir + "/ca.pem";
  server_cert = dir + "/server.pem";
  server_key = dir + "/server.key";
  client_cert = dir + "/client.pem";
  client_key = dir + "/client.key";
  cn_client_cert = dir + "/cn-client.pem";
  cn_client_key = dir + "/cn-client.key";
  other_ca = dir + "/other-ca.pem";
  other_client_cert = dir + "/other-client.pem";
  other_client_key = dir + "/other-client.key";
  return std::string();
}

}  // namespace hawser::test
