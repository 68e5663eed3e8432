// The /metrics endpoint of `hawser serve --metrics HOST:PORT`: a small
// HTTP/1.x server on its own thread. GET (or HEAD) /metrics answers 200
// with the text `render` returns (Content-Type: the Prometheus text format
// 0.0.4); any other path is 404, any other method 405. Every answer closes
// its connection. Sockets are non-blocking and polled, so several scrapers
// are served at once and a stalled one holds nobody up (it is dropped after
// a few seconds); the engine is only ever asked for its stats.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "hawser/status.h"

namespace hawser::tools {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  MetricsServer() = default;
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on host:port (port 0: any free one) and starts serving.
  // kInvalidArgument for a host that is not an address, kUnavailable when
  // the address cannot be bound.
  Status start(const std::string& host, uint16_t port, Render render);
  void stop();
  uint16_t port() const { return port_; }

 private:
  void run();

  Render render_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop()
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Splits "HOST:PORT" ("[v6]:PORT" too); false when it is not that.
bool splitHostPort(const std::string& text, std::string& host, uint16_t& port);

}  // namespace hawser::tools
