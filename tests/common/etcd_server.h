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

  std::string uri() const;       // "etcd://127.0.0.1:<client port>"
  std::string endpoint() const;  // "127.0.0.1:<client port>"
  uint16_t clientPort() const { return client_port_; }
  const std::string& error() const { return error_; }
  // Last lines of etcd's own log (for failure messages).
  std::string logTail() const;

 private:
  bool launch();
  bool waitReady(int timeout_ms);

  pid_t pid_ = -1;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  std::string dir_;       // temp root: data/ and etcd.log
  std::string error_;
};

// A free TCP port on 127.0.0.1 (bound then released).
uint16_t freeLoopbackPort();

}  // namespace hawser::test
