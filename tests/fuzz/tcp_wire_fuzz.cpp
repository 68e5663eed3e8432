// The tcp transport's wire decoders (src/transport/tcp/tcp_wire.h) on
// headers from the network: the target's request check (and, for an
// accepted RUNS request, its run-table check on the table that follows it in
// the input) and the initiator's response check against a request the input
// also chooses. Input: [max_frame u32] [flags u8: 1 a request awaits, 2 a
// read, 4 a RUNS request] [id u64] [len u32], then headers, each accepted
// request of version 2 followed by its registration number (u64), each
// accepted RUNS request then by its table. Invariants: an accepted request
// (version 1, or 2: bound to a registration, whose number it carries)
// addresses 1..max_frame bytes and carries exactly its binding and payload
// (writes) or binding alone (reads), a RUNS request 1..kMaxFrameRuns runs and its table; an
// accepted table has runs of at least one byte, reserved words 0, lengths
// adding up to the request's size; an accepted response answers the awaited
// request with its type and exactly its bytes, or is an error with a known
// code and a bounded reason.
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "transport/tcp/tcp_wire.h"

using namespace hawser;
using namespace hawser::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint64_t max_frame = (in.take<uint32_t>() % kMaxFrameLimit) + 1;
  Awaited want;
  const uint8_t flags = in.take<uint8_t>();
  want.any = flags & 1;
  want.is_read = flags & 2;
  want.runs = flags & 4;
  want.id = in.take<uint64_t>();
  want.len = in.take<uint32_t>();
  while (in.left() > 0) {
    const WireHeader h = in.take<WireHeader>();
    Status s = checkRequest(h, max_frame);
    if (s.ok()) {
      FUZZ_CHECK(h.magic == kWireMagic && (h.version == kWireVersion || h.version == kBoundVersion) && h.status == 0);
      FUZZ_CHECK(h.size >= 1 && h.size <= max_frame);
      const uint64_t bound = h.version == kBoundVersion ? kBindingSize : 0;
      if (bound) (void)in.take<uint64_t>();  // the registration: any number is a well-formed one
      if (isRunsType(h.type)) {
        FUZZ_CHECK(h.addr >= 1 && h.addr <= kMaxFrameRuns);
        FUZZ_CHECK(h.length == bound + runTableBytes(h.addr) + (h.type == kWriteRunsReq ? h.size : 0));
        std::vector<RunEntry> table(h.addr);
        for (RunEntry& r : table) r = in.take<RunEntry>();
        Status t = checkRunTable(h, table.data());
        if (t.ok()) {
          uint64_t sum = 0;
          for (const RunEntry& r : table) {
            FUZZ_CHECK(r.len >= 1 && r.zero == 0);
            sum += r.len;
          }
          FUZZ_CHECK(sum == h.size);
        } else {
          FUZZ_CHECK(t.code() == Code::kRemoteError && !t.message().empty());
        }
      } else {
        FUZZ_CHECK(h.type == kReadReq ? h.length == bound : (h.type == kWriteReq && h.length == h.size + bound));
      }
    } else {
      FUZZ_CHECK(s.code() == Code::kRemoteError && !s.message().empty());
    }
    s = checkResponse(h, want);
    if (s.ok()) {
      FUZZ_CHECK(want.any && h.id == want.id && h.type == responseType(want));
      FUZZ_CHECK(isRunsType(h.type) == want.runs);
      if (h.status == 0) FUZZ_CHECK(h.size == want.len && h.length == (want.is_read ? want.len : 0));
      else FUZZ_CHECK(h.status <= static_cast<uint8_t>(Code::kInternal) && h.length <= kMaxReason);
    } else {
      FUZZ_CHECK(s.code() == Code::kRemoteError && !s.message().empty());
    }
    FUZZ_CHECK(typeName(h.type) != nullptr);
  }
  return 0;
}
