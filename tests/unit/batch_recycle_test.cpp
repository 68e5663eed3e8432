// Recycled batches (engine/batch_table.h, Batch::recycle): a freed batch
// nobody else holds is kept in its shard and handed out again with a new id
// and the capacities asked; it keeps the segment views and local regions its
// submits resolved while their stamps are current, and lets go of them when
// a segment is closed or its view replaced, or memory is unregistered,
// though nobody allocates again; batches that carried a block request or a
// notification, or that someone still holds, are not kept.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/registry.h"
#include "common/counted_view.h"
#include "engine/batch_table.h"
#include "engine/open_segments.h"

namespace hawser {
namespace {

using test::countedView;  // a view lives while its peer does

class BatchRecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table.configure({.max_capacity = 64, .slices_per_task = 4, .spin = nullptr, .segments = &segments,
                     .registry = &registry});
    Region r;
    r.addr = kRegion;
    r.length = kRegionBytes;
    r.location = "cpu:0";
    r.registrations = std::make_shared<const Registrations>();
    registrations = r.registrations;
    ASSERT_TRUE(registry.insert(r).ok());
  }

  // What a submit to batch `b` does with segment `id` and the region: the
  // view and the region found now, kept by the batch.
  void use(Batch& b, SegmentID id) {
    std::lock_guard sl(b.submitMutex());
    const uint64_t generation = segments.generation(), removals = registry.removals();
    auto v = segments.view(id);
    ASSERT_NE(v, nullptr);
    b.keepView(id, generation, std::move(v));
    LocalRegion r;
    ASSERT_TRUE(registry.regionAt(kRegion + 64, 4096, r).ok());
    r.pick(transport());
    b.keepRegions({std::move(r)}, removals);
  }
  // A transport's identity for pick() (compared, never called).
  const Transport* transport() const { return reinterpret_cast<const Transport*>(&transport_tag_); }

  // Segment "alpha" opened, and a batch that used it and the region freed: kept.
  SegmentID keptAfterUse() {
    SegmentID alpha = kInvalidSegment;
    EXPECT_TRUE(segments.open("alpha", alpha).ok());
    const BatchID id = allocate(1);
    use(*table.find(id), alpha);
    EXPECT_TRUE(table.free(id).ok());
    EXPECT_EQ(table.kept(), 1u);
    return alpha;
  }

  BatchID allocate(size_t capacity) {
    BatchID id = kInvalidBatch;
    EXPECT_TRUE(table.allocate(capacity, id).ok());
    return id;
  }

  static constexpr uint64_t kRegion = 0x100000, kRegionBytes = 1 << 20;
  std::atomic<int> peers_live{0};
  std::atomic<int> fetches{0};
  int transport_tag_ = 0;
  BatchTable table;  // declared before segments: its kept batches hold their views
  MemoryRegistry registry;
  std::weak_ptr<const Registrations> registrations;
  OpenSegments segments{[this](const std::string& name, SegmentDesc& out) -> Status {
                          ++fetches;
                          out.name = name;
                          out.generation = 1;
                          return Status::OK();
                        },
                        [this](SegmentDesc desc) { return countedView(std::move(desc), peers_live); },
                        [this] { table.cool(true, false); }};
};

TEST_F(BatchRecycleTest, a_freed_batch_is_handed_out_again_with_a_new_id_and_the_capacities_asked) {
  const BatchID first = allocate(4);
  Batch* const made = table.find(first).get();
  ASSERT_TRUE(table.free(first).ok());
  EXPECT_EQ(table.kept(), 1u);
  EXPECT_EQ(table.find(first), nullptr) << "a kept batch is not findable by its old id";

  const BatchID second = allocate(2);
  EXPECT_NE(second, first);
  auto b = table.find(second);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b.get(), made);
  EXPECT_EQ(b->id(), second);
  EXPECT_EQ(b->capacity(), 2u);
  EXPECT_EQ(b->sliceCapacity(), 8u);
  EXPECT_EQ(b->taskCount(), 0u);
  EXPECT_EQ(b->slicesUsed(), 0u);
  EXPECT_EQ(table.kept(), 0u);
  b.reset();
  ASSERT_TRUE(table.free(second).ok());

  // A kept batch of 4 tasks does not serve a batch of 8.
  const BatchID large = allocate(8);
  EXPECT_NE(table.find(large).get(), made);
  EXPECT_EQ(table.kept(), 1u);
  EXPECT_EQ(table.allocated(), 3u);
  EXPECT_EQ(table.open(), 1u);
}

