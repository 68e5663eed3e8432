// Memory registration: all or nothing, in every installed transport, then
// published (memory_registrar.h).
#include "engine/memory_registrar.h"

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/memory_probe.h"

namespace hawser {

MemoryRegistrar::MemoryRegistrar(MemoryRegistry& registry, const std::vector<std::unique_ptr<Transport>>& transports,
                                 std::function<Status()> publish)
    : registry_(registry), transports_(transports), publish_(std::move(publish)) {}

Status MemoryRegistrar::add(const std::vector<BufferEntry>& buffers) {
  if (buffers.empty()) return {Code::kInvalidArgument, "buffers is empty"};
  Status s;
  std::lock_guard lk(reg_mu_);
  // Validate everything first: all or nothing.
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    auto a = reinterpret_cast<uint64_t>(b.addr);
    if (b.addr == nullptr) return {Code::kInvalidArgument, fmt::format("buffers[{}].addr is null", i)};
    if (b.length == 0) return {Code::kInvalidArgument, fmt::format("buffers[{}].length is 0 (addr {:#x})", i, a)};
    s = registry_.checkInsert(a, b.length);
    if (!s.ok()) return {s.code(), fmt::format("buffers[{}]: {}", i, s.message())};
    for (size_t j = 0; j < i; ++j) {
      auto o = reinterpret_cast<uint64_t>(buffers[j].addr);
      if (a < o + buffers[j].length && o < a + b.length)
        return {Code::kAddressOverlapped, fmt::format("buffers[{}] [{:#x}, +{}) overlaps buffers[{}] [{:#x}, +{})", i,
                                                      a, b.length, j, o, buffers[j].length)};
    }
  }
  // Where each buffer lives, asked of the CUDA driver and the kernel.
  std::vector<std::string> locations(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    s = gpu::resolveLocation(buffers[i].addr, buffers[i].length, buffers[i].location, locations[i]);
    if (!s.ok()) return {s.code(), fmt::format("buffers[{}]: {}", i, s.message())};
  }
  // Register in every transport; undo on failure. What each transport
  // learned stays with the region (Region::registrations).
  size_t done = 0;
  std::vector<nlohmann::json> attrs(buffers.size(), nlohmann::json::object());
  for (; done < buffers.size(); ++done) {
    const auto& b = buffers[done];
    Region r;
    r.addr = reinterpret_cast<uint64_t>(b.addr);
    r.length = b.length;
    r.location = locations[done];
    r.remote_accessible = b.remote_accessible;
    r.gpu = gpuOrdinalOf(r.location);
    auto regs = std::make_shared<Registrations>();
    size_t t = 0;
    for (; t < transports_.size(); ++t) {
      nlohmann::json a = nlohmann::json::object();
      std::shared_ptr<const Registration> reg;
      s = transports_[t]->registerRegion(r, a, reg);
      if (!s.ok()) break;
      if (reg) regs->emplace_back(transports_[t].get(), std::move(reg));
      if (!a.is_null() && !(a.is_object() && a.empty())) attrs[done][transports_[t]->name()] = std::move(a);
    }
    if (!s.ok()) {
      for (size_t u = 0; u < t; ++u) (void)transports_[u]->unregisterMemory(b.addr, b.length);
      s = Status(s.code(), fmt::format("buffers[{}] in transport {}: {}", done, transports_[t]->name(), s.message()));
      break;
    }
    if (!regs->empty()) r.registrations = std::move(regs);
    (void)registry_.insert(r);  // validated above, under reg_mu_
  }
  if (!s.ok()) {
    for (size_t i = 0; i < done; ++i) {
      (void)registry_.erase(reinterpret_cast<uint64_t>(buffers[i].addr));
      for (auto& t : transports_) (void)t->unregisterMemory(buffers[i].addr, buffers[i].length);
    }
    return s;
  }
  {
    std::lock_guard al(attrs_mu_);
    for (size_t i = 0; i < buffers.size(); ++i)
      buffer_attrs_[reinterpret_cast<uint64_t>(buffers[i].addr)] = std::move(attrs[i]);
  }
  s = publish_();
  if (!s.ok()) HLOG_WARN("registered memory but could not publish the descriptor: {}", s.toString());
  return Status::OK();
}

Status MemoryRegistrar::remove(const std::vector<void*>& addrs) {
  std::lock_guard lk(reg_mu_);
  for (size_t i = 0; i < addrs.size(); ++i) {
    if (!registry_.find(reinterpret_cast<uint64_t>(addrs[i])))
      return {Code::kNotRegistered,
              fmt::format("addrs[{}] = {} is not the start of a registered region", i, addrs[i])};
  }
  for (void* a : addrs) {
    Region r;
    if (!registry_.erase(reinterpret_cast<uint64_t>(a), &r).ok()) continue;
    for (auto& t : transports_) {
      Status ts = t->unregisterMemory(a, r.length);
      if (!ts.ok()) HLOG_WARN("transport {}: unregister {}: {}", t->name(), a, ts.toString());
    }
    std::lock_guard al(attrs_mu_);
    buffer_attrs_.erase(reinterpret_cast<uint64_t>(a));
  }
  Status s = publish_();
  if (!s.ok()) HLOG_WARN("unregistered memory but could not publish the descriptor: {}", s.toString());
  return Status::OK();
}

Status MemoryRegistrar::addTransport(Transport& t, const std::function<void()>& adopt) {
  std::lock_guard lk(reg_mu_);
  for (auto& r : registry_.snapshot()) {
    nlohmann::json a = nlohmann::json::object();
    std::shared_ptr<const Registration> reg;
    Status s = t.registerRegion(r, a, reg);
    if (s.ok() && reg) s = registry_.addRegistration(r.addr, &t, std::move(reg));  // under reg_mu_: still there
    if (!s.ok()) {
      t.shutdown();
      return s;
    }
  }
  adopt();
  return publish_();
}

std::vector<BufferDesc> MemoryRegistrar::buffers() const {
  std::vector<BufferDesc> out;
  std::lock_guard lk(attrs_mu_);
  for (auto& r : registry_.snapshot()) {
    if (!r.remote_accessible) continue;
    BufferDesc b;
    b.addr = r.addr;
    b.length = r.length;
    b.location = r.location;
    b.seq = r.seq;
    auto it = buffer_attrs_.find(r.addr);
    if (it != buffer_attrs_.end()) b.attrs = it->second;
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace hawser
