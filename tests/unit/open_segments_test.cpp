// Open segments alone (engine/open_segments.h), with a descriptor source
// and a peer decoder of the test's own: one id per name and a reference
// per open, a descriptor fetched once while open, views replaced whole on
// refresh (a holder keeps the old one and its peers), refresh only when
// the store says stale, exact errors, and opens and closes of one name
// from several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/counted_view.h"
#include "engine/open_segments.h"

namespace hawser {
namespace {

using test::countedView;

class OpenSegmentsTest : public ::testing::Test {
 protected:
  // The metadata: generation per known segment name.
  std::mutex mu;
  std::map<std::string, uint64_t> generations{{"alpha", 1}, {"beta", 1}};
  bool fail = false;
  std::atomic<int> fetches{0}, peers_live{0};
  std::atomic<bool> stale{false};

  OpenSegments segments{[this](const std::string& name, SegmentDesc& out) -> Status {
                          ++fetches;
                          std::lock_guard lk(mu);
                          auto it = generations.find(name);
                          if (fail || it == generations.end())
                            return {Code::kSegmentNotFound, "no segment '" + name + "' in the test's metadata"};
                          out.name = name;
                          out.generation = it->second;
                          return Status::OK();
                        },
                        [this](SegmentDesc desc) { return countedView(std::move(desc), peers_live); }};
  // What the store says of a descriptor (OpenSegments::current).
  std::shared_ptr<const SegmentView> current(SegmentID id) {
    return segments.current(id, [this](const SegmentView&) { return stale.load(); });
  }

  void setGeneration(const std::string& name, uint64_t g) {
    std::lock_guard lk(mu);
    generations[name] = g;
  }
};

TEST_F(OpenSegmentsTest, one_id_per_name_with_a_reference_per_open_and_one_fetch) {
  SegmentID a = kInvalidSegment, a2 = kInvalidSegment, b = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", a).ok());
  ASSERT_TRUE(segments.open("alpha", a2).ok());
  ASSERT_TRUE(segments.open("beta", b).ok());
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(fetches.load(), 2);
  EXPECT_EQ(segments.refs(a), 2);
  EXPECT_EQ(segments.refs(b), 1);
  EXPECT_EQ(segments.size(), 2u);
  EXPECT_EQ(peers_live.load(), 2);
  auto v = segments.view(a);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->desc->name, "alpha");
}

TEST_F(OpenSegmentsTest, the_last_close_drops_the_segment_and_closing_again_names_the_id) {
  SegmentID a = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", a).ok());
  ASSERT_TRUE(segments.open("alpha", a).ok());
  ASSERT_TRUE(segments.close(a).ok());
  EXPECT_EQ(segments.refs(a), 1);
  EXPECT_NE(segments.view(a), nullptr);
  ASSERT_TRUE(segments.close(a).ok());
  EXPECT_EQ(segments.view(a), nullptr);
  EXPECT_EQ(segments.size(), 0u);
  EXPECT_EQ(peers_live.load(), 0);
  Status s = segments.close(a);
  EXPECT_EQ(s.code(), Code::kSegmentNotFound);
  EXPECT_EQ(s.message(), "segment id 1 is not open");
  // Open again: a new id, fetched anew.
  SegmentID again = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", again).ok());
  EXPECT_EQ(again, 2u);
  EXPECT_EQ(fetches.load(), 2);
}

TEST_F(OpenSegmentsTest, an_empty_name_or_a_failed_fetch_opens_nothing) {
  SegmentID id = kInvalidSegment;
  Status s = segments.open("", id);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "segment name is empty");
  EXPECT_EQ(fetches.load(), 0);
  s = segments.open("gamma", id);
  EXPECT_EQ(s.code(), Code::kSegmentNotFound);
  EXPECT_EQ(s.message(), "no segment 'gamma' in the test's metadata");
  EXPECT_EQ(id, kInvalidSegment);
  EXPECT_EQ(segments.size(), 0u);
}

TEST_F(OpenSegmentsTest, refresh_replaces_the_view_whole_and_a_holder_keeps_the_old_one_and_its_peer) {
  SegmentID a = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", a).ok());
  auto old = segments.view(a);
  setGeneration("alpha", 2);
  auto fresh = segments.refresh(a);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->desc->generation, 2u);
  EXPECT_EQ(segments.view(a), fresh);
  EXPECT_EQ(old->desc->generation, 1u);  // a task in flight keeps what it was submitted with
  EXPECT_EQ(peers_live.load(), 2);
  old.reset();
  EXPECT_EQ(peers_live.load(), 1);

  fail = true;  // the fetch fails: no view, the current one stays
  EXPECT_EQ(segments.refresh(a), nullptr);
  EXPECT_EQ(segments.view(a), fresh);
  EXPECT_EQ(segments.refresh(77), nullptr);  // not open
}

TEST_F(OpenSegmentsTest, current_refreshes_only_when_the_store_says_stale_and_keeps_the_old_view_on_failure) {
  SegmentID a = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", a).ok());
  auto first = segments.view(a);
  EXPECT_EQ(current(a), first);
  EXPECT_EQ(fetches.load(), 1);

  stale = true;
  setGeneration("alpha", 5);
  auto now = current(a);
  EXPECT_EQ(fetches.load(), 2);
  ASSERT_NE(now, first);
  EXPECT_EQ(now->desc->generation, 5u);

  fail = true;
  EXPECT_EQ(current(a), now);
  EXPECT_EQ(fetches.load(), 3);
  EXPECT_EQ(current(99), nullptr);
  EXPECT_EQ(fetches.load(), 3);
}

TEST_F(OpenSegmentsTest, clear_forgets_every_segment_and_its_peers) {
  SegmentID a = kInvalidSegment, b = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", a).ok());
  ASSERT_TRUE(segments.open("beta", b).ok());
  segments.clear();
  EXPECT_EQ(segments.size(), 0u);
  EXPECT_EQ(segments.view(a), nullptr);
  EXPECT_EQ(peers_live.load(), 0);
  EXPECT_EQ(segments.close(b).code(), Code::kSegmentNotFound);
}

TEST_F(OpenSegmentsTest, threads_opening_and_closing_one_name_share_one_id_and_leave_nothing_open) {
  constexpr int kThreads = 4, kRounds = 200;
  std::atomic<int> failures{0};
  SegmentID keep = kInvalidSegment;
  ASSERT_TRUE(segments.open("alpha", keep).ok());  // held throughout: the id never changes
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        SegmentID id = kInvalidSegment;
        if (!segments.open("alpha", id).ok() || id != keep) ++failures;
        if (t == 0 && i % 20 == 0 && !segments.refresh(id)) ++failures;
        if (!current(id)) ++failures;
        if (!segments.close(id).ok()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(segments.refs(keep), 1);
  ASSERT_TRUE(segments.close(keep).ok());
  EXPECT_EQ(segments.size(), 0u);
  EXPECT_EQ(peers_live.load(), 0);
}

}  // namespace
}  // namespace hawser
