// A persistent control connection to one peer's listener, for callers that
// make many calls to the same peer in order (notifications). Calls on one
// Connection are serialized: a call returns before the next one is sent, so
// the peer handles them in the order they were made.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "hawser/status.h"
#include "rpc/socket.h"

namespace hawser::rpc {

class Connection {
 public:
  Connection(std::string host, uint16_t port) : host_(std::move(host)), port_(port) {}

  // One call, as rpc::call, over the kept connection (opened on first use,
  // reopened when the peer closed it while idle). A call that fails midway
  // drops the connection; it is not retried (the peer may have handled it).
  Status call(uint16_t method, const std::string& request, std::string& reply, std::chrono::milliseconds timeout);
  // Closes the connection (the next call opens a new one).
  void close();

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  // Whether the idle connection was closed by the peer (readable: EOF or junk).
  bool stale() const;

  const std::string host_;
  const uint16_t port_;
  std::mutex mu_;
  net::Fd fd_;
  uint64_t next_id_ = 1;
};

}  // namespace hawser::rpc
