// Registered local memory of the rdma transport: one MR per NIC per region.
// What registration made travels with the region (base/registry.h): the
// engine hands it back with every task (Task::region().registration), so
// prepare never looks a region up. The map here is for teardown only:
// overlap checks, unregisterMemory and shutdown.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/registry.h"
#include "hawser/status.h"

namespace hawser::rdma {

// One region as rdma registered it.
struct MemoryRegistration final : Registration {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  int numa = -1;
  bool remote = false;
  std::vector<ibv_mr*> mrs;  // per NIC; null where not registered
  std::vector<uint32_t> lkeys;
  // Set before its MRs are deregistered (unregisterMemory, shutdown): a task
  // that still holds it is refused rather than posted with dead keys.
  std::atomic<bool> deregistered{false};
};

// Regions by start address. Thread-safe.
class RegionMap {
 public:
  // kAddressOverlapped when [addr, +length) overlaps a region.
  Status checkFree(uint64_t addr, uint64_t length) const;
  void insert(std::shared_ptr<MemoryRegistration> r);
  // Removes and returns the region starting at `addr`; null if none.
  std::shared_ptr<MemoryRegistration> take(uint64_t addr);
  // Removes and returns every region.
  std::vector<std::shared_ptr<MemoryRegistration>> takeAll();

 private:
  mutable std::shared_mutex mu_;
  std::map<uint64_t, std::shared_ptr<MemoryRegistration>> map_;
};

}  // namespace hawser::rdma
