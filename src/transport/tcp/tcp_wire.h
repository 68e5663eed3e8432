// Wire format of the tcp transport's data connections.
//
// A data connection is an rpc-listener connection of kind kTcpDataChannel
// (Hello frame first, see rpc/rpc.h); after the Hello, both directions carry
// messages of one fixed 32-byte header, optionally followed by `length`
// bytes:
//
//   initiator -> target   READ_REQ   (length 0)          read `size` bytes at `addr`
//                         WRITE_REQ  (length == size)    payload to store at `addr`
//                         READ_RUNS_REQ  (length == 16 x runs)
//                                    a run table of `addr` runs (RunEntry:
//                                    target address + length each) whose
//                                    lengths add up to `size`
//                         WRITE_RUNS_REQ (length == 16 x runs + size)
//                                    the run table, then the payload of
//                                    every run, in table order
//   target -> initiator   READ_RESP  status 0: `length` == size bytes of data
//                                    status !=0: `length` bytes of reason text
//                         WRITE_RESP status 0: length 0 (the bytes are in memory)
//                                    status !=0: `length` bytes of reason text
//                         READ_RUNS_RESP, WRITE_RUNS_RESP: the same for a
//                                    RUNS request (the data of every run in
//                                    table order); an error refuses the
//                                    whole frame, its reason naming the
//                                    first run at fault
//
// The target answers the requests of one connection in order, one response
// per request, echoing `id`. All fields are little-endian. A peer serves the
// RUNS requests when its descriptor's tcp attributes carry "max_runs" >= 2
// (the most runs one frame may carry there); an initiator sends them to no
// other peer, so peers without them keep working (docs/tcp.md "Wire format").
//
// Requests bound to a registration: a request of version 2 (any of the four
// types) carries, right after its header and counted in `length`, the
// number of the target's registration every byte it addresses lies in
// (RequestHeader::seq: the BufferDesc::seq of the buffer the initiator's
// descriptor named). The target serves it only from that registration: a
// range registered again meanwhile is another registration, and the request
// is refused (kOutOfRange). A peer takes version-2 requests when its
// descriptor's tcp attributes say "version" >= 2; responses are version 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hawser/status.h"

namespace hawser::tcp {

inline constexpr uint32_t kWireMagic = 0x44545748;  // "HWTD" little-endian
// Responses, and requests bound to no registration.
inline constexpr uint16_t kWireVersion = 1;
// Requests bound to one registration (followed by its number).
inline constexpr uint16_t kBoundVersion = 2;
inline constexpr uint32_t kHeaderSize = 32;
// The registration number a version-2 request carries after its header.
inline constexpr uint32_t kBindingSize = 8;
// Longest reason text in an error response.
inline constexpr uint32_t kMaxReason = 1024;
// Hard upper bound of tcp.max_frame (payload bytes of one message).
inline constexpr uint64_t kMaxFrameLimit = 1ull << 30;
// Most runs one RUNS request carries (published as "max_runs").
inline constexpr uint32_t kMaxFrameRuns = 1024;

enum MsgType : uint8_t {
  kReadReq = 1,
  kWriteReq = 2,
  kReadResp = 3,
  kWriteResp = 4,
  kReadRunsReq = 5,
  kWriteRunsReq = 6,
  kReadRunsResp = 7,
  kWriteRunsResp = 8,
};

inline bool isRunsType(uint8_t type) { return type >= kReadRunsReq && type <= kWriteRunsResp; }
inline bool isReadRequest(uint8_t type) { return type == kReadReq || type == kReadRunsReq; }
// The response type of a request type (READ_REQ -> READ_RESP, ...).
inline uint8_t responseTo(uint8_t request) { return static_cast<uint8_t>(request + 2); }

// Every field is naturally aligned: no packing needed, no padding present.
struct alignas(8) WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint8_t type = 0;    // MsgType
  uint8_t status = 0;  // hawser::Code in responses, 0 in requests
  uint32_t length = 0; // bytes that follow this header
  uint32_t size = 0;   // bytes addressed at `addr` (requests; echoed in OK responses)
  uint64_t id = 0;     // request id, echoed in the response
  uint64_t addr = 0;   // target virtual address (READ_REQ, WRITE_REQ); runs in the table (RUNS requests); 0 in responses
};
static_assert(sizeof(WireHeader) == kHeaderSize);
static_assert(offsetof(WireHeader, length) == 8 && offsetof(WireHeader, id) == 16 && offsetof(WireHeader, addr) == 24);

// A request as it leaves the initiator: the header and, for version 2, the
// registration it is bound to (sent only then: bindingBytes()).
struct alignas(8) RequestHeader : WireHeader {
  uint64_t seq = 0;  // the target's registration (BufferDesc::seq); 0: bound to none (version 1)
};
static_assert(sizeof(RequestHeader) == kHeaderSize + kBindingSize);

// Bytes of binding that follow the header `h` of a request.
inline uint32_t bindingBytes(const WireHeader& h) { return h.version == kBoundVersion ? kBindingSize : 0; }

// One run of a RUNS request's table.
struct alignas(8) RunEntry {
  uint64_t addr = 0;  // target virtual address
  uint32_t len = 0;   // bytes, >= 1
  uint32_t zero = 0;  // reserved, 0
};
static_assert(sizeof(RunEntry) == 16);

// Bytes of the run table of a RUNS request of `runs` runs.
inline constexpr uint64_t runTableBytes(uint64_t runs) { return runs * sizeof(RunEntry); }

// The decode steps (tcp_wire.cpp), apart from the socket I/O; fuzzed by
// tests/fuzz/tcp_wire_fuzz.cpp.
//
// Target side: is `h` a well-formed request whose payload fits `max_frame`
// (a RUNS request: 1..kMaxFrameRuns runs, `length` the binding of a
// version-2 request, the table and, for a write, the payload)? The message names the offending field; the
// connection must be closed.
Status checkRequest(const WireHeader& h, uint64_t max_frame);

// Target side, after checkRequest accepted the RUNS request `h`: is its run
// table well formed (every run at least one byte, the reserved word 0, the
// lengths adding up to h.size)? The message names the first bad run; the
// connection must be closed. Whether the runs lie in memory the target
// serves is the target's own check (a refusal, not a malformed frame).
Status checkRunTable(const WireHeader& h, const RunEntry* runs);

// Initiator side: the request whose response comes next on a connection.
struct Awaited {
  bool any = false;  // false: no request awaits a response
  uint64_t id = 0;
  bool is_read = false;
  uint32_t len = 0;   // bytes the request addresses
  bool runs = false;  // a RUNS request
};
// The response type that answers `want`.
uint8_t responseType(const Awaited& want);
// Is `h` a well-formed response to `want`: an OK one of the matching type
// carrying exactly the request's bytes (reads) or none (writes), or an error
// one with a known code and at most kMaxReason bytes of reason? kRemoteError
// naming the offending field otherwise; the connection must be closed.
Status checkResponse(const WireHeader& h, const Awaited& want);

// Human-readable name of a message type ("READ_REQ", ...).
const char* typeName(uint8_t type);

}  // namespace hawser::tcp
