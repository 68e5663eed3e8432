// nvlink's local socket (local/local_socket.h): what an owner hands its
// peers as file descriptors, whatever pid namespace each runs in.
//
// The owner listens at "@hawser-nvlink-<random>" (abstract namespace) or
// "<nvlink.socket_dir>/hawser-nvlink-<random>.sock", and publishes the name
// and a nonce in its descriptor. A peer connects, checks the owner's
// credentials (SO_PEERCRED: same user, or root) and says hello with the
// nonce; the owner checks the nonce and the peer's credentials, and answers
// with its region table (a memfd: nvlink_readers.h) and a pidfd of itself
// (the peer's exit watch, across pid namespaces), and a token: the peer's
// name in the table's readers' area where pids mean nothing (another pid
// namespace), whose slots the owner frees when the connection closes. The
// peer then asks for the physical allocations behind each CUDA virtual
// memory range it copies with (kImport), and gets one fd per allocation
// (cuMemExportToShareableHandle), several messages of up to kMaxPieces each.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/vmm.h"
#include "hawser/status.h"
#include "local/local_listener.h"

namespace hawser::nvlink {

inline constexpr uint32_t kSockMagic = 0x6b736e68;  // "hnsk"
inline constexpr uint32_t kSockVersion = 1;
inline constexpr size_t kMaxPieces = local::kMaxFds;

enum class MsgType : uint32_t {
  kHello = 1,    // peer: nonce
  kWelcome = 2,  // owner: nonce, token; fds: region table, pidfd
  kImport = 3,   // peer: id (a VMM range the owner published as attrs.nvlink.vmm)
  kPieces = 4,   // owner: id, size, first, count, total; at/len of `count` pieces; fds: theirs
};

struct Msg {
  uint32_t magic = kSockMagic;
  uint32_t version = kSockVersion;
  uint32_t type = 0;
  uint32_t status = 0;  // 0: ok, else `why` says why not
  uint64_t nonce = 0;
  uint64_t token = 0;
  uint64_t id = 0;
  uint64_t size = 0;
  uint32_t first = 0, count = 0, total = 0, pad = 0;
  uint64_t at[kMaxPieces] = {};
  uint64_t len[kMaxPieces] = {};
  char why[200] = {};
  void setWhy(const std::string& s);
  std::string whyText() const;
};

Status sendMsg(int sock, const Msg& m, const std::vector<int>& fds = {});
// kRemoteError for a message that is not nvlink's (its fds closed).
Status recvMsg(int sock, Msg& m, std::vector<int>& fds, int timeout_ms);

// The owner's end. `pieces(id, size, out)` gives duplicates of the fds of
// VMM range `id` (the server closes them once sent); `left(token)` frees the
// reader slots of a peer whose connection closed.
class Server {
 public:
  using Pieces = std::function<Status(uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out)>;
  using Left = std::function<void(uint64_t token)>;
  Server(int table_fd, uint64_t nonce, Pieces pieces, Left left)
      : table_fd_(table_fd), nonce_(nonce), pieces_(std::move(pieces)), left_(std::move(left)) {}
  ~Server();  // stops (its listener makes it non-copyable)

  // Listens (nvlink.socket_dir `dir`, "" for the abstract namespace).
  Status start(const std::string& dir);
  // Closes every connection and the listener; joins its thread.
  void stop();
  const std::string& name() const { return listener_.name(); }
  uint64_t peers() const { return peers_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t filesPassed() const { return passed_.load(std::memory_order_relaxed); }

 private:
  bool handle(int fd);
  void closed(int fd);
  const int table_fd_;
  const uint64_t nonce_;
  Pieces pieces_;
  Left left_;
  int pidfd_ = -1;
  local::Listener listener_;
  std::unordered_map<int, uint64_t> tokens_;  // connection -> token (0 until its hello); the listener thread's
  uint64_t next_token_ = 1;
  std::atomic<uint64_t> peers_{0}, refused_{0}, passed_{0};
};

// The peer's end: what a hello got.
struct Welcome {
  int sock = -1;
  int table_fd = -1;
  int pidfd = -1;
  uint64_t token = 0;
  pid_t pid = 0;  // the owner in this pid namespace (0: not visible from here)
};

// Connects to an owner's socket `name` and says hello with `nonce`; `w`'s
// fds are the caller's. kNotSupported with `reason` where it cannot.
Status connectOwner(const std::string& name, uint64_t nonce, const std::string& segment, Welcome& w,
                    RouteReason& reason);

// Asks the owner (over `sock`) for VMM range `id`: its size and one fd per
// physical allocation (the caller closes them).
Status importPieces(int sock, uint64_t id, uint64_t& size, std::vector<gpu::vmm::Piece>& out);

}  // namespace hawser::nvlink
