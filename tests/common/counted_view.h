// A segment view whose one route's peer counts the live ones: what the
// open segments and the batches that keep views hold shows in the count
// (tests/unit/open_segments_test.cpp, batch_recycle_test.cpp).
#pragma once

#include <atomic>
#include <memory>
#include <utility>

#include "base/transport.h"
#include "engine/selection.h"

namespace hawser::test {

struct CountedPeer : PeerHandle {
  explicit CountedPeer(std::atomic<int>& live) : live_(live) { ++live_; }
  ~CountedPeer() override { --live_; }
  std::atomic<int>& live_;
};

// The view of `desc` with one route, "counted", whose peer counts in `live`.
inline std::shared_ptr<const SegmentView> countedView(SegmentDesc desc, std::atomic<int>& live) {
  auto v = std::make_shared<SegmentView>();
  v->desc = std::make_shared<const SegmentDesc>(std::move(desc));
  Route r;
  r.name = "counted";
  r.peer = std::make_shared<CountedPeer>(live);
  v->routes.push_back(std::move(r));
  return v;
}

}  // namespace hawser::test
