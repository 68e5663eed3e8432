// The control-plane listener and client.
//
// One TCP listener per engine (the segment's "host:port"). Every connection
// starts with a Hello frame naming its kind:
//   kControl  — request/response calls: [Frame(type=method, id)] + body,
//               answered by [Frame(type=method|kReplyBit, id, status)] + body.
//   other     — handed to the stream handler registered for that kind (the
//               tcp transport's data connections), which owns the socket.
// Frames carry a magic, a version, a type and a bounded length; a malformed
// or oversized frame closes that connection only.
//
// Hostile peers (ServerLimits, the rpc.* config keys): a frame's body is
// received into memory that grows with the bytes that came (FrameReader),
// never allocated up front from its announced length; a frame (and a Hello)
// must arrive whole within rpc.frame_timeout_ms of its first byte, or the
// connection is closed; the listener holds at most rpc.max_connections
// connections, of which at most rpc.max_control_connections are control
// connections (or still owe their Hello), at most rpc.max_control_per_peer
// of them from one peer address; a connection over a cap is closed at
// accept with a logged reason. Everyone else keeps being served.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/channel_registry.h"
#include "hawser/status.h"
#include "rpc/socket.h"

namespace hawser {
class Config;
}

namespace hawser::rpc {

inline constexpr uint32_t kMagic = 0x52535748;  // "HWSR" little-endian
inline constexpr uint16_t kVersion = 2;
inline constexpr uint32_t kMaxControlBody = 16u << 20;

#pragma pack(push, 1)
struct Frame {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t type = 0;     // method id / message type
  uint32_t length = 0;   // body bytes that follow
  int32_t status = 0;    // hawser::Code in replies
  uint64_t id = 0;       // request id
};
#pragma pack(pop)
static_assert(sizeof(Frame) == 24);

// The listener's own ids: the control connection kind and its ping method.
inline constexpr uint16_t kConnControl = 1;
inline constexpr uint16_t kPing = 1;
inline constexpr uint16_t kReplyBit = 0x8000;

// A control method or connection kind, named by the layer that owns it
// ("metadata.get_segment", "tcp.data", "rdma.handshake"). Its wire id is
// derived from the name (a hash into [16, 0x7fff]; ids below 16 belong to the
// listener), so both ends agree without a central list. Registering a second
// name with the same id fails.
using Channel = hawser::Channel;  // base/channel_registry.h
Channel channel(std::string_view name);

// Optional shared secret: when set (engine: config "auth.token",
// HAWSER_AUTH_TOKEN), every connection's Hello must carry it, and outgoing
// connections send it. Process-wide.
void setAuthToken(const std::string& token);
std::string authToken();

// The decode steps, separated from the socket I/O (and fuzzed on their own,
// tests/fuzz/rpc_fuzz.cpp). Every refusal is kRemoteError naming the field,
// except a wrong token (kPermissionDenied).
//
// A frame header as it arrived: magic, version, and length <= max_body.
Status checkFrame(const Frame& f, uint32_t max_body);
// The Hello of an incoming connection (header already checked): its body is
// the auth token, which must equal `want` when one is set.
Status checkHello(const Frame& hello, std::string_view token, std::string_view want);
// The reply to a call of `method` with request id `id` (header already
// checked): Ok, or the peer's refusal as a Status whose message is `body`
// (an out-of-range code reads as kRemoteError).
Status checkReply(const Frame& r, uint16_t method, uint64_t id, std::string_view body);
inline constexpr uint32_t kMaxHelloBody = 4096;

class FrameReader;
// Receives one whole frame (header checked, body) into `r`, which must be
// fresh (or next()ed). The frame must be whole within `limit`: counted from
// now, or, when `idle_ok`, from its first byte (the wait for that byte is
// then unbounded: an idle connection). kTimeout naming what came, checkFrame's
// refusal, or kUnavailable when the peer closed the connection.
Status recvFrame(int fd, FrameReader& r, std::chrono::milliseconds limit, bool idle_ok);

// The listener's bounds against peers that hold connections or memory.
struct ServerLimits {
  uint32_t max_connections = 4096;       // rpc.max_connections: open connections, every kind
  uint32_t max_control = 1024;           // rpc.max_control_connections: control ones (and unfinished Hellos)
  uint32_t max_control_per_peer = 256;   // rpc.max_control_per_peer: the same, from one peer address
  std::chrono::milliseconds frame_timeout{10000};  // rpc.frame_timeout_ms
  // TCP keepalive on every accepted connection (net::setKeepAlive), so a
  // connection whose peer vanished in silence (a partition, a host gone)
  // does not keep its thread waiting for the next frame forever. A stream
  // handler may set its own. 0 leaves it off. (rpc.timeout_ms in an engine.)
  std::chrono::milliseconds keepalive{0};
  // The rpc.* keys of `config` (keepalive: rpc.timeout_ms).
  static Status fromConfig(const Config& config, ServerLimits& out);
};

// The listener; it is the ChannelRegistry the engine hands its transports.
class Server final : public ChannelRegistry {
 public:

