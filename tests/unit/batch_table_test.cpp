// The engine's batch table alone (engine/batch_table.h): ids (unique,
// never reused, naming their shard; a thread's in its own shard), capacity
// limits with their exact errors, a batch with unfinished tasks refused
// as busy, orphans kept until their tasks end and then reaped, and
// allocate / find / free from several threads at once.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/util.h"
#include "engine/batch_table.h"

namespace hawser {
namespace {

// One task of one slice, submitted and unfinished.
void commitOneTask(Batch& b) {
  std::lock_guard sl(b.submitMutex());
  Task& t = b.task(b.taskCount());
  t.reset(TransferRequest{OpCode::kRead, nullptr, 0, 0, 4096}, b.taskCount(), nullptr, nullptr, -1);
  t.setSliceCount(1);
  b.commit(1, 1);
}

class BatchTableTest : public ::testing::Test {
 protected:
  void SetUp() override { table.configure({.max_capacity = 8, .slices_per_task = 4, .spin = nullptr}); }
  BatchTable table;
};

TEST_F(BatchTableTest, a_threads_ids_lie_in_its_shard_and_a_batch_has_the_capacities_asked) {
  BatchID a = kInvalidBatch, b = kInvalidBatch;
  ASSERT_TRUE(table.allocate(3, a).ok());
  ASSERT_TRUE(table.allocate(8, b).ok());
  EXPECT_NE(a, kInvalidBatch);
  EXPECT_EQ(b, a + BatchTable::kShards);  // the next id of this thread's shard
  EXPECT_EQ(BatchTable::shardOf(a), BatchTable::shardOf(b));
  EXPECT_LE(a, BatchTable::kShards);  // this table's first batch of that shard
  auto batch = table.find(a);
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->id(), a);
  EXPECT_EQ(batch->capacity(), 3u);
  EXPECT_EQ(batch->sliceCapacity(), 12u);  // 3 tasks x batch.slices_per_task 4
  EXPECT_EQ(table.open(), 2u);
  EXPECT_EQ(table.allocated(), 2u);
}

TEST_F(BatchTableTest, capacity_zero_or_above_the_maximum_is_refused_naming_it) {
  BatchID id = kInvalidBatch;
  Status s = table.allocate(0, id);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "capacity is 0");
  s = table.allocate(9, id);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "capacity 9 exceeds batch.max_capacity 8");
  EXPECT_EQ(table.open(), 0u);
  EXPECT_EQ(table.allocated(), 0u);
}

TEST_F(BatchTableTest, a_freed_batch_is_gone_and_freeing_it_again_is_an_invalid_batch) {
  BatchID id = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, id).ok());
  ASSERT_TRUE(table.free(id).ok());
  EXPECT_EQ(table.find(id), nullptr);
  Status s = table.free(id);
  EXPECT_EQ(s.code(), Code::kInvalidBatch);
  EXPECT_EQ(s.message(), fmt::format("batch id {} is not allocated (never, or already freed)", id));
  EXPECT_EQ(table.free(42).message(), "batch id 42 is not allocated (never, or already freed)");
  EXPECT_EQ(table.free(kInvalidBatch).message(), "batch id 0 is not allocated (never, or already freed)");
  EXPECT_EQ(table.find(kInvalidBatch), nullptr);
  // Ids are not reused.
  BatchID next = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, next).ok());
  EXPECT_EQ(next, id + BatchTable::kShards);
}

TEST_F(BatchTableTest, a_batch_with_an_unfinished_task_is_busy_and_frees_once_it_ended) {
  BatchID id = kInvalidBatch;
  ASSERT_TRUE(table.allocate(2, id).ok());
  auto batch = table.find(id);
  commitOneTask(*batch);
  Status s = table.free(id);
  EXPECT_EQ(s.code(), Code::kBatchBusy);
  EXPECT_EQ(s.message(), fmt::format("batch {} has 1 unfinished task(s)", id));
  ASSERT_NE(table.find(id), nullptr);
  batch->task(0).completeSlice(TransferState::kCompleted, 4096);
  EXPECT_TRUE(table.free(id).ok());
  EXPECT_EQ(table.find(id), nullptr);
}

