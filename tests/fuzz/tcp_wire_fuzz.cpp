// The tcp transport's wire decoders (src/transport/tcp/tcp_wire.h) on
// headers from the network: the target's request check and the initiator's
// response check against a request the input also chooses. Invariants: an
// accepted request addresses 1..max_frame bytes and carries exactly its
// payload (writes) or none (reads); an accepted response answers the awaited
// request with exactly its bytes, or is an error with a known code and a
// bounded reason.
#include <cstdint>

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
  want.id = in.take<uint64_t>();
  want.len = in.take<uint32_t>();
  while (in.left() > 0) {
    const WireHeader h = in.take<WireHeader>();
    Status s = checkRequest(h, max_frame);
    if (s.ok()) {
      FUZZ_CHECK(h.magic == kWireMagic && h.version == kWireVersion && h.status == 0);
      FUZZ_CHECK(h.size >= 1 && h.size <= max_frame);
      FUZZ_CHECK(h.type == kReadReq ? h.length == 0 : (h.type == kWriteReq && h.length == h.size));
    } else {
      FUZZ_CHECK(s.code() == Code::kRemoteError && !s.message().empty());
    }
    s = checkResponse(h, want);
    if (s.ok()) {
      FUZZ_CHECK(want.any && h.id == want.id && h.type == (want.is_read ? kReadResp : kWriteResp));
      if (h.status == 0) FUZZ_CHECK(h.size == want.len && h.length == (want.is_read ? want.len : 0));
      else FUZZ_CHECK(h.status <= static_cast<uint8_t>(Code::kInternal) && h.length <= kMaxReason);
    } else {
      FUZZ_CHECK(s.code() == Code::kRemoteError && !s.message().empty());
    }
    FUZZ_CHECK(typeName(h.type) != nullptr);
  }
  return 0;
}
