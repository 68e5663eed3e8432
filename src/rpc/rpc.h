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

#include "hawser/status.h"
#include "rpc/socket.h"

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
struct Channel {
  std::string name;
  uint16_t id = 0;
};
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

// Reads one frame header and checks it (checkFrame).
Status readFrame(int fd, Frame& f, uint32_t max_body);

class Server {
 public:
  using CallHandler = std::function<Status(const std::string& request, std::string& reply)>;
  // Owns the connected socket; runs on that connection's own thread.
  using StreamHandler = std::function<void(net::Fd fd)>;

  Server() = default;
  ~Server();

  Status start(const std::string& host, uint16_t port);
  void stop();
  // TCP keepalive on every accepted connection (net::setKeepAlive), so a
  // connection whose peer vanished in silence (a partition, a host gone)
  // does not keep its thread waiting for the next frame forever. A stream
  // handler may set its own. 0 (the default) leaves it off. Before start().
  void setKeepAlive(std::chrono::milliseconds interval) { keepalive_ = interval; }
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

  // Register before start() or at any time; handlers must be thread-safe.
  // kInvalidArgument when another name already holds the channel's id.
  Status onCall(const Channel& method, CallHandler h);
  Status onStream(const Channel& kind, StreamHandler h);

  uint64_t refusedFrames() const { return refused_.load(); }

 private:
  void acceptLoop();
  void serve(net::Fd fd);
  void serveControl(int fd);

  std::string host_;
  uint16_t port_ = 0;
  std::chrono::milliseconds keepalive_{0};
  net::Fd listen_fd_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::map<uint16_t, CallHandler> calls_;
  std::map<uint16_t, StreamHandler> streams_;
  std::map<uint16_t, std::string> call_names_, stream_names_;
  std::condition_variable conn_cv_;
  size_t conn_threads_ = 0;    // live connection threads (detached)
  std::vector<int> conn_fds_;  // open connections, shut down on stop()
  std::atomic<uint64_t> refused_{0};
};

// One control call on a fresh connection (control calls are rare: descriptor
// fetches and handshakes). kUnavailable/kTimeout on network trouble; the
// peer's error Status when it refused.
Status call(const std::string& host, uint16_t port, uint16_t method, const std::string& request,
            std::string& reply, std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Opens a connection of `kind` (sends the Hello); used by stream transports.
Status openStream(const std::string& host, uint16_t port, uint16_t kind,
                  std::chrono::milliseconds timeout, net::Fd& out);

}  // namespace hawser::rpc
