// Every transport's part of a peer's descriptor, as openPeer decodes it:
// the input is a descriptor's JSON text (as it comes from a peer or a
// store); one that the metadata codec takes is handed to the descriptor
// decoder of every transport factory (engine/transport_list.h), built in or
// registered, without naming any. Invariants: a decoder never throws or
// crashes; it decides the same way twice; a refusal is kNotSupported with a
// message, and its route reason says why in the same words.
#include <cstdint>
#include <string>

#include "engine/transport_list.h"
#include "fuzz_util.h"
#include "metadata/descriptor.h"

using namespace hawser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<TransportFactory> factories = transportFactories();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  SegmentDesc d;
  if (!decodeSegmentText(text, d).ok()) return 0;
  for (const TransportFactory& f : factories) {
    if (!f.decodePeer) continue;
    RouteDecline why;
    const Status s = f.decodePeer(d, why);
    if (s.ok()) {
      FUZZ_CHECK(!why.declined());
    } else {
      FUZZ_CHECK(s.code() == Code::kNotSupported && !s.message().empty());
      FUZZ_CHECK(why.declined() && why.text == s.message());
    }
    RouteDecline again;
    const Status t = f.decodePeer(d, again);
    FUZZ_CHECK(t.code() == s.code() && t.message() == s.message() && again.reason == why.reason);
  }
  return 0;
}
