// The shm transport's messages over the local socket (local/local_socket.h:
// descriptors passed with SCM_RIGHTS, whatever pid namespace each end runs
// in).
//
// A target listens at a name of its own: "@hawser-shm-<random>" in the
// abstract namespace (reachable from its network namespace only), or
// "<shm.socket_dir>/hawser-shm-<random>.sock" (reachable from wherever that
// directory is mounted). An initiator connects, checks the listener's
// credentials (SO_PEERCRED: same user, or root), and says hello with the
// nonce of the target's descriptor; the target checks the nonce and the
// initiator's credentials, and answers with its registration table (a memfd)
// and a pidfd of itself (exit watch across pid namespaces). After that the
// initiator asks for the memfd of each shareable registration it maps.
// Authentication is the nonce and the peer's uid, never a pid: pids mean
// nothing across pid namespaces (SO_PEERCRED gives 0 for a process this one
// cannot see).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/status.h"

namespace hawser::shm {

inline constexpr uint32_t kSockMagic = 0x6b737368;  // "hssk"
inline constexpr uint32_t kSockVersion = 1;

enum class MsgType : uint32_t {
  kHello = 1,    // initiator: nonce
  kWelcome = 2,  // target: token (its name for this initiator's reader slots); fds: table, pidfd
  kMap = 3,      // initiator: gen (the registration to map)
  kMapped = 4,   // target: gen, addr, length, offset; fd: its memory's file
};

// One message each way (fixed size; status 0: ok, else `why` says why not).
struct Msg {
  uint32_t magic = kSockMagic;
  uint32_t version = kSockVersion;
  uint32_t type = 0;
  uint32_t status = 0;
  uint64_t nonce = 0;
  uint64_t token = 0;
  uint64_t gen = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t offset = 0;
  char why[200] = {};
  void setWhy(const std::string& s);
  std::string whyText() const;
};

// Sends `m` with `fds` (may be empty).
Status sendMsg(int sock, const Msg& m, const std::vector<int>& fds = {});
// Receives one message within `timeout_ms`; `fds` gets what came with it
// (the caller owns them). kUnavailable on EOF, kTimeout, kRemoteError on a
// malformed message.
Status recvMsg(int sock, Msg& m, std::vector<int>& fds, int timeout_ms);

}  // namespace hawser::shm
