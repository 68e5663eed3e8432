// A TCP relay in front of a TLS server that loses the server's last words
// once the client has sent application data: when the server closes such a
// connection, the relay drops what the server sent in its last moment (its
// alert) and resets the client's connection instead.
//
// That is how a client certificate refused under TLS 1.3 can look: the
// server decides after the client has finished its handshake and already
// sent its request, so its alert races with its close, and the client may
// see only a reset. Under TLS 1.2 the refusal is part of the handshake,
// before any application data, and the relay passes it on unchanged.
//
//   TlsResetRelay relay;
//   ASSERT_TRUE(relay.start(etcd_port)) << relay.error();
//   // connect to 127.0.0.1:relay.port()
//
// The client's records are followed by their 5-byte headers (content type
// 23 = application data; TLS 1.3 sends its encrypted handshake records as 23
// too). Once one has passed, the server's bytes are held `hold` before they
// are passed on; the server's end of stream within that time (or a reset,
// or a send to it that fails) drops them and closes the client's side with
// a reset (SO_LINGER 0).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hawser::test {

class TlsResetRelay {
 public:
  explicit TlsResetRelay(std::chrono::milliseconds hold = std::chrono::milliseconds(200));
  ~TlsResetRelay();
  TlsResetRelay(const TlsResetRelay&) = delete;
  TlsResetRelay& operator=(const TlsResetRelay&) = delete;

  // Listens on 127.0.0.1 (a free port) and relays to 127.0.0.1:upstream_port.
  bool start(uint16_t upstream_port);
  // Closes the listener and every relayed connection; joins the threads.
  void stop();

  uint16_t port() const { return port_; }
  const std::string& error() const { return error_; }
  // Connections the relay reset after dropping the server's last bytes.
  uint64_t resets() const { return resets_.load(); }

 private:
  void acceptLoop();
  void relay(int client);

  const std::chrono::milliseconds hold_;
  uint16_t upstream_port_ = 0;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::string error_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> resets_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> links_;
};

}  // namespace hawser::test
