// The tcp wire's decode steps (tcp_wire.h): what a target accepts as a
// request and an initiator as a response.
#include "transport/tcp/tcp_wire.h"

#include <fmt/format.h>

namespace hawser::tcp {

const char* typeName(uint8_t type) {
  switch (type) {
    case kReadReq: return "READ_REQ";
    case kWriteReq: return "WRITE_REQ";
    case kReadResp: return "READ_RESP";
    case kWriteResp: return "WRITE_RESP";
    case kReadRunsReq: return "READ_RUNS_REQ";
    case kWriteRunsReq: return "WRITE_RUNS_REQ";
    case kReadRunsResp: return "READ_RUNS_RESP";
    case kWriteRunsResp: return "WRITE_RUNS_RESP";
    default: return "UNKNOWN";
  }
}

Status checkRequest(const WireHeader& h, uint64_t max_frame) {
  if (h.magic != kWireMagic) return {Code::kRemoteError, fmt::format("bad magic {:#010x}", h.magic)};
  if (h.version != kWireVersion && h.version != kBoundVersion)
    return {Code::kRemoteError, fmt::format("unsupported version {}", h.version)};
  if (h.type != kReadReq && h.type != kWriteReq && h.type != kReadRunsReq && h.type != kWriteRunsReq)
    return {Code::kRemoteError, fmt::format("unexpected message type {} in a request", h.type)};
  if (h.status != 0) return {Code::kRemoteError, fmt::format("{} has status {} (must be 0)", typeName(h.type), h.status)};
  if (h.size == 0) return {Code::kRemoteError, fmt::format("{} has size 0", typeName(h.type))};
  if (h.size > max_frame)
    return {Code::kRemoteError,
            fmt::format("{} size {} exceeds tcp.max_frame {}", typeName(h.type), h.size, max_frame)};
  const uint32_t bound = bindingBytes(h);
  if (isRunsType(h.type)) {
    if (h.addr == 0 || h.addr > kMaxFrameRuns)
      return {Code::kRemoteError,
              fmt::format("{} carries {} runs (must be 1..{})", typeName(h.type), h.addr, kMaxFrameRuns)};
    const uint64_t want = bound + runTableBytes(h.addr) + (h.type == kWriteRunsReq ? h.size : 0);
    if (h.length != want)
      return {Code::kRemoteError, fmt::format("{} of {} runs and {} bytes has length {} (must be {})",
                                              typeName(h.type), h.addr, h.size, h.length, want)};
    return Status::OK();
  }
  if (h.type == kReadReq && h.length != bound)
    return {Code::kRemoteError,
            fmt::format("READ_REQ of version {} has length {} (must be {})", h.version, h.length, bound)};
  if (h.type == kWriteReq && h.length != uint64_t{h.size} + bound)
    return {Code::kRemoteError,
            fmt::format("WRITE_REQ of version {} has length {} where its size is {}", h.version, h.length, h.size)};
  return Status::OK();
}

Status checkRunTable(const WireHeader& h, const RunEntry* runs) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < h.addr; ++i) {
    const RunEntry& r = runs[i];
    if (r.len == 0) return {Code::kRemoteError, fmt::format("{} run {} of {} has length 0", typeName(h.type), i, h.addr)};
    if (r.zero != 0)
      return {Code::kRemoteError, fmt::format("{} run {} of {} has reserved word {} (must be 0)", typeName(h.type), i,
                                              h.addr, r.zero)};
    sum += r.len;
    if (sum > h.size)
      return {Code::kRemoteError, fmt::format("{} runs 0..{} of {} add up to {} bytes, more than its size {}",
                                              typeName(h.type), i, h.addr, sum, h.size)};
  }
  if (sum != h.size)
    return {Code::kRemoteError,
            fmt::format("{} runs add up to {} bytes where its size is {}", typeName(h.type), sum, h.size)};
  return Status::OK();
}

uint8_t responseType(const Awaited& want) {
  if (want.runs) return want.is_read ? kReadRunsResp : kWriteRunsResp;
  return want.is_read ? kReadResp : kWriteResp;
}

Status checkResponse(const WireHeader& h, const Awaited& want) {
  auto bad = [](std::string why) { return Status(Code::kRemoteError, std::move(why)); };
  if (h.magic != kWireMagic) return bad(fmt::format("bad magic {:#010x}", h.magic));
  if (h.version != kWireVersion) return bad(fmt::format("unsupported version {}", h.version));
  if (!want.any) return bad(fmt::format("{} id {} with no request awaiting a response", typeName(h.type), h.id));
  if (h.id != want.id) return bad(fmt::format("response id {} where {} was expected", h.id, want.id));
  if (h.type != responseType(want)) {
    const uint8_t req = want.runs ? (want.is_read ? kReadRunsReq : kWriteRunsReq) : (want.is_read ? kReadReq : kWriteReq);
    return bad(fmt::format("{} answers a {}", typeName(h.type), typeName(req)));
  }
  if (h.status == 0 && (h.length != (want.is_read ? want.len : 0) || h.size != want.len))
    return bad(fmt::format("{} length {} size {} for a {}-byte request", typeName(h.type), h.length, h.size, want.len));
  if (h.status != 0 && (h.status > static_cast<uint8_t>(Code::kInternal) || h.length > kMaxReason))
    return bad(fmt::format("error response with status {} and {} reason bytes", h.status, h.length));
  return Status::OK();
}

}  // namespace hawser::tcp
