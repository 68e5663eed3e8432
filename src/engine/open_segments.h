// Open segments (TransferEngine::openSegment .. closeSegment): one id and a
// reference count per name, and the SegmentView every task that targets it
// is given: the descriptor and each transport's peer handle (selection.h).
// Where a descriptor comes from and how it is decoded into peers the engine
// says (segments.cpp: fetchSegment, makeView); this object keeps the views,
// replaces one whole when its descriptor changed (tasks in flight keep the
// one they were submitted with), and owns the one lock over them. Nothing
// is fetched or decoded under that lock (engine_impl.h: lock order); the
// submits' lookups share it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "engine/selection.h"
#include "hawser/status.h"
#include "hawser/types.h"
#include "metadata/descriptor.h"

namespace hawser {

class OpenSegments {
 public:
  // The descriptor of segment `name` (the metadata store, or the transport
  // owning the name's scheme).
  using Fetch = std::function<Status(const std::string& name, SegmentDesc& out)>;
  // The descriptor decoded into each transport's route and peer handle.
  using MakeView = std::function<std::shared_ptr<const SegmentView>(SegmentDesc desc)>;

  // Called after a view was let go (closed or replaced), outside the lock:
  // whoever keeps views past a submit (the batch table's idle batches)
  // drops them.
  using Changed = std::function<void()>;
  OpenSegments(Fetch fetch, MakeView make_view, Changed changed = {});

  // The id of segment `name`: a new one (its descriptor fetched and
  // decoded), or the one it has while open, with one more reference.
  Status open(const std::string& name, SegmentID& out);
  // Drops one reference; the last drops the segment and its view.
  Status close(SegmentID id);
  // The view tasks are given now; null when `id` is not open.
  std::shared_ptr<const SegmentView> view(SegmentID id) const;
  // Re-fetches the descriptor and replaces the view; null when `id` is not
  // open or the fetch failed (the old view stays).
  std::shared_ptr<const SegmentView> refresh(SegmentID id);
  // The view to submit to: refreshed first when `stale(view)` says its
  // descriptor may be stale (the store tracks changes: the owner restarted
  // or registered more memory); the old one kept when that fails. Inline,
  // with the predicate a template argument: every submit takes this path.
  template <class Stale>
  std::shared_ptr<const SegmentView> current(SegmentID id, const Stale& stale) {
    auto v = view(id);
    if (!v) return nullptr;
    if (stale(*v)) {
      if (auto fresh = refresh(id)) v = fresh;
    }
    return v;
  }
  // Bumped whenever a view is let go (closed, replaced, cleared): a view
  // found after this read G is still its segment's view while this reads G.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Segments open, and references to segment `id` (0: not open).
  size_t size() const;
  int refs(SegmentID id) const;
  // Forgets every segment (shutdown).
  void clear();

 private:
  struct OpenSegment {
    std::string name;
    std::shared_ptr<const SegmentView> view;
    int refs = 0;
  };

  const Fetch fetch_;
  const MakeView make_view_;
  const Changed changed_;
  std::atomic<uint64_t> generation_{0};  // bumped under mu_
  mutable std::shared_mutex mu_;  // shared: view() (every submit), size(), refs()
  std::map<SegmentID, OpenSegment> segments_;
  std::map<std::string, SegmentID> segment_ids_;
  SegmentID next_segment_ = 1;
};

}  // namespace hawser