TEST_F(BatchTableTest, an_orphan_stays_while_its_task_runs_and_is_reaped_by_the_next_allocate) {
  BatchID id = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, id).ok());
  auto batch = table.find(id);
  commitOneTask(*batch);
  ASSERT_EQ(table.free(id).code(), Code::kBatchBusy);
  table.orphan(id);
  table.reapOrphans();
  EXPECT_EQ(table.orphans(), 1u);
  EXPECT_EQ(table.reaped(), 0u);
  EXPECT_NE(table.find(id), nullptr);

  batch->task(0).completeSlice(TransferState::kCompleted, 4096);
  BatchID other = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, other).ok());  // reaps first
  EXPECT_EQ(table.orphans(), 0u);
  EXPECT_EQ(table.reaped(), 1u);
  EXPECT_EQ(table.find(id), nullptr);
  EXPECT_EQ(table.open(), 1u);
}

TEST_F(BatchTableTest, clear_forgets_every_batch) {
  BatchID a = kInvalidBatch, b = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, a).ok());
  ASSERT_TRUE(table.allocate(1, b).ok());
  EXPECT_EQ(table.live().size(), 2u);
  table.clear();
  EXPECT_EQ(table.open(), 0u);
  EXPECT_EQ(table.find(a), nullptr);
  EXPECT_EQ(table.free(b).code(), Code::kInvalidBatch);
}

TEST_F(BatchTableTest, threads_allocating_finding_freeing_and_reaping_at_once_get_distinct_ids) {
  constexpr int kThreads = 4, kRounds = 500;
  std::vector<std::vector<BatchID>> ids(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        BatchID id = kInvalidBatch;
        if (!table.allocate(1 + i % 8, id).ok()) ++failures;
        auto b = table.find(id);
        if (!b || b->id() != id) ++failures;
        ids[t].push_back(id);
        if (i % 50 == 0) table.reapOrphans();
        if (!table.free(id).ok()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<BatchID> all;
  for (auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), size_t(kThreads * kRounds));
  EXPECT_NE(all.front(), kInvalidBatch);
  // Each thread allocated in a shard of its own, its ids one shard-stride apart.
  std::vector<size_t> shards;
  for (auto& v : ids) {
    for (size_t i = 1; i < v.size(); ++i) EXPECT_EQ(v[i], v[i - 1] + BatchTable::kShards);
    shards.push_back(BatchTable::shardOf(v.front()));
  }
  std::sort(shards.begin(), shards.end());
  EXPECT_EQ(std::adjacent_find(shards.begin(), shards.end()), shards.end());
  EXPECT_EQ(table.open(), 0u);
  EXPECT_EQ(table.allocated(), uint64_t(kThreads * kRounds));
}

// Thread `tid` of this process is asleep (state S: blocked in the kernel,
// here on a futex).
bool sleeping(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S';
}

TEST_F(BatchTableTest, a_free_waiting_for_one_batch_holds_up_no_other_threads_batches) {
  // A free takes its shard's lock and, under it, the batch's submit lock: a
  // free of a batch whose submit runs waits there. With one lock for the
  // whole table every other thread's allocate, find and free waited too.
  BatchID busy = kInvalidBatch;
  ASSERT_TRUE(table.allocate(1, busy).ok());
  auto batch = table.find(busy);
  std::unique_lock submitting(batch->submitMutex());  // a submit in progress
  std::atomic<pid_t> freer_tid{0};
  std::thread freer([&] {
    freer_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    EXPECT_TRUE(table.free(busy).ok());
  });
  ASSERT_TRUE(test::eventually([&] { return freer_tid.load() != 0 && sleeping(freer_tid.load()); }))
      << "the freeing thread never blocked on the batch's submit lock";
  // Another thread's batches meanwhile: its own shard, nothing to wait for.
  auto other = std::async(std::launch::async, [&] {
    BatchID id = kInvalidBatch;
    if (!table.allocate(2, id).ok() || !table.find(id) || BatchTable::shardOf(id) == BatchTable::shardOf(busy))
      return false;
    return table.free(id).ok();
  });
  const bool done_meanwhile = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  submitting.unlock();  // let the held free finish either way
  freer.join();
  ASSERT_TRUE(done_meanwhile) << "another thread's allocate / find / free waited for an unrelated batch's free";
  EXPECT_TRUE(other.get());
  EXPECT_EQ(table.find(busy), nullptr);
}

}  // namespace
}  // namespace hawser
