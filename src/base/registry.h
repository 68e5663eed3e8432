// This engine's registered memory: non-overlapping regions keyed by start
// address. Lookups for the data path take a shared lock; a target serving a
// peer pins the region so unregister waits for the I/O to finish.
//
// With each region the registry keeps what every transport learned when it
// registered it (Registration: MR keys, an IPC export, a cuFile buffer).
// The engine finds a request's region once (at submit, or when a block
// plan is checked) and hands it, with the registration of the transport
// that moves it, down to that transport (Task::region(),
// RunWindow::regions): the data path never looks a region up again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "hawser/status.h"

namespace hawser {

class Transport;

// What one transport learned when it registered a region
// (Transport::registerRegion): the transport's own type, opaque to everyone
// else, immutable once returned. It lives while the region is registered or
// any task or plan that lies in the region holds it, which may be after the
// transport's unregisterMemory tore down what it describes: a transport
// that must not use a torn-down registration says so inside it.
class Registration {
 public:
  virtual ~Registration() = default;
};

// Every transport's registration of one region (only transports that
// returned one), by transport.
using Registrations = std::vector<std::pair<const Transport*, std::shared_ptr<const Registration>>>;

struct Region {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  bool remote_accessible = true;
  // Set by insert(): the GPU ordinal of a "cuda:N" location, -1 otherwise.
  int gpu = -1;
  // Set by insert(): registrations are numbered in the order they happened
  // (1, 2, ...; never reused), so a number names one registration: its
  // identity, which peers see in the descriptor (BufferDesc::seq).
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<int>> pins = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<const Registrations> registrations;  // null: none
};

// A registered region as the data path needs it: found once (at submit, or
// when a block request is checked) and handed to the transport with its
// tasks or runs.
struct LocalRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  int gpu = -1;      // the GPU ordinal of "cuda:N" memory; -1: host memory
  uint64_t seq = 0;  // which registration (Region::seq)
  // What the transport that moves these bytes learned when it registered
  // the region (its own type; null where it kept nothing). Set by pick().
  const Registration* registration = nullptr;
  const Transport* picked_for = nullptr;  // the transport of the last pick()
  // Keeps every transport's registration of the region alive while a task
  // or plan holds this.
  std::shared_ptr<const Registrations> registrations;

  // Points `registration` at what `t` learned.
  void pick(const Transport* t);
  bool contains(uint64_t a, uint64_t len) const { return a >= addr && len <= length && a - addr <= length - len; }
};

class MemoryRegistry {
 public:
  // Pin held while a peer's request reads/writes a region.
  class Pin {
   public:
    Pin() = default;
    explicit Pin(std::shared_ptr<std::atomic<int>> c, MemoryRegistry* r) : count_(std::move(c)), reg_(r) {}
    Pin(Pin&& o) noexcept : count_(std::move(o.count_)), reg_(o.reg_) {}
    Pin& operator=(Pin&& o) noexcept;
    ~Pin() { release(); }
    void release();
    explicit operator bool() const { return count_ != nullptr; }

   private:
    std::shared_ptr<std::atomic<int>> count_;
    MemoryRegistry* reg_ = nullptr;
  };

  // Checks (zero length, overlap with existing or within `more`) without inserting.
  Status checkInsert(uint64_t addr, uint64_t length) const;
  Status insert(const Region& r);
  // Removes the region starting exactly at addr; waits until unpinned.
  Status erase(uint64_t addr, Region* removed = nullptr);
  std::optional<Region> find(uint64_t addr) const;  // region starting exactly at addr

  // kNotRegistered unless [addr, addr+len) lies inside one region.
  Status checkLocal(uint64_t addr, uint64_t len, std::string* location = nullptr) const;
  // Like checkLocal, and fills `out` with the region and every transport's
  // registration of it (out.registration is null until out.pick()).
  Status regionAt(uint64_t addr, uint64_t len, LocalRegion& out, std::string* location = nullptr) const;
  // kOutOfRange unless inside one remote_accessible region; pins it on
  // success and says which region it is (addr, length, gpu, seq: no
  // registrations). `seq` (not 0): the registration the request is bound to
  // (a peer's BufferDesc::seq); a region registered again at the same
  // address is another registration and is refused, naming the withdrawn one.
  Status pinRemote(uint64_t addr, uint64_t len, Pin& pin, uint64_t seq = 0, LocalRegion* region = nullptr);
  // Adds what `t` learned to the region starting at `addr` (a transport
  // installed after the region was registered). kNotRegistered if none.
  Status addRegistration(uint64_t addr, const Transport* t, std::shared_ptr<const Registration> reg);

  std::vector<Region> snapshot() const;
  uint64_t version() const { return version_.load(); }
  // Counts erasures only: what was checked against the registry stays
  // valid while this does not change.
  uint64_t removals() const { return removals_.load(std::memory_order_acquire); }

 private:
  friend class Pin;
  void unpinned();
  // Under mu_: the region holding [addr, addr + len), or null.
  const Region* holding(uint64_t addr, uint64_t len) const;
  mutable std::shared_mutex mu_;
  std::map<uint64_t, Region> regions_;
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> removals_{0};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
};

}  // namespace hawser
