#include "base/traffic_metrics.h"

namespace hawser::metrics {

namespace {
constexpr std::string_view kDirNames[2] = {"read", "write"};
}

PeerTraffic::PeerTraffic(std::shared_ptr<Registry> registry, std::string transport, std::string peer)
    : registry_(std::move(registry)), transport_(std::move(transport)), peer_(std::move(peer)) {
  Registry& r = *registry_;
  for (int i = 0; i < 2; ++i) {
    Dir& d = dir_[i];
    d.bytes = r.counters(kTransferredBytes).with({transport_, peer_, kDirNames[i]});
    d.slices = r.counters(kSlices).with({transport_, peer_, kDirNames[i]});
    d.tasks = r.counters(kTasks).with({transport_, peer_, kDirNames[i]});
    d.slice_seconds = r.histograms(kSliceSeconds).with({transport_, kDirNames[i]});
    d.task_seconds = r.histograms(kTaskSeconds).with({transport_, kDirNames[i]});
  }
  inflight_ = r.gauges(kInflightSlices).with({transport_, peer_});
  retries_ = r.counters(kRetries).with({transport_, peer_});
}

Counter* PeerTraffic::failure(std::atomic<Counter*>* slots, const FamilySpec& spec, int dir, Code code) {
  size_t i = static_cast<size_t>(code);
  if (i >= kCodes) i = static_cast<size_t>(Code::kInternal);
  Counter* c = slots[i].load(std::memory_order_acquire);
  if (c) return c;
  c = registry_->counters(spec).with({transport_, peer_, kDirNames[dir], codeName(static_cast<Code>(i))});
  slots[i].store(c, std::memory_order_release);  // the same pointer whoever stores it
  return c;
}

TrafficTable::TrafficTable(std::shared_ptr<Registry> registry, size_t max_peers)
    : registry_(std::move(registry)), max_peers_(max_peers) {
  for (const FamilySpec* s : {&kTransferredBytes, &kSlices, &kSliceFailures, &kTasks, &kTaskFailures, &kRetries})
    registry_->counters(*s);
  registry_->gauges(kInflightSlices);
  registry_->histograms(kSliceSeconds);
  registry_->histograms(kTaskSeconds);
}

std::shared_ptr<PeerTraffic> TrafficTable::get(const std::string& transport, const std::string& peer) {
  std::lock_guard lk(mu_);
  auto it = peers_.find({transport, peer});
  if (it != peers_.end()) return it->second;
  const bool named = named_ < max_peers_;
  const std::string label = named ? peer : std::string(kOtherPeers);
  if (!named) {
    auto other = peers_.find({transport, label});
    if (other != peers_.end()) return other->second;
  }
  auto t = std::make_shared<PeerTraffic>(registry_, transport, label);
  named_ += named;
  peers_.emplace(std::make_pair(transport, label), t);
  return t;
}

}  // namespace hawser::metrics
