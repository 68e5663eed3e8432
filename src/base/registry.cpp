#include "base/registry.h"

#include <fmt/format.h>

#include "base/transport.h"

namespace hawser {

MemoryRegistry::Pin& MemoryRegistry::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    release();
    count_ = std::move(o.count_);
    reg_ = o.reg_;
  }
  return *this;
}

void MemoryRegistry::Pin::release() {
  if (!count_) return;
  if (count_->fetch_sub(1) == 1 && reg_) reg_->unpinned();
  count_.reset();
}

void MemoryRegistry::unpinned() {
  std::lock_guard lk(wait_mu_);
  wait_cv_.notify_all();
}

void LocalRegion::pick(const Transport* t) {
  registration = nullptr;
  picked_for = t;
  if (!registrations) return;
  for (const auto& [owner, reg] : *registrations)
    if (owner == t) registration = reg.get();
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;
}

Status MemoryRegistry::checkInsert(uint64_t addr, uint64_t length) const {
  if (length == 0) return {Code::kInvalidArgument, fmt::format("length is 0 for address {:#x}", addr)};
  if (addr == 0) return {Code::kInvalidArgument, "addr is null"};
  if (addr + length < addr) return {Code::kInvalidArgument, fmt::format("range {:#x}+{} wraps around", addr, length)};
  std::shared_lock lk(mu_);
  auto it = regions_.upper_bound(addr);
  if (it != regions_.end() && overlaps(addr, length, it->first, it->second.length))
    return {Code::kAddressOverlapped, fmt::format("[{:#x}, +{}) overlaps registered region [{:#x}, +{})", addr,
                                                  length, it->first, it->second.length)};
  if (it != regions_.begin()) {
    --it;
    if (overlaps(addr, length, it->first, it->second.length))
      return {Code::kAddressOverlapped, fmt::format("[{:#x}, +{}) overlaps registered region [{:#x}, +{})", addr,
                                                    length, it->first, it->second.length)};
  }
  return Status::OK();
}

Status MemoryRegistry::insert(const Region& r) {
  Status s = checkInsert(r.addr, r.length);
  if (!s.ok()) return s;
  std::unique_lock lk(mu_);
  auto it = regions_.emplace(r.addr, r).first;
  it->second.gpu = gpuOrdinalOf(r.location);
  it->second.seq = version_.fetch_add(1) + 1;
  return Status::OK();
}

Status MemoryRegistry::erase(uint64_t addr, Region* removed) {
  std::shared_ptr<std::atomic<int>> pins;
  {
    std::unique_lock lk(mu_);
    auto it = regions_.find(addr);
    if (it == regions_.end())
      return {Code::kNotRegistered, fmt::format("addr {:#x} is not the start of a registered region", addr)};
    if (removed) *removed = it->second;
    pins = it->second.pins;
    regions_.erase(it);
    version_.fetch_add(1);
    removals_.fetch_add(1, std::memory_order_release);
  }
  // New pins can no longer be taken; wait for the ones in flight.
  std::unique_lock lk(wait_mu_);
  wait_cv_.wait(lk, [&] { return pins->load() == 0; });
  return Status::OK();
}

std::optional<Region> MemoryRegistry::find(uint64_t addr) const {
  std::shared_lock lk(mu_);
  auto it = regions_.find(addr);
  if (it == regions_.end()) return std::nullopt;
  return it->second;
}

const Region* MemoryRegistry::holding(uint64_t addr, uint64_t len) const {
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return nullptr;
  const Region& r = std::prev(it)->second;
  return addr >= r.addr && len <= r.length && addr - r.addr <= r.length - len ? &r : nullptr;
}

static Status notLocal(uint64_t addr, uint64_t len) {
  return {Code::kNotRegistered,
          fmt::format("local range [{:#x}, +{}) is not inside one registered region", addr, len)};
}

Status MemoryRegistry::checkLocal(uint64_t addr, uint64_t len, std::string* location) const {
  std::shared_lock lk(mu_);
  const Region* r = holding(addr, len);
  if (!r) return notLocal(addr, len);
  if (location) *location = r->location;
  return Status::OK();
}

Status MemoryRegistry::regionAt(uint64_t addr, uint64_t len, LocalRegion& out, std::string* location) const {
  std::shared_lock lk(mu_);
  const Region* r = holding(addr, len);
  if (!r) return notLocal(addr, len);
  out.addr = r->addr;
  out.length = r->length;
  out.gpu = r->gpu;
  out.seq = r->seq;
  out.registration = nullptr;
  out.registrations = r->registrations;
  if (location) *location = r->location;
  return Status::OK();
}

Status MemoryRegistry::pinRemote(uint64_t addr, uint64_t len, Pin& pin, uint64_t seq, LocalRegion* region) {
  std::shared_lock lk(mu_);
  const Region* r = holding(addr, len);
  if (seq != 0 && (!r || r->seq != seq)) {
    if (!r)
      return {Code::kOutOfRange,
              fmt::format("registration {} (the one the request is bound to) was withdrawn: [{:#x}, +{}) is not "
                          "inside one registered region any more",
                          seq, addr, len)};
    return {Code::kOutOfRange,
            fmt::format("registration {} (the one the request is bound to) was withdrawn: [{:#x}, +{}) now "
                        "belongs to registration {} [{:#x}, +{})",
                        seq, addr, len, r->seq, r->addr, r->length)};
  }
  if (!r || !r->remote_accessible)
    return {Code::kOutOfRange,
            fmt::format("range [{:#x}, +{}) is not inside one remote-accessible registered region", addr, len)};
  r->pins->fetch_add(1);
  pin = Pin(r->pins, this);
  if (region) {
    region->addr = r->addr;
    region->length = r->length;
    region->gpu = r->gpu;
    region->seq = r->seq;
  }
  return Status::OK();
}

Status MemoryRegistry::addRegistration(uint64_t addr, const Transport* t, std::shared_ptr<const Registration> reg) {
  std::unique_lock lk(mu_);
  auto it = regions_.find(addr);
  if (it == regions_.end())
    return {Code::kNotRegistered, fmt::format("addr {:#x} is not the start of a registered region", addr)};
  // Tasks and plans may hold the list: a new one replaces it.
  auto more = it->second.registrations ? std::make_shared<Registrations>(*it->second.registrations)
                                       : std::make_shared<Registrations>();
  more->emplace_back(t, std::move(reg));
  it->second.registrations = std::move(more);
  return Status::OK();
}

std::vector<Region> MemoryRegistry::snapshot() const {
  std::shared_lock lk(mu_);
  std::vector<Region> out;
  out.reserve(regions_.size());
  for (auto& [a, r] : regions_) out.push_back(r);
  return out;
}

}  // namespace hawser
