// The rdma handshake's messages (src/transport/rdma/rdma_connect.h), as the
// passive side reads a request and the active side a reply. Invariants: a
// refusal is kInvalidArgument with a message; a decoded message encodes to
// text that decodes to the same message.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "transport/rdma/rdma_connect.h"

using namespace hawser;
using namespace hawser::rdma;

namespace {

bool sameQps(const QpSet& a, const QpSet& b) {
  return a.qpn == b.qpn && a.psn == b.psn && std::memcmp(a.gid.raw, b.gid.raw, sizeof(a.gid.raw)) == 0 &&
         a.lid == b.lid && a.mtu == b.mtu;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  HandshakeRequest req;
  Status s = decode(text, req);
  if (s.ok()) {
    HandshakeRequest back;
    FUZZ_CHECK(decode(encode(req), back).ok());
    FUZZ_CHECK(back.from == req.from && back.instance == req.instance && back.key == req.key &&
               back.local_nic == req.local_nic && back.peer_nic == req.peer_nic &&
               back.peer_instance == req.peer_instance && back.link_layer == req.link_layer &&
               sameQps(back.qps, req.qps));
  } else {
    FUZZ_CHECK(s.code() == Code::kInvalidArgument && !s.message().empty());
  }
  HandshakeReply rep;
  s = decode(text, rep);
  if (s.ok()) {
    HandshakeReply back;
    FUZZ_CHECK(decode(encode(rep), back).ok());
    FUZZ_CHECK(back.nic == rep.nic && sameQps(back.qps, rep.qps));
  } else {
    FUZZ_CHECK(s.code() == Code::kInvalidArgument && !s.message().empty());
  }
  return 0;
}
