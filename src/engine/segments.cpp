// Segments: descriptors fetched from metadata (or resolved by the
// transport that owns the name's scheme, e.g. file://), decoded once per
// transport into peer handles; the open ones are kept, and refreshed when
// the owner changes them, by OpenSegments (open_segments.h).
#include <algorithm>

#include <fmt/format.h>

#include "base/log.h"
#include "engine/engine_impl.h"

namespace hawser {

Transport* EngineImpl::schemeOwner(const std::string& name) const {
  for (auto& [scheme, t] : schemes_)
    if (name.rfind(scheme, 0) == 0) return t;
  return nullptr;
}

Status EngineImpl::fetchSegment(const std::string& name, SegmentDesc& out) {
  if (Transport* t = schemeOwner(name)) return t->resolveSegment(name, out);
  return store_->getSegment(name, out);
}

std::shared_ptr<const SegmentView> EngineImpl::makeView(SegmentDesc desc) const {
  auto view = std::make_shared<SegmentView>();
  view->desc = std::make_shared<const SegmentDesc>(std::move(desc));
  const SegmentDesc& d = *view->desc;
  view->same_host = d.kind == SegmentDesc::Kind::kMemory && !d.host_id.empty() && d.host_id == host_id_;
  view->scheme_owned = schemeOwner(d.name) != nullptr;
  const bool file = d.kind == SegmentDesc::Kind::kFile;
  for (auto& t : transports_) {
    const TransportCaps c = t->caps();
    if (file ? !c.file_segments : !c.memory_segments) continue;
    Route r;
    r.transport = t.get();
    r.name = t->name();
    r.caps = c;
    if (c.same_host_only && !view->same_host) {
      r.refusal = {Code::kNotSupported, "the peer is on another host"};
      // The host id is the kernel's boot id (containers of one host share
      // it): a same-host transport says itself why it cannot reach a peer
      // in another namespace.
      r.decline = {RouteReason::kOtherHost, "the peer is on another host"};
    } else {
      r.refusal = t->openRoute(d, r.peer, r.decline);
      if (r.refusal.ok() && !r.peer) r.refusal = {Code::kInternal, "openPeer returned no handle"};
      if (!r.refusal.ok()) {
        r.peer.reset();
        if (!r.decline.declined()) r.decline = {RouteReason::kRefused, r.refusal.message()};
        r.counts = true;
        HLOG_DEBUG("segment '{}': transport {} cannot serve it: {}", d.name, t->name(), r.refusal.toString());
      } else {
        r.decline = {};
        r.traffic = traffic_->get(t->name(), d.name);
      }
    }
    view->any_counts |= r.counts;
    TransportVariant var;
    if (r.peer && t->variant(var)) {
      // Its own route on the same peer; it declines per request
      // (Transport::variantDeclines), as a buffer is declined.
      Route v;
      v.transport = t.get();
      v.name = std::move(var.name);
      v.caps = var.caps;
      v.peer = r.peer;
      v.traffic = r.traffic;
      v.variant = true;
      view->routes.push_back(std::move(r));
      view->routes.push_back(std::move(v));
      continue;
    }
    view->routes.push_back(std::move(r));
  }
  // Transports this build has but this host did not install (what a route
  // contract expected may be one). Passing one over is a fallback where the
  // peer's engine did install it: a request goes slower than both ends could.
  if (!file)
    for (const Route& a : absent_) {
      if (!a.caps.memory_segments) continue;
      view->absent.push_back(a);
      Route& r = view->absent.back();
      r.counts = d.transports.count(a.name) && (!a.caps.same_host_only || view->same_host);
      view->any_counts |= r.counts;
    }
  return view;
}

Status EngineImpl::openSegment(const std::string& name, SegmentID& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  return segments_.open(name, out);
}

Status EngineImpl::closeSegment(SegmentID id) {
  Status s = checkInit();
  if (!s.ok()) return s;
  return segments_.close(id);
}

Status EngineImpl::segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto v = refreshSegment(id);
  if (!v) v = segmentView(id);
  if (!v) return {Code::kSegmentNotFound, fmt::format("segment id {} is not open", id)};
  const SegmentDesc& d = *v->desc;
  out.clear();
  if (d.kind == SegmentDesc::Kind::kFile) {
    uint64_t off = 0;
    for (auto& f : d.files) {
      out.push_back(SegmentBuffer{off, f.length, f.file_path});
      off += f.length;
    }
  } else {
    // In the owner's registration order (a descriptor without it: by address).
    std::vector<const BufferDesc*> order;
    for (auto& b : d.buffers) order.push_back(&b);
    std::stable_sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->seq < y->seq; });
    for (auto* b : order) out.push_back(SegmentBuffer{b->addr, b->length, b->location});
  }
  return Status::OK();
}