TEST_F(BatchRecycleTest, a_batch_someone_holds_or_that_carried_a_block_request_or_notification_is_not_kept) {
  const BatchID held = allocate(1);
  auto holder = table.find(held);  // a status query that found it before the free
  ASSERT_TRUE(table.free(held).ok());
  EXPECT_EQ(table.kept(), 0u);
  EXPECT_EQ(holder->id(), held) << "the holder's batch was handed out again";

  const BatchID blocks = allocate(1);
  {
    auto b = table.find(blocks);
    std::lock_guard sl(b->submitMutex());
    b->noRecycle();
  }
  ASSERT_TRUE(table.free(blocks).ok());
  EXPECT_EQ(table.kept(), 0u);

  const BatchID notifying = allocate(1);
  {
    auto b = table.find(notifying);
    std::lock_guard sl(b->submitMutex());
    b->addNotify(0, nullptr, nullptr);
  }
  ASSERT_TRUE(table.free(notifying).ok());
  EXPECT_EQ(table.kept(), 0u);
}

// transferSync's way: the batch handed back by allocate itself, used
// without a lookup by id, let go of before the free.
TEST_F(BatchRecycleTest, the_batch_allocate_hands_back_is_the_one_its_id_names_and_is_kept_once_let_go) {
  BatchID id = kInvalidBatch;
  std::shared_ptr<Batch> held;
  ASSERT_TRUE(table.allocate(2, id, &held).ok());
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held.get(), table.find(id).get());
  EXPECT_EQ(held->id(), id);
  EXPECT_EQ(held->capacity(), 2u);
  Batch* const made = held.get();
  held.reset();
  ASSERT_TRUE(table.free(id).ok());
  EXPECT_EQ(table.kept(), 1u);

  // Reissued to the next allocate; freed while still held, it is not kept.
  ASSERT_TRUE(table.allocate(1, id, &held).ok());
  EXPECT_EQ(held.get(), made);
  ASSERT_TRUE(table.free(id).ok());
  EXPECT_EQ(table.kept(), 0u) << "a batch its allocator still holds was kept for reuse";
  EXPECT_EQ(held->id(), id) << "the holder's batch was handed out again";
}

TEST_F(BatchRecycleTest, a_batch_of_more_tasks_than_a_kept_one_may_have_is_not_kept) {
  table.configure({.max_capacity = Batch::kRecycleTasks + 1, .slices_per_task = 4, .spin = nullptr,
                   .segments = &segments, .registry = &registry});
  ASSERT_TRUE(table.free(allocate(Batch::kRecycleTasks + 1)).ok());
  EXPECT_EQ(table.kept(), 0u);
  ASSERT_TRUE(table.free(allocate(Batch::kRecycleTasks)).ok());
  EXPECT_EQ(table.kept(), 1u);
}

TEST_F(BatchRecycleTest, a_shard_keeps_a_few_batches_at_most) {
  std::vector<BatchID> ids;
  for (size_t i = 0; i < BatchTable::kKeptPerShard + 2; ++i) ids.push_back(allocate(1));
  for (BatchID id : ids) ASSERT_TRUE(table.free(id).ok());
  EXPECT_EQ(table.kept(), BatchTable::kKeptPerShard);
  table.clear();
  EXPECT_EQ(table.kept(), 0u);
}

TEST_F(BatchRecycleTest, views_and_regions_found_at_current_stamps_are_used_again_and_stale_ones_are_not) {
  SegmentID alpha = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", alpha).ok());
  const BatchID first = allocate(2);
  auto b = table.find(first);
  ASSERT_NO_FATAL_FAILURE(use(*b, alpha));
  const SegmentView* view = segments.view(alpha).get();
  b.reset();
  ASSERT_TRUE(table.free(first).ok());

  b = table.find(allocate(2));
  EXPECT_EQ(b->warmView(alpha, segments.generation()), view);
  EXPECT_EQ(b->warmView(alpha + 1, segments.generation()), nullptr) << "another segment";
  EXPECT_EQ(b->warmView(alpha, segments.generation() + 1), nullptr) << "another generation";
  const uint64_t removals = registry.removals();
  const LocalRegion* r = b->warmRegion(kRegion + 4096, 8192, removals, transport());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->addr, kRegion);
  EXPECT_EQ(r->length, kRegionBytes);
  EXPECT_EQ(b->warmRegion(kRegion + 4096, 8192, removals), r) << "any transport";
  EXPECT_EQ(b->warmRegion(kRegion + 4096, 8192, removals, nullptr), r);
  EXPECT_EQ(b->warmRegion(kRegion + kRegionBytes - 10, 11, removals), nullptr) << "past the region's end";
  EXPECT_EQ(b->warmRegion(kRegion + 4096, 8192, removals + 1), nullptr) << "after a removal";
  int other = 0;
  EXPECT_EQ(b->warmRegion(kRegion, 1, removals, reinterpret_cast<const Transport*>(&other)), nullptr)
      << "kept for another transport";

  // Registering more memory changes no stamp; removing some does.
  Region more;
  more.addr = kRegion + kRegionBytes;
  more.length = 4096;
  ASSERT_TRUE(registry.insert(more).ok());
  EXPECT_EQ(registry.removals(), removals);
  ASSERT_TRUE(registry.erase(more.addr).ok());
  EXPECT_EQ(b->warmRegion(kRegion, 1, registry.removals()), nullptr);
  // Freed with stale stamps: what is not current is let go.
  const BatchID id = b->id();
  b.reset();
  ASSERT_TRUE(table.free(id).ok());
  b = table.find(allocate(1));
  EXPECT_EQ(b->warmRegion(kRegion, 1, removals), nullptr) << "kept past its stamp";
  EXPECT_EQ(b->warmView(alpha, segments.generation()), view) << "the view's stamp is still current";
}

