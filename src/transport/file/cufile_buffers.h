// GPU buffers registered with cuFile (cuFileBufRegister) off the caller's
// thread. Registering costs tens of milliseconds per buffer whatever its
// size (26-30 ms on the H200 machine), so add() only queues the buffer and
// returns; a registration thread of its own (started at the first add) runs
// the queue in order, with the buffer's GPU context current. It is not the
// batch engine's thread: a registration never delays I/O of other buffers.
//
// Guarantees:
//   - I/O on a buffer whose registration is still queued or running goes
//     through unregistered (locate() finds no registered buffer and returns
//     the address itself; cuFile stages unregistered GPU memory through its
//     own bounce buffers). It never waits for the registration.
//   - remove() after add() leaves no registration behind: a registration
//     still queued is dropped (it never reaches the library); one running is
//     waited for and then deregistered. remove() returns once the range is
//     deregistered, so the caller may free the memory.
//   - stop() drops queued registrations, waits for the running one and
//     deregisters every buffer still registered; later add() calls are
//     ignored (their I/O goes through unregistered).
// A buffer the library refuses just stays unregistered (logged at info).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "transport/file/cufile_api.h"

namespace hawser::file {

class CufileBuffers {
 public:
  explicit CufileBuffers(const cufile::Api& api) : a_(api) {}
  ~CufileBuffers() { stop(); }
  CufileBuffers(const CufileBuffers&) = delete;
  CufileBuffers& operator=(const CufileBuffers&) = delete;

  // Queues [addr, +len) for cuFileBufRegister and returns.
  void add(void* addr, size_t len);
  // Drops queued registrations of buffers starting in [addr, +len), waits
  // for one of them that is running, and deregisters those registered.
  void remove(void* addr, size_t len);
  // The registered buffer holding `p` (base, offset in it, its GPU), or p
  // itself with offset 0 and device -1 when none is registered (yet).
  void locate(void* p, void*& base, off_t& off, int& device) const;
  // Registrations queued and not started (for tests and the doctor).
  size_t queued() const;
  void stop();

 private:
  struct Job {
    uint64_t addr;
    size_t len;
  };
  struct Buf {
    size_t len;
    int device;
  };
  void run();
  void registerOne(const Job& j);
  void deregisterRange(uint64_t base, size_t len);

  const cufile::Api& a_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work or stop for the thread
  std::condition_variable done_cv_;  // a registration ended
  std::deque<Job> queue_;
  std::optional<Job> running_;
  bool stopped_ = false;
  std::thread thread_;

  mutable std::shared_mutex buf_mu_;
  std::map<uint64_t, Buf> bufs_;  // registered, by base address
};

}  // namespace hawser::file
