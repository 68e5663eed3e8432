// Batch::waitUntil against its completers: a sleeper is woken by the last
// task's end however the two interleave (no lost wake-up), a signal or any
// other early return of the futex call never ends a wait early, a batch
// freed as soon as its waiter returns is not touched by the completer any
// more (AddressSanitizer sees it otherwise), a polling waiter drives the
// transports of its batch from its own thread, and the wait spin adapts.
// Tasks ended together (Task::completeWhole) wake and count as if each had
// ended alone.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/traffic_metrics.h"
#include "engine/batch.h"
#include "hawser/stats.h"

namespace hawser {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Lays out `n` tasks of one slice each (4 KiB, nothing behind them) and
// commits them: they are submitted and unfinished.
void commitTasks(Batch& b, size_t n) {
  std::lock_guard sl(b.submitMutex());
  const size_t base = b.taskCount();
  for (size_t i = 0; i < n; ++i) {
    Task& t = b.task(base + i);
    t.reset(TransferRequest{OpCode::kRead, nullptr, 0, 0, 4096}, base + i, nullptr, nullptr, -1);
    t.setSliceCount(1);
  }
  b.commit(n, n);
}

void complete(Batch& b, size_t i) { b.task(i).completeSlice(TransferState::kCompleted, 4096); }

// Spins for about `n` loop rounds (a few ns each).
void spinFor(unsigned n) {
  for (unsigned i = 0; i < n; ++i) std::atomic_signal_fence(std::memory_order_seq_cst);
}

TEST(BatchWait, a_sleeping_waiter_is_woken_by_the_last_completion_however_they_interleave) {
  // A completer thread ends the one task of a fresh batch a random moment
  // after it is posted, while the waiter goes to sleep at once (no spin) or
  // after a 1 us spin: the end lands before the waiter counts itself a
  // sleeper, between that and the futex call, or while it sleeps. A lost
  // wake-up leaves the waiter asleep to its deadline. The waiter frees the
  // batch as soon as it returns, as freeBatch does (dropSubBatches first):
  // a completer still touching it is a use after free under ASan.
  constexpr int kRounds = 20000;
  WaitSpin spin(std::chrono::microseconds(1));
  std::atomic<Batch*> posted{nullptr};
  std::atomic<unsigned> delay{0};
  std::atomic<bool> stop{false};
  std::thread completer([&] {
    for (unsigned idle = 0; !stop.load();) {
      Batch* b = posted.exchange(nullptr);
      if (!b) {
        // Busy at first: the end must be able to land within a few
        // instructions of the waiter's steps.
        if (++idle % 4096 == 0) std::this_thread::yield();
        continue;
      }
      idle = 0;
      spinFor(delay.load());
      complete(*b, 0);  // the last touch of `b` on this thread
    }
  });
  std::mt19937 rng(13);
  int late = 0;
  for (int r = 0; r < kRounds; ++r) {
    auto b = std::make_unique<Batch>(BatchID(r), 1, 1, r % 2 ? &spin : nullptr);
    commitTasks(*b, 1);
    delay.store(rng() % 2 ? rng() % 300 : rng() % 4000);  // half of them close to the waiter's own pace
    posted.store(b.get());
    const auto t0 = Clock::now();
    const bool done = b->waitUntil(t0 + std::chrono::seconds(10));
    if (Clock::now() - t0 > std::chrono::seconds(2)) ++late;
    ASSERT_TRUE(done) << "round " << r << ": the waiter slept through the completion (a lost wake-up)";
    ASSERT_EQ(b->unfinished(), 0u);
    ASSERT_EQ(b->task(0).status().s, TransferState::kCompleted);
    b->dropSubBatches();
    b.reset();
  }
  stop.store(true);
  completer.join();
  EXPECT_EQ(late, 0) << "waits that ended long after their completion";
}

// Eight tasks end on four threads (`end(b, c, ended)` ends completer c's
// share, counting each end in `ended` before it); three waiters sleep on
// the batch. Each waiter returns true, and not before the eighth end.
void sleepersWokenOnceAllEnded(const std::function<void(Batch&, size_t, std::atomic<int>&)>& end) {
  for (int round = 0; round < 500; ++round) {
    Batch b(1, 8, 8);
    commitTasks(b, 8);
    std::atomic<int> ended{0};
    std::atomic<int> early{0};
    std::vector<std::thread> waiters;
    for (int w = 0; w < 3; ++w)
      waiters.emplace_back([&] {
        const bool done = b.waitUntil(Clock::now() + std::chrono::seconds(10));
        if (!done || ended.load() != 8) early.fetch_add(1);
      });
    std::vector<std::thread> completers;
    for (size_t c = 0; c < 4; ++c) completers.emplace_back([&, c] { end(b, c, ended); });
    for (auto& t : completers) t.join();
    for (auto& t : waiters) t.join();
    ASSERT_EQ(early.load(), 0) << "round " << round;
    EXPECT_EQ(b.unfinished(), 0u);
    b.dropSubBatches();
  }
}

TEST(BatchWait, many_completers_ending_one_batch_wake_every_sleeper_once_all_have_ended) {
  sleepersWokenOnceAllEnded([](Batch& b, size_t c, std::atomic<int>& ended) {
    for (size_t i = c; i < 8; i += 4) {
      ended.fetch_add(1);  // counted before the end it stands for
      complete(b, i);
    }
  });
}

TEST(BatchWait, tasks_ended_together_wake_every_sleeper_once_all_have_ended) {
  // Each completer ends its two neighbouring tasks with one
  // Task::completeWhole (one count of the batch for both).
  sleepersWokenOnceAllEnded([](Batch& b, size_t c, std::atomic<int>& ended) {
    Task* pair[2] = {&b.task(2 * c), &b.task(2 * c + 1)};
    const uint64_t bytes[2] = {4096, 4096};
    ended.fetch_add(2);
    Task::completeWhole(pair, bytes, 2, Clock::now());
  });
}

// Every counter of `r` that is not zero: counters and gauges by value,
// histograms by count, keyed by family and label values.
std::map<std::string, double> counts(const metrics::Registry& r) {
  std::map<std::string, double> out;
  for (const MetricFamily& f : r.collect())
    for (const MetricSample& s : f.samples) {
      std::string key = f.name;
      for (const auto& [k, v] : s.labels) key += "," + k + "=" + v;
      const double v = f.type == MetricType::kHistogram ? static_cast<double>(s.count) : s.value;
      if (v != 0) out[key] = v;
    }
  return out;
}

TEST(BatchWait, tasks_ended_together_count_as_if_each_had_ended_alone) {
  // Two like batches of six tasks: three reads and a write to peer a, two
  // reads from peer b, each moving its own byte count. One batch's tasks
  // end one by one (completeSlice), the other's with one completeWhole, in
  // an order that breaks the runs (ids not consecutive, another peer,
  // another direction). Statuses, the batch's count and every traffic
  // counter must come out the same.
  const uint64_t bytes[6] = {100, 200, 300, 400, 500, 600};
  const OpCode ops[6] = {OpCode::kRead, OpCode::kRead, OpCode::kRead, OpCode::kWrite, OpCode::kRead, OpCode::kRead};
  auto make = [&](Batch& b, metrics::PeerTraffic* pa, metrics::PeerTraffic* pb) {
    std::lock_guard sl(b.submitMutex());
    for (size_t i = 0; i < 6; ++i) {
      b.task(i).resetBorrowed(TransferRequest{ops[i], nullptr, 0, 0, bytes[i]}, i, nullptr, nullptr, -1,
                              i < 4 ? pa : pb);
      b.task(i).setSliceCount(1);
    }
    b.commit(6, 6);
  };
  auto ra = std::make_shared<metrics::Registry>(), rb = std::make_shared<metrics::Registry>();
  metrics::PeerTraffic a1(ra, "shm", "a"), b1(ra, "shm", "b"), a2(rb, "shm", "a"), b2(rb, "shm", "b");
  Batch alone(1, 6, 6), together(2, 6, 6);
  make(alone, &a1, &b1);
  make(together, &a2, &b2);
  const auto now = Clock::now();
  for (size_t i = 0; i < 6; ++i) alone.task(i).completeSlice(TransferState::kCompleted, bytes[i], Status::OK(), now);
  const size_t order[6] = {0, 1, 3, 2, 4, 5};
  Task* tasks[6];
  uint64_t moved[6];
  for (size_t k = 0; k < 6; ++k) {
    tasks[k] = &together.task(order[k]);
    moved[k] = bytes[order[k]];
  }
  Task::completeWhole(tasks, moved, 6, now);
  EXPECT_EQ(together.unfinished(), 0u);
  EXPECT_TRUE(together.waitUntil(now));
  for (size_t i = 0; i < 6; ++i) {
    const TransferStatus st = together.task(i).status();
    EXPECT_EQ(st.s, TransferState::kCompleted) << i;
    EXPECT_EQ(st.transferred_bytes, bytes[i]) << i;
  }
  const auto want = counts(*ra);
  EXPECT_EQ(counts(*rb), want);
  EXPECT_EQ(want.at("hawser_tasks_total,transport=shm,peer=a,direction=read"), 3);
  EXPECT_EQ(want.at("hawser_transferred_bytes_total,transport=shm,peer=b,direction=read"), 1100);
  alone.dropSubBatches();
  together.dropSubBatches();
}

void onSignal(int) {}

TEST(BatchWait, a_signal_or_an_early_futex_return_never_ends_a_wait_before_its_deadline) {
  // SIGUSR1 (a handler that does nothing) interrupts the futex call over
  // and over: the waiter must go back to sleep, return false only at its
  // deadline, and true once the task ends.
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  Batch b(1, 1, 1);
  commitTasks(b, 1);
  std::atomic<int> result{-1};
  Clock::duration took{};
  pthread_t waiter_id{};
  std::atomic<bool> id_set{false};
  std::thread waiter([&] {
    waiter_id = pthread_self();
    id_set.store(true);
    const auto t0 = Clock::now();
    result.store(b.waitUntil(t0 + milliseconds(300)) ? 1 : 0);
    took = Clock::now() - t0;
  });
  while (!id_set.load()) std::this_thread::yield();
  int signals = 0;
  while (result.load() < 0) {
    pthread_kill(waiter_id, SIGUSR1);
    ++signals;
    std::this_thread::sleep_for(milliseconds(2));
  }
  waiter.join();
  EXPECT_EQ(result.load(), 0) << "the wait ended true with its task unfinished";
  EXPECT_GE(took, milliseconds(300)) << "the wait ended before its deadline";
  EXPECT_GT(signals, 10);

  // Now the task ends while the waiter sleeps, still under signals.
  result.store(-1);
  id_set.store(false);
  std::thread waiter2([&] {
    waiter_id = pthread_self();
    id_set.store(true);
    result.store(b.waitUntil(Clock::now() + std::chrono::seconds(10)) ? 1 : 0);
  });
  while (!id_set.load()) std::this_thread::yield();
  for (int i = 0; i < 20; ++i) {
    pthread_kill(waiter_id, SIGUSR1);
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(result.load(), -1) << "the wait ended with its task unfinished";
  complete(b, 0);
  waiter2.join();
  EXPECT_EQ(result.load(), 1);
  b.dropSubBatches();
  sigaction(SIGUSR1, &old, nullptr);
}

// A transport whose slices end only when a caller polls it, and that
// records which thread did.
class PolledTransport final : public Transport {
 public:
  struct Sub final : SubBatch {
    Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override {
      for (Task* t : tasks) t->setSliceCount(1);
      out = std::make_unique<PreparedWork>();
      out->slices = tasks.size();
      return Status::OK();
    }
    void post(std::unique_ptr<PreparedWork>) override {}
    void cancel() override {}
    bool idle() const override { return true; }
  };
  const char* name() const override { return "polled"; }
  TransportCaps caps() const override { return {}; }
  Status install(const TransportContext&) override { return Status::OK(); }
  Status openPeer(const SegmentDesc&, std::shared_ptr<PeerHandle>&) override {
    return {Code::kNotSupported, "test transport"};
  }
  Status newSubBatch(size_t, std::unique_ptr<SubBatch>& out) override {
    out = std::make_unique<Sub>();
    return Status::OK();
  }
  void poll() override {
    polls.fetch_add(1);
    // Ends the pending task on the third poll: the waiter keeps polling.
    if (Batch* b = pending.load(); b && polls.load() >= 3 && pending.compare_exchange_strong(b, nullptr)) {
      ended_on = std::this_thread::get_id();
      complete(*b, 0);
    }
  }
  std::atomic<Batch*> pending{nullptr};
  std::atomic<int> polls{0};
  std::thread::id ended_on;
};

TEST(BatchWait, a_spinning_waiter_polls_the_transports_of_its_batch_from_its_own_thread) {
  PolledTransport t;
  WaitSpin spin(std::chrono::seconds(5));
  Batch b(1, 1, 1, &spin);
  {
    std::lock_guard sl(b.submitMutex());
    SubBatch* sb = nullptr;
    ASSERT_TRUE(b.subBatch(&t, sb).ok());
  }
  commitTasks(b, 1);
  t.pending.store(&b);
  ASSERT_TRUE(b.waitUntil(Clock::now() + std::chrono::seconds(10)));
  EXPECT_GE(t.polls.load(), 3);
  EXPECT_EQ(t.ended_on, std::this_thread::get_id());
  b.dropSubBatches();
}

TEST(BatchWait, with_no_spin_a_waiter_sleeps_at_once_and_never_polls) {
  PolledTransport t;
  WaitSpin spin(std::chrono::microseconds(0));
  Batch b(1, 1, 1, &spin);
  {
    std::lock_guard sl(b.submitMutex());
    SubBatch* sb = nullptr;
    ASSERT_TRUE(b.subBatch(&t, sb).ok());
  }
  commitTasks(b, 1);
  t.pending.store(&b);
  const auto t0 = Clock::now();
  EXPECT_FALSE(b.waitUntil(t0 + milliseconds(30)));
  EXPECT_GE(Clock::now() - t0, milliseconds(30));
  EXPECT_EQ(t.polls.load(), 0);
  complete(b, 0);
  EXPECT_TRUE(b.waitUntil(Clock::now()));
  b.dropSubBatches();
}

TEST(WaitSpin, waits_that_keep_outlasting_the_window_stop_polling_but_every_sixteenth_probes) {
  WaitSpin s(std::chrono::microseconds(50));
  EXPECT_TRUE(s.shouldPoll());
  // Two misses: still polling (score -4 is the threshold).
  s.result(false);
  EXPECT_TRUE(s.shouldPoll());
  s.result(false);
  int polled = 0;
  for (int i = 0; i < 64; ++i) polled += s.shouldPoll();
  EXPECT_EQ(polled, 4) << "one wait in 16 probes";
  // Hits bring polling back: -4 -> -3 after one.
  s.result(true);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(s.shouldPoll());
  WaitSpin off(std::chrono::microseconds(0));
  EXPECT_FALSE(off.shouldPoll());
}

}  // namespace
}  // namespace hawser
