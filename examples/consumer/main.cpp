// Writes a buffer into this engine's own segment and reads it back.
#include <hawser/engine.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  hawser::TransferEngine engine;
  hawser::Status s = engine.init("p2p", "consumer", "127.0.0.1", 0);
  if (!s.ok()) return std::printf("init: %s\n", s.toString().c_str()), 1;
  std::vector<char> target(1 << 20), src(1 << 20, 'x'), dst(1 << 20);
  for (auto* b : {&target, &src, &dst})
    if (!(s = engine.registerLocalMemory(b->data(), b->size())).ok())
      return std::printf("register: %s\n", s.toString().c_str()), 1;
  hawser::SegmentID seg;
  if (!(s = engine.openSegment(engine.segmentName(), seg)).ok()) return std::printf("open: %s\n", s.toString().c_str()), 1;
  hawser::BatchID b;
  (void)engine.allocateBatchID(2, b);
  auto remote = reinterpret_cast<uint64_t>(target.data());
  s = engine.submitTransfer(b, {{hawser::OpCode::kWrite, src.data(), seg, remote, src.size()}});
  if (s.ok()) s = engine.waitTransfer(b, std::chrono::seconds(10));
  if (s.ok()) s = engine.submitTransfer(b, {{hawser::OpCode::kRead, dst.data(), seg, remote, dst.size()}});
  if (s.ok()) s = engine.waitTransfer(b, std::chrono::seconds(10));
  hawser::TransferStatus st;
  if (s.ok()) s = engine.getBatchTransferStatus(b, st);
  (void)engine.freeBatchID(b);
  if (!s.ok() || st.s != hawser::TransferState::kCompleted || std::memcmp(src.data(), dst.data(), src.size()) != 0)
    return std::printf("transfer failed: %s\n", s.toString().c_str()), 1;
  std::printf("consumer: 1 MiB round trip verified\n");
  return 0;
}
