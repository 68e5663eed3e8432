#include "common/engine_pair.h"

namespace hawser::test {

EnginePair::EnginePair(size_t target_bytes, size_t local_bytes, bool fake, size_t fake_slice)
    : target_mem(target_bytes), local_mem(local_bytes) {
  auto& s = setup_status;
  s = target.init("p2p", "target", "127.0.0.1", 0);
  if (s.ok()) s = init.init("p2p", "initiator", "127.0.0.1", 0);
  if (s.ok() && fake) {
    auto a = std::make_unique<FakeTransport>(fake_slice);
    auto b = std::make_unique<FakeTransport>(fake_slice);
    fake_target = a.get();
    fake_init = b.get();
    s = detail::EngineAccess::of(target).installTransport(std::move(a));
    if (s.ok()) s = detail::EngineAccess::of(init).installTransport(std::move(b));
  }
  if (s.ok()) s = target.registerLocalMemory(target_mem.p, target_mem.n, "cpu:0", true);
  if (s.ok()) s = init.registerLocalMemory(local_mem.p, local_mem.n, "cpu:0", false);
  if (s.ok()) s = init.openSegment(target.segmentName(), seg);
}

}  // namespace hawser::test
