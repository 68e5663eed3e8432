// hawser — request, status and descriptor types of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hawser/status.h"

namespace hawser {

using SegmentID = uint64_t;  // returned by openSegment; 0 is never valid
using BatchID = uint64_t;    // returned by allocateBatchID; 0 is never valid

inline constexpr SegmentID kInvalidSegment = 0;
inline constexpr BatchID kInvalidBatch = 0;

enum class OpCode : uint8_t {
  kRead = 0,   // target segment -> local memory
  kWrite = 1,  // local memory -> target segment
};

// ---- route contracts (docs/routes.md) -------------------------------------------
// What a request requires of the transport that serves it. A request the
// contract forbids fails at submit with kNoTransport, naming the transport it
// would have taken, the better one expected and why that one is unavailable.

// Transports a contract may allow (RouteContract::transports).
enum RouteTransport : uint32_t {
  kRouteTcp = 1u << 0,
  kRouteShm = 1u << 1,
  kRouteRdma = 1u << 2,
  kRouteNvlink = 1u << 3,
  kRouteFile = 1u << 4,
};

// Properties a contract may require (RouteContract::require), each defined
// exactly in docs/routes.md:
enum RouteProperty : uint32_t {
  kZeroCopy = 1u << 0,   // "zero_copy": no CPU copies the payload (DMA by a NIC or a GPU copy engine)
  kNoStaging = 1u << 1,  // "no_staging": GPU memory never passes through a host bounce buffer
  kSameHost = 1u << 2,   // "same_host": the bytes never cross a network (shm, nvlink, local files)
};

struct RouteContract {
  // false: the engine's contract (config route.transports, route.require)
  // applies; true: this one does instead.
  bool set = false;
  uint32_t transports = 0;  // RouteTransport bits allowed; 0: any
  uint32_t require = 0;     // RouteProperty bits the route must give
};

// A contract from comma-separated names, as config route.transports
// ("shm,nvlink"; "" any) and route.require ("zero_copy"; "" none) take
// them; `out.set` true. kInvalidArgument naming the first unknown word.
Status parseRouteContract(std::string_view transports, std::string_view require, RouteContract& out);

// One request: move `length` bytes between local registered memory at
// `source` and the target segment at `target_offset` (memory segments: the
// remote virtual address; file segments: the logical offset).
struct TransferRequest {
  OpCode opcode = OpCode::kRead;
  void* source = nullptr;
  SegmentID target_id = kInvalidSegment;
  uint64_t target_offset = 0;
  size_t length = 0;
  RouteContract route;  // route.set: this request's contract instead of the engine's
};

// ---- block requests (docs/blocks.md) ------------------------------------------
// One request may name many blocks of one target segment: a list, or a
// strided layout (a paged KV cache). It is one task of its batch with one
// status; blocks contiguous on both sides are moved as one run.

// One block: `length` bytes between local registered memory at `local` and
// the target segment at `remote` (as TransferRequest::target_offset).
struct Block {
  void* local = nullptr;
  uint64_t remote = 0;
  size_t length = 0;
};

// The same blocks as parallel arrays (numpy arrays, C callers): block i is
// local[i], remote[i], and lengths[i], or `block_length` for every block
// when `lengths` is null. The arrays are read during the call only.
struct BlockArrays {
  const uint64_t* local = nullptr;
  const uint64_t* remote = nullptr;
  const uint64_t* lengths = nullptr;
  uint64_t block_length = 0;
  size_t count = 0;
  RouteContract route;  // route.set: this block request's contract instead of the engine's
};

// `count` blocks of `block_length` bytes; block i lies at
// local_base + i * local_stride and remote_base + i * remote_stride.
// Strides equal to block_length on both sides make one contiguous range.
struct StridedBlocks {
  void* local_base = nullptr;
  uint64_t remote_base = 0;
  size_t block_length = 0;
  size_t local_stride = 0;
  size_t remote_stride = 0;
  size_t count = 0;
  RouteContract route;  // route.set: this block request's contract instead of the engine's
};

// A transfer plan: blocks validated once by prepareBlocks/prepareStrided,
// posted any number of times by postPlan.
using PlanID = uint64_t;
inline constexpr PlanID kInvalidPlan = 0;

struct PlanInfo {
  size_t blocks = 0;  // as given
  size_t runs = 0;    // after coalescing blocks contiguous on both sides
  uint64_t bytes = 0;
};

enum class TransferState : uint8_t {
  kWaiting = 0,    // accepted, nothing posted yet
  kPending = 1,    // in flight
  kCompleted = 2,  // every byte moved
  kFailed = 3,
  kTimeout = 4,
  kCanceled = 5,
  kInvalid = 6,
};

std::string_view stateName(TransferState s);
// True for COMPLETED and every failure state.
inline bool isTerminal(TransferState s) { return s >= TransferState::kCompleted; }
// How failure states rank when a task's slices (or a batch's tasks) end
// differently: FAILED 4 > TIMEOUT 3 > CANCELED 2 > INVALID 1; 0 otherwise.
int failureRank(TransferState s);

struct TransferStatus {
  TransferState s = TransferState::kWaiting;
  size_t transferred_bytes = 0;  // bytes of completed slices only
  Status error;                  // why, when s is a failure state
};

// One region for registerLocalMemoryBatch.
struct BufferEntry {
  void* addr = nullptr;
  size_t length = 0;
  std::string location = "*";  // "*" (ask the CUDA driver and the kernel), "cpu:N", "cuda:N"
  bool remote_accessible = true;
};

// One backing file of a file segment. The segment's logical space is its
// files concatenated in order.
struct FileDesc {
  std::string file_path;                              // default path
  uint64_t length = 0;                                // bytes of this file in the segment
  std::map<std::string, std::string> local_path_map;  // server name -> path on that host
};

// One buffer of an open segment as seen by a peer: for memory segments the
// remote virtual address range, for file segments one backing file's range
// in the logical space.
struct SegmentBuffer {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;  // "cpu:0", "cuda:1", or the file path for file segments
};

// A notification: a short message for the engine that owns a segment
// (TransferEngine::sendNotify, or submitTransfer with a notification:
// delivered only once every request of that submit COMPLETED). Both strings
// may hold any bytes.
struct Notification {
  std::string name;
  std::string message;
};

// The signal a submit carries (TransferEngine::submitTransfer with one; the
// receiver waits with waitSignal). Any bytes, at most signal.max_name_bytes.
struct Signal {
  std::string name;
};

// What a received notification is: the notification itself, or the news
// that a notifying submit failed (docs/signals.md).
enum class NotifyKind : uint8_t {
  kDelivered = 0,  // the notification: its submit completed (or sendNotify)
  kFailed = 1,     // its submit failed, was canceled, or its sender died or became unreachable: error says which
};

// A notification as its receiver drains it (TransferEngine::getNotifies).
struct ReceivedNotification {
  std::string peer;  // the sender's segment name (what the receiver would openSegment to reach it)
  std::string name;
  std::string message;  // empty for kFailed
  NotifyKind kind = NotifyKind::kDelivered;
  Status error;  // kFailed: why (the first failed request's code and message, or the sender lost)
};

// Where the notification of one notifying submit stands.
enum class NotifyState : uint8_t {
  kWaiting = 0,    // its transfer is not finished
  kSending = 1,    // the transfer completed; on its way (or queued behind earlier ones to that peer)
  kDelivered = 2,  // the receiver queued it
  kNotSent = 3,    // a request of the submit did not complete: never sent (error says which and why)
  kFailed = 4,     // the transfer completed but delivery failed (error: queue full, peer unreachable, ...)
};

std::string_view notifyStateName(NotifyState s);

// ---- signals (docs/signals.md) ------------------------------------------------------
// A signal is a name the application chooses (a request id) that submits to
// one peer carry; that peer's engine counts the requests of the signal that
// landed and tells a waiter (TransferEngine::waitSignal) how it ended.
enum class SignalState : uint8_t {
  kCompleted = 0,  // `expected` requests landed, their bytes in the receiver's memory
  kFailed = 1,     // a contributing request cannot complete (reason, error)
  kTimeout = 2,    // the deadline passed first
};

// Why a signal FAILED.
enum class SignalReason : uint8_t {
  kNone = 0,
  kTransferFailed = 1,  // a request of it failed at the initiator (FAILED or TIMEOUT)
  kCanceled = 2,        // the initiator canceled a request of it
  kRefused = 3,         // the target refused a range of it (withdrawn or never registered memory)
  kPeerLost = 4,        // the initiator died, restarted, became unreachable, or its frames were lost
  kOverflow = 5,        // the receiver's signal table was full (config signal.max_signals)
};

std::string_view signalStateName(SignalState s);
std::string_view signalReasonName(SignalReason r);

struct SignalResult {
  SignalState s = SignalState::kTimeout;
  SignalReason reason = SignalReason::kNone;
  std::string peer;     // the sender's segment name
  uint64_t landed = 0;  // requests of this signal that landed so far
  Status error;         // kFailed: the first failed request's code and message (or why the peer is lost)
};

struct NotifyStatus {
  NotifyState s = NotifyState::kWaiting;
  Status error;  // why, for kNotSent and kFailed
};

}  // namespace hawser