  Server() = default;
  ~Server();

  Status start(const std::string& host, uint16_t port);
  void stop();
  // Before start().
  void setLimits(const ServerLimits& limits) { limits_ = limits; }
  const ServerLimits& limits() const { return limits_; }
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

  // Register before start() or at any time; handlers must be thread-safe.
  // kInvalidArgument when another name already holds the channel's id.
  Status onCall(const Channel& method, CallHandler h) override;
  Status onStream(const Channel& kind, StreamHandler h) override;

  // Connections closed for a malformed or late frame (Hello included).
  uint64_t refusedFrames() const { return refused_.load(); }
  // Of those, the ones closed because a frame was not whole in time.
  uint64_t lateFrames() const { return late_.load(); }
  // Connections closed at accept: over a cap of ServerLimits.
  uint64_t refusedConnections() const { return refused_conns_.load(); }
  // Connections open now: all, and those counted as control.
  size_t openConnections() const;
  size_t openControlConnections() const;

 private:
  void acceptLoop();
  // Whether a connection from `peer` may be taken; the reason when not.
  bool admitLocked(const std::string& peer, std::string& why);
  // A warning of one kind, at most one line per second: a flood of peers
  // must not flood the log too (the next line logged counts those skipped).
  struct LimitedLog {
    std::mutex mu;
    std::chrono::steady_clock::time_point last{};
    uint64_t skipped = 0;
    void warn(const std::string& line);
  };
  void serve(net::Fd fd, std::string peer);
  void serveControl(int fd, const std::string& peer);
  void uncountControl(const std::string& peer);  // under mu_

  std::string host_;
  uint16_t port_ = 0;
  ServerLimits limits_;
  net::Fd listen_fd_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::map<uint16_t, CallHandler> calls_;
  std::map<uint16_t, StreamHandler> streams_;
  std::map<uint16_t, std::string> call_names_, stream_names_;
  std::condition_variable conn_cv_;
  size_t conn_threads_ = 0;    // live connection threads (detached)
  std::vector<int> conn_fds_;  // open connections, shut down on stop()
  size_t control_open_ = 0;    // connections counted as control (and unfinished Hellos)
  std::map<std::string, uint32_t> control_by_peer_;  // the same, by peer address
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> late_{0};
  std::atomic<uint64_t> refused_conns_{0};
  LimitedLog refusal_log_, close_log_;
};

// One control call on a fresh connection (control calls are rare: descriptor
// fetches and handshakes). kUnavailable/kTimeout on network trouble; the
// peer's error Status when it refused. `nobody_listens`, when given, is set
// when the connection itself was refused (see net::connectTo): the peer's
// process is gone, as opposed to slow, busy or refusing this one call.
Status call(const std::string& host, uint16_t port, uint16_t method, const std::string& request,
            std::string& reply, std::chrono::milliseconds timeout = std::chrono::seconds(5),
            bool* nobody_listens = nullptr);

// Opens a connection of `kind` (sends the Hello); used by stream transports.
Status openStream(const std::string& host, uint16_t port, uint16_t kind,
                  std::chrono::milliseconds timeout, net::Fd& out, bool* nobody_listens = nullptr);

}  // namespace hawser::rpc
