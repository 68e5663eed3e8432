#include "engine/selection.h"

#include <fmt/format.h>

namespace hawser {

namespace {

const char* kindName(uint32_t k) { return k == kGpuMemory ? "GPU memory" : "host memory"; }

// Empty when `route` may serve `q` on `view`; else why not.
std::string unfit(const SegmentView& view, const Route& route, const RouteQuery& q) {
  const TransportCaps& c = route.caps;
  const bool file = view.desc->kind == SegmentDesc::Kind::kFile;
  if (file && !c.file_segments) return "serves no file segments";
  if (!file && !c.memory_segments) return "serves no memory segments";
  if (!(c.local_memory & q.local_kind)) return fmt::format("does not move local {}", kindName(q.local_kind));
  if (!file && !(c.remote_memory & q.remote_kind))
    return fmt::format("does not move remote {}", kindName(q.remote_kind));
  if (c.same_host_only && !view.same_host) return "needs both ends on one host";
  if (!route.peer) return route.refusal.message().empty() ? "cannot reach the peer" : route.refusal.message();
  return {};
}

}  // namespace

const Route* selectRoute(const SegmentView& view, const RouteQuery& q, const std::string& forced, std::string* why) {
  const Route* best = nullptr;
  int best_rank = 0;
  std::string passed;
  const bool file = view.desc->kind == SegmentDesc::Kind::kFile;
  for (const Route& r : view.routes) {
    std::string no;
    if (!forced.empty() && !file && forced != r.transport->name())
      no = fmt::format("not {} (forced by config 'transport')", forced);
    else
      no = unfit(view, r, q);
    if (!no.empty()) {
      if (why) passed += fmt::format("{}{}: {}", passed.empty() ? "" : "; ", r.transport->name(), no);
      continue;
    }
    const int rank = r.caps.cost_rank;
    if (!best || rank < best_rank ||
        (rank == best_rank && std::string_view(r.transport->name()) < best->transport->name())) {
      best = &r;
      best_rank = rank;
    }
  }
  if (why) {
    if (best)
      *why = fmt::format("{} (rank {}) is the cheapest transport that can serve it{}{}", best->transport->name(),
                         best_rank, passed.empty() ? "" : "; passed over: ", passed);
    else
      *why = passed.empty() ? "no transport is installed" : passed;
  }
  return best;
}

}  // namespace hawser
