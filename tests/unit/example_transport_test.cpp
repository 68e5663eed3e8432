// The example transport in tests/transports/loopback/ is built from its
// folder alone, registered before init with its knobs, selected by its cost
// rank, and moves verified bytes through the public API, cut as its knob
// says.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/knob_registry.h"
#include "base/transport.h"
#include "common/util.h"
#include "engine/transport_list.h"
#include "hawser/config.h"
#include "hawser/engine.h"
#include "loopback_config.h"

namespace hawser {
std::unique_ptr<Transport> makeLoopbackTransport();
}

using namespace hawser;
using namespace hawser::test;

TEST(ExampleTransport, a_transport_built_from_its_folder_alone_carries_verified_bytes) {
  ScopedTransportFactory loopback({"loopback", &makeLoopbackTransport, kLoopbackKnobs});
  ASSERT_TRUE(loopback.status().ok()) << loopback.status().toString();
  TransferEngine target, init;
  EngineOptions o;
  o.config["loopback.max_copy"] = "256K";  // 512K tasks: two slices each
  o.config["loopback.workers"] = "2";
  ASSERT_TRUE(target.init("p2p", "target", "127.0.0.1", 0).ok());
  ASSERT_TRUE(init.init("p2p", "init", "127.0.0.1", 0, o).ok());
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
  uint64_t bytes = 0, copies = 0;
  for (auto& t : init.stats().transports)
    if (t.transport == "loopback")
      for (auto& [k, v] : t.counters) {
        if (k == "bytes") bytes = v;
        if (k == "copies") copies = v;
      }
  EXPECT_EQ(bytes, local.n);
  EXPECT_EQ(copies, 4u);  // loopback.max_copy=256K: 2 tasks x 2 slices
}

bool listed(const std::string& key) {
  auto keys = configKeys();  // what `hawser config` prints
  return std::any_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return k.key == key; });
}

// Its knobs are part of the one config system exactly while it is registered:
// listed, validated (a bad value fails init naming the key), and unknown
// (init refuses the key) when it is not.
TEST(ExampleTransport, its_knobs_are_keys_only_while_it_is_registered) {
  EXPECT_FALSE(listed("loopback.max_copy"));
  EngineOptions o;
  o.config["loopback.max_copy"] = "1M";
  {
    TransferEngine e;
    Status s = e.init("p2p", "no-loopback", "127.0.0.1", 0, o);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("'loopback.max_copy'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("not a hawser config key"), std::string::npos) << s.message();
  }
  {
    ScopedTransportFactory loopback({"loopback", &makeLoopbackTransport, kLoopbackKnobs});
    ASSERT_TRUE(loopback.status().ok()) << loopback.status().toString();
    EXPECT_TRUE(listed("loopback.max_copy"));
    EXPECT_TRUE(listed("loopback.workers"));
    const Knob* k = findKnobByEnv("HAWSER_LOOPBACK_WORKERS");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k, &kLoopbackKnobs[0]);  // the folder's own row, not a copy
    TransferEngine e;
    EXPECT_TRUE(e.init("p2p", "loopback", "127.0.0.1", 0, o).ok());
    EngineOptions bad;
    bad.config["loopback.workers"] = "17";
    TransferEngine f;
    Status s = f.init("p2p", "bad-loopback", "127.0.0.1", 0, bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("loopback.workers (env HAWSER_LOOPBACK_WORKERS) = '17'"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("an integer in [1, 16]"), std::string::npos) << s.message();
    // A second table with one of its keys is refused, naming it.
    ScopedTransportFactory twin({"twin", &makeLoopbackTransport, kLoopbackKnobs});
    EXPECT_EQ(twin.status().code(), Code::kInvalidArgument);
    EXPECT_NE(twin.status().message().find("loopback.workers"), std::string::npos) << twin.status().message();
  }
  EXPECT_FALSE(listed("loopback.workers"));
  EXPECT_EQ(findKnob("loopback.workers"), nullptr);
}
