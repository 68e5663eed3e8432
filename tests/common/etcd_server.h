// A real etcd server for tests: loopback only, free ports, a temporary data
// dir (on /dev/shm when available), stopped and removed at destruction.
//
//   EtcdServer etcd;
//   if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
//   ASSERT_TRUE(etcd.start()) << etcd.error();
//   engine.init(etcd.uri(), "node-a");
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#if HAWSER_HAVE_ETCD
#include "metadata/etcd_security.h"
#endif

namespace hawser::test {

class EtcdServer {
 public:
  EtcdServer() = default;
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // The etcd binary: $HAWSER_ETCD_BIN, else `etcd` on PATH; "" if missing.
  static std::string binary();
  static bool available() { return !binary().empty(); }
  static std::string missingReason();

  // TLS for clients (before start()): etcd serves https with `cert`/`key`
  // and, with client_cert_auth, requires client certificates signed by `ca`.
  // `client_cert`/`client_key` are what this harness itself connects with.
  struct Tls {
    std::string ca, cert, key;
    bool client_cert_auth = true;
    std::string client_cert, client_key;
  };
  void useTls(const Tls& tls) { tls_ = tls; }
  // etcd authentication: adds user root (`root_password`, role root) and
  // `user` (`password`) with a role that may read and write keys under
  // `prefix`, then enables authentication; the harness then connects as
  // root. Empty string on success, else why not.
  std::string enableAuth(const std::string& root_password, const std::string& user, const std::string& password,
                         const std::string& prefix);

  // Starts etcd on two free loopback ports with a fresh data dir and waits
  // (up to 20 s) until it answers. False with error() set otherwise.
  bool start();
  // SIGTERM (SIGKILL after 5 s); the data dir is kept for restart().
  void stop();
  // SIGKILL, no cleanup by etcd.
  void kill9();
  // SIGSTOP / SIGCONT: a hung etcd whose connections stay open.
  void pause();
  void resume();
  // Starts again on the same ports; `wipe` empties the data dir first (a
  // "new" etcd that knows no keys and no leases).
  bool restart(bool wipe = false);
  bool running() const { return pid_ > 0; }

  std::string uri() const;       // "etcd://127.0.0.1:<client port>" ("etcds://" with TLS)
  std::string endpoint() const;  // "127.0.0.1:<client port>"
  uint16_t clientPort() const { return client_port_; }
  const std::string& error() const { return error_; }
  // Last lines of etcd's own log (for failure messages).
  std::string logTail() const;

 private:
  bool launch();
  bool waitReady(int timeout_ms);
#if HAWSER_HAVE_ETCD
  etcd::Security harnessSecurity() const;  // how this harness connects
#endif

  pid_t pid_ = -1;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  std::string dir_;       // temp root: data/ and etcd.log
  std::string error_;
  Tls tls_;
  std::string root_password_;  // set once enableAuth() succeeded
};

// A free TCP port on 127.0.0.1 (bound then released).
uint16_t freeLoopbackPort();

}  // namespace hawser::test
