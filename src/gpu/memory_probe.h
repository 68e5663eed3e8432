// Where registered memory lives, asked of the CUDA driver and the kernel
// rather than taken from the caller: "cuda:N" for device memory of GPU N,
// "cpu:<NUMA node>" for host memory.
#pragma once

#include <cstddef>
#include <string>

#include "hawser/status.h"

namespace hawser::gpu {

struct MemoryPlace {
  bool device = false;
  int index = 0;  // GPU ordinal, or NUMA node
  std::string location() const;
};

// The driver's answer for device memory (when a driver is loaded), else the
// NUMA node of the first page of host memory (0 when the kernel cannot say).
MemoryPlace probeMemory(const void* addr);

// The location to record for [addr, addr + len) registered with `given`:
// "*" or "" becomes the probed place; an explicit "cuda:N" or "cpu:N" is
// kept when it agrees with the memory, and refused with kInvalidArgument
// naming both when it does not (device memory given as cpu, host memory as
// cuda, or another GPU). A cpu node is not checked: placement is policy.
Status resolveLocation(const void* addr, size_t len, const std::string& given, std::string& out);

}  // namespace hawser::gpu
