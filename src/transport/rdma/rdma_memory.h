// Registered local memory of the rdma transport: one MR per NIC per region,
// found by address (one lookup yields every NIC's lkey).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <shared_mutex>
#include <string>
#include <vector>

#include "hawser/status.h"

namespace hawser::rdma {

// N of a location "<prefix>N" ("cpu:1" with prefix "cpu:" -> 1), else -1.
int locationNode(const std::string& loc, const char* prefix);

struct LocalRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  int numa = -1;
  bool remote = false;
  std::vector<ibv_mr*> mrs;  // per NIC; null where not registered
  std::vector<uint32_t> lkeys;
};

// Regions by start address. Thread-safe.
class RegionMap {
 public:
  // kAddressOverlapped when [addr, +length) overlaps a region.
  Status checkFree(uint64_t addr, uint64_t length) const;
  void insert(LocalRegion r);
  // Removes and returns the region starting at `addr`; false if none.
  bool take(uint64_t addr, LocalRegion& out);
  // Removes and returns every region.
  std::vector<LocalRegion> takeAll();
  // The lkeys and NUMA node of the region holding [addr, +length); false if
  // no one region holds it.
  bool lookup(uint64_t addr, uint64_t length, std::vector<uint32_t>& lkeys, int& numa) const;

 private:
  mutable std::shared_mutex mu_;
  std::map<uint64_t, LocalRegion> map_;
};

}  // namespace hawser::rdma
