// The control listener's frame receiver (src/rpc/frame_reader.h) on a byte
// stream that arrives in pieces of any size: the partial-frame paths. Input:
// [limit u8: 0 -> kMaxHelloBody, 1 -> kMaxControlBody, else 100]
// [cuts u8 = N] [N piece sizes, u16 each] [the stream]. The stream is fed in
// pieces of those sizes (cycling; 0 reads as 1), each at most what want()
// offers. Invariants: the frames received are exactly those of the stream
// decoded whole (checkFrame against the limit, then `length` body bytes), in
// order, and a refusal comes exactly where the whole decode refuses; the
// reader never asks for a byte past the frame it is in; the memory it holds
// stays within twice what came plus two chunks, whatever the headers
// announce.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "rpc/frame_reader.h"
#include "rpc/rpc.h"

using namespace hawser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t which = in.take<uint8_t>();
  const uint32_t limit = which == 0 ? rpc::kMaxHelloBody : which == 1 ? rpc::kMaxControlBody : 100;
  std::vector<uint16_t> cuts(in.take<uint8_t>());
  for (auto& c : cuts) c = in.take<uint16_t>();
  if (cuts.empty()) cuts.push_back(1);
  const std::string_view stream = in.rest();

  rpc::FrameReader r(limit);
  size_t pos = 0;        // bytes of the stream fed
  size_t frame_at = 0;   // where the current frame starts in the stream
  size_t cut = 0;
  while (pos < stream.size()) {
    std::span<char> want = r.want();
    FUZZ_CHECK(!want.empty());  // not ready: it wants bytes
    FUZZ_CHECK(want.size() <= std::max<size_t>(rpc::FrameReader::kChunk, sizeof(rpc::Frame)));
    size_t k = std::max<size_t>(1, cuts[cut++ % cuts.size()]);
    k = std::min({k, want.size(), stream.size() - pos});
    std::memcpy(want.data(), stream.data() + pos, k);
    pos += k;
    Status s = r.got(k);
    // The same bytes decoded whole.
    if (pos - frame_at == sizeof(rpc::Frame)) {
      rpc::Frame f;
      std::memcpy(&f, stream.data() + frame_at, sizeof(f));
      Status whole = rpc::checkFrame(f, limit);
      FUZZ_CHECK(whole.ok() == s.ok());
      if (!s.ok()) {
        FUZZ_CHECK(s.code() == Code::kRemoteError && s.message() == whole.message());
        return 0;
      }
    } else {
      FUZZ_CHECK(s.ok());
    }
    FUZZ_CHECK(r.received() == pos - frame_at);
    FUZZ_CHECK(r.held() <= 2 * r.received() + 2 * rpc::FrameReader::kChunk);
    if (r.ready()) {
      rpc::Frame f;
      std::memcpy(&f, stream.data() + frame_at, sizeof(f));
      FUZZ_CHECK(std::memcmp(&f, &r.frame(), sizeof(f)) == 0);
      FUZZ_CHECK(f.length <= limit);
      FUZZ_CHECK(pos == frame_at + sizeof(f) + f.length);  // nothing of the next frame was taken
      FUZZ_CHECK(r.body() == stream.substr(frame_at + sizeof(f), f.length));
      frame_at = pos;
      r.next();
      FUZZ_CHECK(!r.started() && r.received() == 0);
    } else {
      FUZZ_CHECK(r.started());
    }
  }
  return 0;
}
