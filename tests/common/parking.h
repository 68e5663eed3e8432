// Where a test seam parks a thread: the hook of a transport's seam calls
// reached(); the one call that matches what the test armed (a point and an
// address) waits there until the test releases it, so a race happens in the
// one order the test wants, every run. Bounded: a parked thread gives up
// after a minute, a test's wait after `limit`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace hawser::test {

class Parking {
 public:
  // The next call of reached(at, point) parks.
  void arm(uint64_t at, int point = 0) {
    std::lock_guard lk(mu_);
    at_ = at;
    point_ = point;
    armed_ = true;
    parked_ = released_ = false;
  }
  // From the seam's hook: parks when armed for (at, point).
  void reached(uint64_t at, int point = 0) {
    std::unique_lock lk(mu_);
    if (!armed_ || at != at_ || point != point_) return;
    armed_ = false;
    parked_ = true;
    cv_.notify_all();
    cv_.wait_for(lk, std::chrono::seconds(60), [&] { return released_; });
  }
  // Whether a thread parked within `limit`.
  bool waitParked(std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return parked_; });
  }
  // Lets the parked thread (if any) go on, and disarms.
  void release() {
    std::lock_guard lk(mu_);
    armed_ = false;
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t at_ = 0;
  int point_ = 0;
  bool armed_ = false, parked_ = false, released_ = false;
};

}  // namespace hawser::test
