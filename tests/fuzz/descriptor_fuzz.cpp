// Segment descriptors (src/metadata/descriptor.h) as they come from a peer
// or etcd, and what the transports read from them: rdma's
// transports.rdma (NICs, rkeys) and nvlink's attrs.nvlink. Invariants: a
// decoded descriptor encodes to text that decodes to the same descriptor;
// every buffer is found by findBuffer at its own range; refusals are
// kMetadataError.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "metadata/descriptor.h"
#include "transport/nvlink/nvlink_internal.h"
#if HAWSER_HAVE_RDMA
#include "transport/rdma/rdma_peer.h"
#endif

using namespace hawser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  SegmentDesc d;
  Status s = decodeSegmentText(text, d);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Code::kMetadataError && !s.message().empty());
    return 0;
  }
  const std::string once = encodeSegmentText(d);
  SegmentDesc again;
  FUZZ_CHECK(decodeSegmentText(once, again).ok());
  FUZZ_CHECK(encodeSegmentText(again) == once);
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    const BufferDesc& b = d.buffers[i];
    FUZZ_CHECK(b.length > 0 && b.addr + b.length > b.addr);
    const int found = d.findBuffer(b.addr, b.length);
    FUZZ_CHECK(found >= 0);
    const BufferDesc& f = d.buffers[static_cast<size_t>(found)];
    FUZZ_CHECK(f.addr <= b.addr && b.addr - f.addr <= f.length && b.length <= f.length - (b.addr - f.addr));
    (void)d.findBuffer(b.addr + b.length, 1);
    if (i > 0) FUZZ_CHECK(d.buffers[i - 1].addr <= b.addr);
    nvlink::BufferInfo info;
    std::string bus;
    if (nvlink::decodeBufferAttrs(b, info, bus)) {
      FUZZ_CHECK(info.handle.size() == 64 && b.addr >= info.base && b.length <= info.size &&
                 b.addr - info.base <= info.size - b.length);
      FUZZ_CHECK(info.slot < nvlink::kTableSlots);  // its bit lies in a reader's bitmap
    } else {
      FUZZ_CHECK(!info.why.empty());
    }
  }
  (void)d.fileSpan();
#if HAWSER_HAVE_RDMA
  if (d.kind == SegmentDesc::Kind::kMemory) {
    rdma::Peer peer;
    std::vector<rdma::RemoteBuffer> bufs;
    RouteDecline why;
    if (rdma::decodePeer(d, peer, bufs, why).ok()) {
      FUZZ_CHECK(!peer.nics.empty() && bufs.size() == d.buffers.size());
      for (const auto& rb : bufs) FUZZ_CHECK(rb.refusal.ok() ? rb.rkeys.size() == peer.nics.size() : rb.rkeys.empty());
    }
  }
#endif
  return 0;
}
