// The local socket: how two engines of one host hand each other what their
// fast paths need as file descriptors (SCM_RIGHTS over a SOCK_SEQPACKET Unix
// socket), whatever pid namespace each runs in. Transports (shm, nvlink)
// speak their own messages over it; this layer holds the machinery they
// share: listening at an abstract or directory name, connecting (with the
// reason a user can act on where it is not reachable), the peer's
// credentials (SO_PEERCRED) and the trust check, one message with its
// descriptors each way, and a listener thread that accepts connections and
// hands their messages to the transport (local_listener.h).
//
// A listener's name is "@<prefix>-<random>" in the abstract namespace
// (reachable from its network namespace only), or
// "<dir>/<prefix>-<random>.sock" (reachable from wherever that directory is
// mounted). Authentication is the transport's (a nonce from the descriptor)
// plus the peer's uid, never a pid: pids mean nothing across pid namespaces
// (SO_PEERCRED gives 0 for a process this one cannot see).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/route.h"
#include "hawser/status.h"

namespace hawser::local {

// The most descriptors one message carries.
inline constexpr size_t kMaxFds = 16;

// Where a transport listens: `dir` ("" for the abstract namespace), the
// name's `prefix` ("hawser-shm") and the config key that sets `dir` (named
// in the messages a user acts on).
struct Place {
  std::string dir;
  std::string prefix;
  std::string dir_key;
};

struct Cred {
  pid_t pid = 0;  // in this pid namespace; 0: not visible from here
  uid_t uid = 0;
  gid_t gid = 0;
};

// Listens at a new name of `place`. `name` gets "@..." or the path.
Status listenAt(const Place& place, std::string& name, int& fd);
// Connects to `name` (as listenAt gave it); `dir_key` is the peer's config
// key for the directory (for the advice). kNotSupported, with the reason a
// user can act on and its route reason, where it is not reachable from here.
Status connectTo(const std::string& name, const std::string& dir_key, int& fd, RouteReason& reason);
// The credentials of the other end of `sock`.
Status peerCred(int sock, Cred& out);
// Whether the process at the other end (`uid`) is trusted: the same user as
// this one, or root.
bool trusted(uid_t uid);
// A pidfd of this process (passed to peers: their exit watch on it works
// across pid namespaces); -1 with errno where the kernel has none.
int selfPidfd();

// Sends one message of `len` bytes with `fds` (at most kMaxFds; may be empty).
Status sendMessage(int sock, const void* msg, size_t len, std::span<const int> fds = {});
// Receives one message of exactly `len` bytes within `timeout_ms`; `fds`
// gets what came with it (the caller owns them). kUnavailable on EOF,
// kTimeout, kRemoteError on a message of another size (its fds closed).
Status recvMessage(int sock, void* msg, size_t len, std::vector<int>& fds, int timeout_ms);

// Closes every fd of `fds` and clears it.
void closeAll(std::vector<int>& fds);

// Receives one message of a transport's type M, whose first fields are its
// `magic` and `version`: kRemoteError (its fds closed) for one of another
// magic or version, naming `who` ("shm socket").
template <class M>
Status recvChecked(int sock, M& m, std::vector<int>& fds, int timeout_ms, uint32_t magic, uint32_t version,
                   const char* who) {
  Status s = recvMessage(sock, &m, sizeof m, fds, timeout_ms);
  if (!s.ok() || (m.magic == magic && m.version == version)) return s;
  closeAll(fds);
  return {Code::kRemoteError, std::string(who) + ": a malformed message (version " + std::to_string(m.version) + ")"};
}
// A message's text field `buf` of `cap` bytes: set to `s` (cut to fit,
// NUL-terminated), and read back (up to its NUL).
void putText(char* buf, size_t cap, const std::string& s);
std::string getText(const char* buf, size_t cap);

// Closes every descriptor of `fds` that is >= 0 when it goes out of scope.
struct FdsCloser {
  std::vector<int>& fds;
  ~FdsCloser();
};

}  // namespace hawser::local
