// Memory registration: all or nothing, in every installed transport, then
// published (memory_registrar.h does it).
#include "engine/engine_impl.h"

namespace hawser {

Status EngineImpl::registerMemory(const std::vector<BufferEntry>& buffers) {
  Status s = checkInit();
  if (!s.ok()) return s;
  return registrar_.add(buffers);
}

Status EngineImpl::unregisterMemory(const std::vector<void*>& addrs) {
  Status s = checkInit();
  if (!s.ok()) return s;
  s = registrar_.remove(addrs);
  batches_.cool(false, true);  // what kept batches hold of the regions (batch_table.h)
  return s;
}

}  // namespace hawser
