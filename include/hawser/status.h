// hawser — Status: the result of every public call.
//
// A Status carries a code from a small closed set (who is at fault and what
// kind of fault) and a message naming the argument and the value at fault.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hawser {

enum class Code : int32_t {
  kOk = 0,
  // Caller input.
  kInvalidArgument = 1,     // a bad value (zero length, null pointer, bad URI, bad size)
  kAddressOverlapped = 2,   // registration overlaps a registered region
  kNotRegistered = 3,       // local address/range not inside one registered region
  kOutOfRange = 4,          // remote range not inside one remote-accessible buffer / file coverage
  kSegmentNotFound = 5,     // unknown segment name or id
  kInvalidBatch = 6,        // unknown, stale, forged or already freed batch id
  kCapacityExceeded = 7,    // batch capacity (tasks or slices) would be exceeded
  kBatchBusy = 8,           // batch still has unfinished work
  kNoTransport = 9,         // no installed transport can serve this request
  // Files.
  kFileNotFound = 10,       // backing file missing
  kPermissionDenied = 11,   // backing file not readable/writable
  kPathNotMapped = 12,      // no local path for this host in the file's local_path_map
  kFileTooShort = 13,       // backing file shorter than its declared length
  // System / network.
  kUnavailable = 14,        // peer or service unreachable, connection lost
  kTimeout = 15,            // an operation did not finish in time
  kIoError = 16,            // an I/O or device error reported by the kernel or hardware
  kRemoteError = 17,        // the peer refused the request (reply carries its reason)
  kMetadataError = 18,      // malformed/unsupported descriptor, metadata store error
  kNotSupported = 19,       // feature not available on this build or host
  kInternal = 20,           // a bug in hawser
};

// Stable lowercase name of a code ("invalid_argument", ...).
std::string_view codeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code_name: message", or "ok".
  std::string toString() const;

  bool operator==(Code c) const { return code_ == c; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace hawser
