// Where a transport registers its control-plane channels: the calls its
// peers make and the connection kinds they open (tcp's data connections,
// rdma's handshake). The engine's rpc server (rpc/rpc.h, rpc::Server)
// implements it; a transport gets it in its TransportContext and never
// names the rpc layer's listener.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/fd.h"
#include "hawser/status.h"

namespace hawser {

// A control method or connection kind, named by the layer that owns it
// ("metadata.get_segment", "tcp.data", "rdma.handshake"), and its wire id
// (rpc::channel derives it from the name).
struct Channel {
  std::string name;
  uint16_t id = 0;
};

class ChannelRegistry {
 public:
  // Answers one call: `reply` is sent back with the returned status.
  using CallHandler = std::function<Status(const std::string& request, std::string& reply)>;
  // Owns the connected socket; runs on that connection's own thread.
  using StreamHandler = std::function<void(net::Fd fd)>;

  // Register before the listener starts or at any time; handlers must be
  // thread-safe. kInvalidArgument when another name already holds the
  // channel's id.
  virtual Status onCall(const Channel& method, CallHandler h) = 0;
  virtual Status onStream(const Channel& kind, StreamHandler h) = 0;

 protected:
  ~ChannelRegistry() = default;
};

}  // namespace hawser
