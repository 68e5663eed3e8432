// P2pStore, change notices: peers that fetched this engine's descriptor are
// told (kSegmentChangedCall, from a background thread) when it changes; a notice
// received marks the sender's segment as changed for mayHaveChanged().
#include <fmt/format.h>

#include "base/log.h"
#include "metadata/p2p_store.h"
#include "rpc/rpc.h"

namespace hawser {

Status P2pStore::publishLocal() {
  {
    std::lock_guard lk(sub_mu_);
    if (subscribers_.empty()) return Status::OK();
    dirty_ = true;
  }
  sub_cv_.notify_all();
  return Status::OK();
}

void P2pStore::notifier() {
  std::unique_lock lk(sub_mu_);
  while (true) {
    sub_cv_.wait(lk, [&] { return stopping_ || dirty_; });
    if (stopping_) return;
    dirty_ = false;
    std::set<std::string> subs = subscribers_;
    lk.unlock();
    std::vector<std::string> gone;
    for (auto& peer : subs) {
      std::string host, reply;
      uint16_t port = 0;
      if (!net::splitHostPort(peer, host, port).ok()) continue;
      Status s = rpc::call(host, port, kSegmentChangedCall.id, local_name_, reply, std::chrono::milliseconds(1000));
      if (!s.ok()) {
        HLOG_DEBUG("p2p: change notice to {} failed ({}); dropping it", peer, s.toString());
        gone.push_back(peer);
      }
    }
    lk.lock();
    for (auto& g : gone) subscribers_.erase(g);
  }
}

bool P2pStore::mayHaveChanged(const std::string& name, uint64_t) {
  std::lock_guard lk(sub_mu_);
  return changed_.erase(name) > 0;
}

}  // namespace hawser
