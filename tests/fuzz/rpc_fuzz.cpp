// The control-plane listener's decoders (src/rpc/rpc.h) on bytes from the
// network: a connection's stream is a Hello, then control frames with their
// bodies; the client reads one reply frame. The input is read as such a
// stream. Invariants: a frame that passes checkFrame has a body within the
// bound it was checked against; a Hello passes only with the token wanted; a
// reply passes only when it answers the call and carries status 0, and a
// refusal's code is a known one.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "rpc/rpc.h"

using namespace hawser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const std::string want = (in.take<uint8_t>() & 1) ? "secret-token" : "";
  // The Hello.
  rpc::Frame hello = in.take<rpc::Frame>();
  Status s = rpc::checkFrame(hello, rpc::kMaxHelloBody);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Code::kRemoteError);
    return 0;
  }
  FUZZ_CHECK(hello.length <= rpc::kMaxHelloBody);
  std::string_view token = in.bytes(hello.length);
  s = rpc::checkHello(hello, token, want);
  if (s.ok()) FUZZ_CHECK(want.empty() || token == want);
  else FUZZ_CHECK(s.code() == Code::kRemoteError || s.code() == Code::kPermissionDenied);
  // Control frames, as serveControl reads them; then the same bytes as the
  // reply a client reads for method kPing, id 1.
  while (in.left() >= sizeof(rpc::Frame)) {
    rpc::Frame f = in.take<rpc::Frame>();
    s = rpc::checkFrame(f, rpc::kMaxControlBody);
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Code::kRemoteError && !s.message().empty());
      break;
    }
    FUZZ_CHECK(f.length <= rpc::kMaxControlBody);
    std::string_view body = in.bytes(f.length);
    s = rpc::checkReply(f, rpc::kPing, 1, body);
    if (s.ok()) {
      FUZZ_CHECK(f.status == 0 && f.type == (rpc::kPing | rpc::kReplyBit) && f.id == 1 && body.size() == f.length);
    } else {
      const auto c = static_cast<int32_t>(s.code());
      FUZZ_CHECK(c > 0 && c <= static_cast<int32_t>(Code::kInternal));
    }
  }
  return 0;
}
