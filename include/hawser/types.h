// hawser — request, status and descriptor types of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
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

// One request: move `length` bytes between local registered memory at
// `source` and the target segment at `target_offset` (memory segments: the
// remote virtual address; file segments: the logical offset).
struct TransferRequest {
  OpCode opcode = OpCode::kRead;
  void* source = nullptr;
  SegmentID target_id = kInvalidSegment;
  uint64_t target_offset = 0;
  size_t length = 0;
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

// A notification as its receiver drains it (TransferEngine::getNotifies).
struct ReceivedNotification {
  std::string peer;  // the sender's segment name (what the receiver would openSegment to reach it)
  std::string name;
  std::string message;
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

struct NotifyStatus {
  NotifyState s = NotifyState::kWaiting;
  Status error;  // why, for kNotSent and kFailed
};

}  // namespace hawser
