// GPU buffers registered with cuFile (cuFileBufRegister) off the caller's
// thread. Registering costs tens of milliseconds per buffer whatever its
// size (26-30 ms on the H200 machine), so add() only queues the buffer and
// returns; a registration thread of its own (started at the first add) runs
// the queue in order, with the buffer's GPU context current. It is not the
// batch engine's thread: a registration never delays I/O of other buffers.
//
// Each buffer is a CufileMemory, which every op in it carries (IoOp::memory):
// whether it is registered is read there, never looked up by address.
//
// Guarantees:
//   - I/O on a buffer whose registration is still queued or running goes
//     through unregistered (CufileMemory::locate gives the address itself;
//     cuFile stages unregistered GPU memory through its own bounce
//     buffers). It never waits for the registration.
//   - remove() after add() leaves no registration behind: a registration
//     still queued is dropped (it never reaches the library); one running is
//     waited for and then deregistered. remove() returns once the buffer is
//     deregistered, so the caller may free the memory.
//   - stop() drops queued registrations, waits for the running one and
//     deregisters every buffer still registered; later add() calls are
//     ignored (their I/O goes through unregistered).
// A buffer the library refuses just stays unregistered (logged at info).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/file/cufile_api.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

// One GPU buffer as cuFile sees it (CufileEngine::addMemory).
class CufileMemory final : public EngineMemory {
 public:
  CufileMemory(const IoEngine* owner, void* a, size_t n, int gpu) : EngineMemory(owner), addr(a), len(n), device(gpu) {}
  void* const addr;
  const size_t len;
  const int device;  // its GPU (the registration thread binds it)
  // Set once cuFileBufRegister took the buffer, cleared before it is
  // deregistered: I/O names the registered buffer only while set.
  std::atomic<bool> registered{false};

  // How an entry names [p, +n): the registered buffer's base and the
  // offset in it, or (not registered, or not inside) p itself and 0.
  void locate(void* p, size_t n, void*& base, off_t& off) const;
};

class CufileBuffers {
 public:
  explicit CufileBuffers(const cufile::Api& api) : a_(api) {}
  ~CufileBuffers() { stop(); }
  CufileBuffers(const CufileBuffers&) = delete;
  CufileBuffers& operator=(const CufileBuffers&) = delete;

  // Queues `m` for cuFileBufRegister and returns.
  void add(std::shared_ptr<CufileMemory> m);
  // Drops m's registration when still queued, waits for it when running,
  // and deregisters it when registered.
  void remove(CufileMemory& m);
  // Registrations queued and not started (for tests and the doctor).
  size_t queued() const;
  void stop();

 private:
  void run();
  void registerOne(const std::shared_ptr<CufileMemory>& m);
  void deregister(CufileMemory& m);

  const cufile::Api& a_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work or stop for the thread
  std::condition_variable done_cv_;  // a registration ended
  std::deque<std::shared_ptr<CufileMemory>> queue_;
  std::shared_ptr<CufileMemory> running_;
  bool stopped_ = false;
  std::thread thread_;
  // Registered ones, for remove() and stop() (never read by I/O).
  std::vector<std::shared_ptr<CufileMemory>> registered_;
};

}  // namespace hawser::file
