// Memory registration (registerMemory, unregisterMemory): all or nothing,
// in every installed transport, then published. The regions themselves are
// the MemoryRegistry's (base/registry.h); this object serialises the calls
// that change them, keeps what each transport said about each region for
// the local descriptor (its attrs), and registers what is registered so
// far in a transport installed later. Its lock is held while the registry,
// the transports and the publisher are called, and while the attrs' lock
// is taken (engine_impl.h: lock order).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/registry.h"
#include "base/transport.h"
#include "hawser/status.h"
#include "hawser/types.h"
#include "metadata/descriptor.h"

namespace hawser {

class MemoryRegistrar {
 public:
  // transports: the installed ones (the engine's list, read at each call);
  // publish: makes the local descriptor public again, called under the lock
  // so that descriptors are published in the order of the changes.
  MemoryRegistrar(MemoryRegistry& registry, const std::vector<std::unique_ptr<Transport>>& transports,
                  std::function<Status()> publish);

  // Registers `buffers` in every transport and the registry, all or none.
  Status add(const std::vector<BufferEntry>& buffers);
  // Unregisters the regions starting at `addrs`, none when one is not such
  // a start (kNotRegistered).
  Status remove(const std::vector<void*>& addrs);
  // Registers every region registered so far in `t` (a transport installed
  // after init), then `adopt()` makes it one of the installed ones, then the
  // descriptor is published (what is returned). On a failure `t` is shut
  // down and not adopted.
  Status addTransport(Transport& t, const std::function<void()>& adopt);
  // The regions peers may reach, with each transport's attrs of them (the
  // local descriptor's buffers).
  std::vector<BufferDesc> buffers() const;

 private:
  MemoryRegistry& registry_;
  const std::vector<std::unique_ptr<Transport>>& transports_;
  const std::function<Status()> publish_;
  std::mutex reg_mu_;  // serialises registrations
  mutable std::mutex attrs_mu_;
  std::map<uint64_t, nlohmann::json> buffer_attrs_;  // per region: transport attrs
};

}  // namespace hawser