TEST_F(BatchRecycleTest, closing_a_segment_or_replacing_its_view_makes_kept_batches_let_go_of_it) {
  const SegmentID alpha = keptAfterUse();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(peers_live.load(), 1);

  // Replaced: the old view's peer goes once the kept batch let go of it.
  ASSERT_NE(segments.refresh(alpha), nullptr);
  EXPECT_EQ(peers_live.load(), 1) << "the replaced view is still kept";
  const BatchID again = allocate(1);
  ASSERT_NO_FATAL_FAILURE(use(*table.find(again), alpha));
  ASSERT_TRUE(table.free(again).ok());
  EXPECT_EQ(peers_live.load(), 1);

  // Closed: no view of it is left, though nobody allocates again.
  ASSERT_TRUE(segments.close(alpha).ok());
  EXPECT_EQ(peers_live.load(), 0) << "a kept batch still holds the closed segment's view";
  EXPECT_EQ(table.kept(), 1u) << "the batch itself stays kept";
}

TEST_F(BatchRecycleTest, unregistering_makes_kept_batches_let_go_of_the_region) {
  keptAfterUse();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(registry.erase(kRegion).ok());
  EXPECT_FALSE(registrations.expired()) << "kept until told";
  table.cool(false, true);  // what the engine does after unregistering
  EXPECT_TRUE(registrations.expired()) << "a kept batch still holds the unregistered region's registrations";
  EXPECT_EQ(peers_live.load(), 1) << "the views stay";
}

// Threads allocating, using and freeing batches while segments are opened,
// replaced and closed and memory registered and unregistered: every view
// and registration let go of once nothing uses it (and, under TSan, no race).
TEST_F(BatchRecycleTest, threads_recycling_batches_while_segments_and_regions_change) {
  SegmentID alpha = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", alpha).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      while (!stop.load()) {
        BatchID id = kInvalidBatch;
        if (!table.allocate(1 + rounds % 3, id).ok()) continue;
        {
          auto b = table.find(id);
          std::lock_guard sl(b->submitMutex());
          const uint64_t generation = segments.generation(), removals = registry.removals();
          if (!b->warmView(alpha, generation))
            if (auto v = segments.view(alpha)) b->keepView(alpha, generation, std::move(v));
          LocalRegion r;
          if (!b->warmRegion(kRegion, 64, removals) && registry.regionAt(kRegion, 64, r).ok()) {
            r.pick(transport());
            b->keepRegions({std::move(r)}, removals);
          }
        }
        EXPECT_TRUE(table.free(id).ok());
        ++rounds;
      }
    });
  for (int i = 0; i < 200; ++i) {
    SegmentID beta = kInvalidSegment;
    ASSERT_TRUE(segments.open("beta", beta).ok());
    ASSERT_TRUE(segments.close(beta).ok());
    ASSERT_NE(segments.refresh(alpha), nullptr);
    Region more;
    more.addr = kRegion + kRegionBytes;
    more.length = 4096;
    ASSERT_TRUE(registry.insert(more).ok());
    ASSERT_TRUE(registry.erase(more.addr).ok());
    table.cool(false, true);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rounds.load() < 1000 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_GE(rounds.load(), 1000);
  ASSERT_TRUE(segments.close(alpha).ok());
  EXPECT_EQ(peers_live.load(), 0) << "a view outlived its segment";
  ASSERT_TRUE(registry.erase(kRegion).ok());
  table.cool(false, true);
  EXPECT_TRUE(registrations.expired());
}

}  // namespace
}  // namespace hawser
