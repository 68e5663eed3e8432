// The example transport in tests/transports/loopback/ is built from its
// folder alone, registered before init, selected by its cost rank, and
// moves verified bytes through the public API.
#include <gtest/gtest.h>

#include "base/transport.h"
#include "common/util.h"
#include "engine/transport_list.h"
#include "hawser/engine.h"

namespace hawser {
std::unique_ptr<Transport> makeLoopbackTransport();
}

using namespace hawser;
using namespace hawser::test;

TEST(ExampleTransport, a_transport_built_from_its_folder_alone_carries_verified_bytes) {
  ScopedTransportFactory loopback({"loopback", &makeLoopbackTransport});
  TransferEngine target, init;
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0).ok());
  ASSERT_TRUE(init.init("p2p", "init", "127.0.0.1", 0).ok());
  ASSERT_EQ(init.transports().front(), "loopback");  // rank 5: cheaper than every built-in one
  Buffer remote(1 << 20), local(1 << 20);
  fillPattern(remote.p, remote.n, 11);
  ASSERT_TRUE(target.registerLocalMemory(remote.p, remote.n).ok());
  ASSERT_TRUE(init.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  SegmentID seg;
  ASSERT_TRUE(init.openSegment(target.segmentName(), seg).ok());
  RouteExplanation why;
  ASSERT_TRUE(init.explainRoute(seg, "cpu:0", why).ok());
  EXPECT_EQ(why.transport, "loopback") << why.why;
  const auto base = reinterpret_cast<uint64_t>(remote.p);
  Status s = init.transferSync({{OpCode::kRead, local.p, seg, base, local.n / 2},
                                {OpCode::kRead, local.p + local.n / 2, seg, base + local.n / 2, local.n / 2}},
                               std::chrono::seconds(10));
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(checkPattern(local.p, local.n, 11), -1);
  uint64_t bytes = 0;
  for (auto& t : init.stats().transports)
    if (t.transport == "loopback")
      for (auto& [k, v] : t.counters)
        if (k == "bytes") bytes = v;
  EXPECT_EQ(bytes, local.n);
}
