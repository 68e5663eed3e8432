#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

std::string_view codeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kAddressOverlapped: return "address_overlapped";
    case Code::kNotRegistered: return "not_registered";
    case Code::kOutOfRange: return "out_of_range";
    case Code::kSegmentNotFound: return "segment_not_found";
    case Code::kInvalidBatch: return "invalid_batch";
    case Code::kCapacityExceeded: return "capacity_exceeded";
    case Code::kBatchBusy: return "batch_busy";
    case Code::kNoTransport: return "no_transport";
    case Code::kFileNotFound: return "file_not_found";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kPathNotMapped: return "path_not_mapped";
    case Code::kFileTooShort: return "file_too_short";
    case Code::kUnavailable: return "unavailable";
    case Code::kTimeout: return "timeout";
    case Code::kIoError: return "io_error";
    case Code::kRemoteError: return "remote_error";
    case Code::kMetadataError: return "metadata_error";
    case Code::kNotSupported: return "not_supported";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (ok()) return "ok";
  std::string s(codeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

std::string_view stateName(TransferState s) {
  switch (s) {
    case TransferState::kWaiting: return "WAITING";
    case TransferState::kPending: return "PENDING";
    case TransferState::kCompleted: return "COMPLETED";
    case TransferState::kFailed: return "FAILED";
    case TransferState::kTimeout: return "TIMEOUT";
    case TransferState::kCanceled: return "CANCELED";
    case TransferState::kInvalid: return "INVALID";
  }
  return "UNKNOWN";
}

}  // namespace hawser
