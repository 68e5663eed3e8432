// Prepared block plans alone (engine/plan_table.h): ids, the plan kept as
// added (marked prepared), its summary, replacement only of the plan that
// is still current, release with its exact error once gone, and the
// counters of open plans and their memory kept to the byte, also when
// threads add and release at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "engine/plan_table.h"

namespace hawser {
namespace {

// A listed plan of `runs` runs of 4 KiB.
BlockPlan listed(size_t runs) {
  BlockPlan p;
  p.op = OpCode::kWrite;
  p.target = 7;
  p.blocks = runs * 2;
  p.runs = runs;
  p.bytes = runs * 4096;
  for (size_t i = 0; i < runs; ++i) p.list.push_back(Run{0x1000 + i * 4096, 0x9000 + i * 4096, 4096});
  return p;
}

class PlanTableTest : public ::testing::Test {
 protected:
  BlockCounters counters;
  PlanTable plans{counters};
};

TEST_F(PlanTableTest, added_plans_get_ids_from_one_and_are_kept_prepared_with_their_summary) {
  BlockPlan a = listed(3);
  const size_t a_bytes = a.memoryBytes();
  const PlanID ia = plans.add(std::move(a));
  const PlanID ib = plans.add(listed(5));
  EXPECT_EQ(ia, 1u);
  EXPECT_EQ(ib, 2u);
  std::shared_ptr<const BlockPlan> p;
  ASSERT_TRUE(plans.find(ia, p).ok());
  EXPECT_TRUE(p->prepared);
  EXPECT_EQ(p->runs, 3u);
  EXPECT_EQ(p->run(2).local, 0x1000u + 2 * 4096);
  PlanInfo info;
  ASSERT_TRUE(plans.info(ib, info).ok());
  EXPECT_EQ(info.blocks, 10u);
  EXPECT_EQ(info.runs, 5u);
  EXPECT_EQ(info.bytes, 5u * 4096);
  EXPECT_EQ(counters.plans_open.load(), 2u);
  std::shared_ptr<const BlockPlan> b;
  ASSERT_TRUE(plans.find(ib, b).ok());
  EXPECT_EQ(counters.plan_bytes.load(), a_bytes + b->memoryBytes());
  EXPECT_EQ(plans.size(), 2u);
}

TEST_F(PlanTableTest, a_released_plan_is_gone_and_every_call_on_it_names_it) {
  const PlanID id = plans.add(listed(2));
  std::shared_ptr<const BlockPlan> held;
  ASSERT_TRUE(plans.find(id, held).ok());
  ASSERT_TRUE(plans.release(id).ok());
  EXPECT_EQ(counters.plans_open.load(), 0u);
  EXPECT_EQ(counters.plan_bytes.load(), 0u);
  EXPECT_EQ(held->runs, 2u);  // what a posted task holds lives on
  const std::string gone = "plan id 1 is not prepared (never, or already released)";
  Status s = plans.release(id);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), gone);
  std::shared_ptr<const BlockPlan> p;
  EXPECT_EQ(plans.find(id, p).message(), gone);
  EXPECT_EQ(p, nullptr);
  PlanInfo info;
  EXPECT_EQ(plans.info(id, info).message(), gone);
  EXPECT_EQ(plans.info(99, info).message(), "plan id 99 is not prepared (never, or already released)");
}

TEST_F(PlanTableTest, replace_takes_only_where_the_plan_is_still_the_one_checked) {
  const PlanID id = plans.add(listed(2));
  std::shared_ptr<const BlockPlan> old;
  ASSERT_TRUE(plans.find(id, old).ok());
  auto fresh = std::make_shared<BlockPlan>(*old);
  fresh->list.reserve(64);  // holds more memory than the one it replaces
  ASSERT_TRUE(plans.replace(id, old, fresh));
  std::shared_ptr<const BlockPlan> now;
  ASSERT_TRUE(plans.find(id, now).ok());
  EXPECT_EQ(now, fresh);
  EXPECT_EQ(counters.plan_bytes.load(), fresh->memoryBytes());
  EXPECT_EQ(counters.plans_open.load(), 1u);

  // A second refresh from the plan seen before loses: the table keeps `fresh`.
  auto late = std::make_shared<BlockPlan>(*old);
  EXPECT_FALSE(plans.replace(id, old, late));
  ASSERT_TRUE(plans.find(id, now).ok());
  EXPECT_EQ(now, fresh);
  // Nor is a released plan brought back.
  ASSERT_TRUE(plans.release(id).ok());
  EXPECT_FALSE(plans.replace(id, fresh, late));
  EXPECT_EQ(plans.size(), 0u);
  EXPECT_EQ(counters.plan_bytes.load(), 0u);
}

TEST_F(PlanTableTest, threads_adding_and_releasing_at_once_leave_the_counters_at_zero) {
  constexpr int kThreads = 4, kRounds = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const PlanID id = plans.add(listed(1 + (t + i) % 4));
        PlanInfo info;
        if (!plans.info(id, info).ok() || info.runs != size_t(1 + (t + i) % 4)) ++failures;
        if (!plans.release(id).ok()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(plans.size(), 0u);
  EXPECT_EQ(counters.plans_open.load(), 0u);
  EXPECT_EQ(counters.plan_bytes.load(), 0u);
  EXPECT_EQ(plans.add(listed(1)), PlanID(kThreads * kRounds + 1));
}

}  // namespace
}  // namespace hawser
