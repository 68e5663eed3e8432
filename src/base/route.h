// The vocabulary of routes shared by the transports and the engine: why a
// transport declines a peer (a closed set of reasons, each produced by the
// transport that knows it), and the properties a route gives a request
// (what a route contract may require). docs/routes.md defines each one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

// Why a transport cannot serve a peer (or a request to it). The name of
// each (routeReasonName) is the `reason` label of
// hawser_route_fallbacks_total and the word in kNoTransport messages.
enum class RouteReason : uint8_t {
  kNone = 0,              // "none": it can
  kNotInstalled,          // "not_installed": it did not install on this host (its install said why)
  kNoDevice,              // "no_device": this host lacks its device (no RDMA NIC, no GPU or CUDA driver)
  kOtherHost,             // "other_host": the peer runs on another host
  kOtherNetNamespace,     // "other_net_namespace": the peer shares this host's kernel but not its network namespace
  kOtherPidNamespace,     // "other_pid_namespace": the peer's process cannot be found from this pid namespace
  kOtherMountNamespace,   // "other_mount_namespace": the peer's socket lives in a directory this process does not see
  kPermissionDenied,      // "permission_denied": the kernel refuses access to the peer's memory (ptrace scope, user)
  kPeerLacksTransport,    // "peer_lacks_transport": the peer's engine publishes no such transport
  kPeerIncompatible,      // "peer_incompatible": the peer publishes it malformed or in another version
  kPeerGone,              // "peer_gone": the peer's engine shut down or its process exited
  kNoIpcHandle,           // "no_ipc_handle": the remote GPU memory has no IPC handle this process can open
  kCompatMode,            // "compat_mode": cuFile runs only in compatibility mode (its own bounce buffers)
  kUnsupportedFile,       // "unsupported_file": cuFile cannot do GPUDirect I/O on the file (its file system, no O_DIRECT)
  kRefused,               // "refused": the transport declined for a reason it does not classify
};

std::string_view routeReasonName(RouteReason r);

// A transport's refusal: the reason and its words ("pid 42 of segment 'x'
// is not running in this pid namespace (No such process)").
struct RouteDecline {
  RouteReason reason = RouteReason::kNone;
  std::string text;
  bool declined() const { return reason != RouteReason::kNone; }
};

// A transport's refusal: sets `why` and returns `s` (its message the text).
inline Status declined(RouteDecline& why, RouteReason reason, Status s) {
  why = {reason, s.message()};
  return s;
}

// The bit of a transport's name in RouteContract::transports; 0 for a name
// the contract cannot name (a transport added by an embedder).
uint32_t routeTransportBit(std::string_view transport);
// "zero_copy" for kZeroCopy, ... (one bit); "" for anything else.
std::string_view routePropertyName(uint32_t property);
// Comma-separated names of the bits set: "zero_copy,no_staging".
std::string routePropertyNames(uint32_t properties);
std::string routeTransportNames(uint32_t transports);
// Parses "a,b" lists (blanks around names ignored; "" is 0). kInvalidArgument
// naming the first unknown word.
Status parseRouteTransports(std::string_view text, uint32_t& out);
Status parseRouteProperties(std::string_view text, uint32_t& out);

}  // namespace hawser
