// A TCP relay that delays every byte by a fixed time in each direction: the
// tests' stand-in for a long network path (this kernel has no netem qdisc).
//
//   DelayProxy proxy(std::chrono::milliseconds(50));
//   ASSERT_TRUE(proxy.start("127.0.0.1", "10.0.0.1", 5000)) << proxy.error();
//   // make connections to 10.0.0.1:5000 reach 127.0.0.1:proxy.port(), e.g.
//   // nft ... ip daddr 10.0.0.1 tcp dport 5000 meta mark != proxy.mark() redirect to :PORT
//
// Each accepted connection gets its own upstream connection to the target.
// Per direction, one thread reads what arrives and stamps it; another sends
// each chunk once its stamp is `delay` old, so the one-way delay is `delay`
// (the round trip twice that) whatever the rate. At most kWindow bytes wait
// per direction: a full window stops reading, and TCP's flow control pushes
// back on the sender, as a real path's queue does. End of stream and resets
// are passed on. Upstream sockets carry SO_MARK mark(), so a redirect rule
// that excludes the mark does not loop them back to the proxy.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hawser::test {

class DelayProxy {
 public:
  static constexpr size_t kWindow = 8u << 20;  // bytes held per direction, at most

  explicit DelayProxy(std::chrono::milliseconds delay, uint32_t mark = 0x4857);
  ~DelayProxy();
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  // Listens on listen_host (a free port) and relays to upstream_host:port.
  bool start(const std::string& listen_host, const std::string& upstream_host, uint16_t upstream_port);
  // Closes the listener and every relayed connection; joins the threads.
  void stop();

  uint16_t port() const { return port_; }
  uint32_t mark() const { return mark_; }
  const std::string& error() const { return error_; }
  // Connections accepted, and bytes relayed (both directions), so far.
  uint64_t connections() const { return connections_.load(); }
  uint64_t bytesRelayed() const { return bytes_.load(); }

  struct Pipe;  // one direction of a relayed connection (delay_proxy.cpp)
  struct Link;  // both directions and their threads

 private:
  void acceptLoop();
  void relay(int client);

  const std::chrono::milliseconds delay_;
  const uint32_t mark_;
  std::string upstream_host_;
  uint16_t upstream_port_ = 0;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::string error_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> connections_{0};
  std::atomic<uint64_t> bytes_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Link>> links_;
};

}  // namespace hawser::test