Status EngineImpl::probeSegment(const std::string& name) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (name.empty()) return {Code::kInvalidArgument, "segment name is empty"};
  SegmentDesc d;
  return fetchSegment(name, d);
}

Status EngineImpl::explainRoute(SegmentID id, const std::string& local_location, RouteExplanation& out) {
  Status s = checkInit();
  if (!s.ok()) return s;
  auto v = currentView(id);
  if (!v) return {Code::kSegmentNotFound, fmt::format("segment id {} is not open", id)};
  RouteQuery q;
  q.local_kind = memoryKindOf(local_location);
  // The remote end: the kind of memory the segment publishes (the local
  // kind when it publishes both, host memory when it publishes none).
  uint32_t published = 0;
  if (v->desc->kind == SegmentDesc::Kind::kMemory)
    for (auto& b : v->desc->buffers) published |= memoryKindOf(b.location);
  q.remote_kind = (published & q.local_kind) ? q.local_kind : (published & kGpuMemory) ? kGpuMemory : kHostMemory;
  // The first buffer of that kind stands for the others (a transport may
  // decline single buffers: Transport::declinesBuffer).
  if (v->desc->kind == SegmentDesc::Kind::kMemory)
    for (size_t i = 0; i < v->desc->buffers.size() && q.buffer < 0; ++i)
      if (memoryKindOf(v->desc->buffers[i].location) == q.remote_kind) q.buffer = static_cast<int>(i);
  const RouteChoice c = selectRoute(*v, q, forced_transport_, contract_, &out.why);
  const Route* r = c.route;
  if (!r && contract_.any())
    if (const Route* would = selectRoute(*v, q, forced_transport_)) {
      Status refusal = contractRefusal(*v, q, contract_, *would, "config route.transports/route.require");
      out.why = refusal.message();
    }
  out.transport = r ? r->name : "";
  out.fallback_from = c.fallback ? c.fallback->name : "";
  out.fallback_reason = c.fallback ? std::string(routeReasonName(c.fallback_why.reason)) : "";
  out.fallback_detail = c.fallback ? c.fallback_why.text : "";
  if (r && r->peer)
    if (std::string m = r->peer->mechanism(); !m.empty()) out.why += fmt::format("; {}: {}", out.transport, m);
  if (v->desc->kind == SegmentDesc::Kind::kMemory)
    out.why = fmt::format("to the peer's {} memory: {}", q.remote_kind == kGpuMemory ? "GPU" : "host", out.why);
  return Status::OK();
}

Status EngineImpl::registerFileSegment(const std::string& name, const std::vector<FileDesc>& files) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (name.empty()) return {Code::kInvalidArgument, "file segment name is empty"};
  if (name.find("://") != std::string::npos)
    return {Code::kInvalidArgument, fmt::format("file segment name '{}' must not contain a scheme (://)", name)};
  if (files.empty()) return {Code::kInvalidArgument, fmt::format("file segment '{}' has no files", name)};
  for (size_t i = 0; i < files.size(); ++i) {
    if (files[i].length == 0)
      return {Code::kInvalidArgument, fmt::format("file segment '{}': files[{}].length is 0", name, i)};
    if (files[i].file_path.empty() && files[i].local_path_map.empty())
      return {Code::kInvalidArgument, fmt::format("file segment '{}': files[{}] has no path", name, i)};
  }
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = name;
  d.files = files;
  return store_->putFileSegment(d);
}

Status EngineImpl::unregisterFileSegment(const std::string& name) {
  Status s = checkInit();
  if (!s.ok()) return s;
  return store_->removeSegment(name);
}

}  // namespace hawser
