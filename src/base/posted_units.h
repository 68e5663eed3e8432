// What a sub-batch has posted, kept until no worker references it: the
// units of work a transport's threads hold pointers to (tcp: arrays of
// slices and their run tables; nvlink: copy groups). The sub-batch's
// threads count what they still hold in an `outstanding` counter of its own;
// cancel() visits every unit; at destruction the units are freed once that
// count is 0, or leaked (never freed under a worker) after a grace period.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"

namespace hawser {

template <class T>
class PostedUnits {
 public:
  PostedUnits() = default;
  PostedUnits(const PostedUnits&) = delete;
  PostedUnits& operator=(const PostedUnits&) = delete;
  ~PostedUnits() {
    if (leak_) {
      for (auto& a : arrays_) (void)a.first.release();
      for (auto& u : singles_) (void)u.release();
    }
  }

  // Keeps `n` units posted together (one allocation); returns them.
  T* keep(std::unique_ptr<T[]> units, size_t n) {
    T* p = units.get();
    std::lock_guard lk(mu_);
    arrays_.emplace_back(std::move(units), n);
    return p;
  }
  // Keeps one unit; returns it.
  T* keep(std::unique_ptr<T> unit) {
    T* p = unit.get();
    std::lock_guard lk(mu_);
    singles_.push_back(std::move(unit));
    return p;
  }

  // f(T&) for every unit kept, in the order kept, under the lock (post()
  // may run meanwhile on other threads; `f` must not call keep()).
  template <class F>
  void forEach(F&& f) {
    std::lock_guard lk(mu_);
    for (auto& [a, n] : arrays_)
      for (size_t i = 0; i < n; ++i) f(a[i]);
    for (auto& u : singles_) f(*u);
  }

  // For the sub-batch's destructor: waits until `outstanding` (what its
  // workers still hold) is 0, up to `grace`; past it, the units are leaked
  // when this goes rather than freed under a worker, with an error naming
  // `who` ("tcp: sub-batch") and `what` ("slice(s)"). True when they are
  // free to go.
  bool settle(const std::atomic<int64_t>& outstanding, std::chrono::milliseconds grace, std::string_view who,
              std::string_view what) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (outstanding.load(std::memory_order_acquire) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int64_t left = outstanding.load(std::memory_order_acquire);
    if (left == 0) return true;
    HLOG_ERROR("{} destroyed with {} {} still in flight; leaking them", who, left, what);
    abandon();
    return false;
  }
  // Leaks the units when this goes (units of another kind that the
  // settled ones point into).
  void abandon() {
    std::lock_guard lk(mu_);
    leak_ = true;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::unique_ptr<T[]>, size_t>> arrays_;
  std::vector<std::unique_ptr<T>> singles_;
  bool leak_ = false;
};

}  // namespace hawser
