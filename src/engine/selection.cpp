#include "engine/selection.h"

#include <fmt/format.h>

#include <string_view>

namespace hawser {

namespace {

const char* kindName(uint32_t k) { return k == kGpuMemory ? "GPU memory" : "host memory"; }

bool isFile(const SegmentView& view) { return view.desc->kind == SegmentDesc::Kind::kFile; }

// Empty when `caps` moves the kinds of `q` on a segment like `view`'s; else why not.
const char* unfitKinds(const SegmentView& view, const TransportCaps& c, const RouteQuery& q) {
  const bool file = isFile(view);
  if (file && !c.file_segments) return "serves no file segments";
  if (!file && !c.memory_segments) return "serves no memory segments";
  if (!(c.local_memory & q.local_kind)) return q.local_kind == kGpuMemory ? "does not move local GPU memory"
                                                                          : "does not move local host memory";
  if (!file && !(c.remote_memory & q.remote_kind))
    return q.remote_kind == kGpuMemory ? "does not move remote GPU memory" : "does not move remote host memory";
  return nullptr;
}

// Why a route that opened the peer declines `q` (kNone: it does not): its
// transport declines the remote buffer, or the variant the peer.
RouteDecline declines(const Route& route, const RouteQuery& q) {
  if (route.variant) return route.transport->variantDeclines(*route.peer);
  if (route.caps.buffer_declines && q.buffer >= 0) return route.transport->declinesBuffer(*route.peer, q.buffer);
  return {};
}

// Whether `route` may not serve `q` on `view`; why not in `why` (when
// asked: a submit only wants the answer). A transport that opened the peer
// but declines the request (its buffer; a variant: the peer) says why in `buf`.
bool unfit(const SegmentView& view, const Route& route, const RouteQuery& q, RouteDecline& buf, std::string* why) {
  auto no = [why](const std::string_view text) {
    if (why) *why = text;
    return true;
  };
  if (const char* kinds = unfitKinds(view, route.caps, q)) return no(kinds);
  if (route.caps.same_host_only && !view.same_host) return no("needs both ends on one host");
  if (!route.peer) return no(route.refusal.message().empty() ? "cannot reach the peer" : route.refusal.message());
  buf = declines(route, q);
  if (buf.declined()) return no(buf.text);
  return false;
}

bool cheaper(const Route& a, const Route& b) {
  return a.caps.cost_rank != b.caps.cost_rank ? a.caps.cost_rank < b.caps.cost_rank : a.name < b.name;
}

bool allows(const Contract& c, const Route& r, const RouteQuery& q, bool file) {
  // A variant is its transport's ("file" allows "gds").
  if (c.transports && !(routeTransportBit(r.transport ? r.transport->name() : r.name) & c.transports)) return false;
  return (routeProperties(r.caps, q, file) & c.require) == c.require;
}

std::string contractText(const Contract& c) {
  std::string t = c.transports ? "transports " + routeTransportNames(c.transports) : "";
  if (c.require) t += (t.empty() ? "" : ", ") + std::string("require ") + routePropertyNames(c.require);
  return t;
}

// Whether `r` may not serve `q` under `forced` and `contract`; why not in
// `why`, when asked (`buf`: as unfit's).
bool passOver(const SegmentView& view, const Route& r, const RouteQuery& q, const std::string& forced,
              const Contract& contract, RouteDecline& buf, std::string* why) {
  const bool file = isFile(view);
  if (!forced.empty() && !file && forced != r.name) {
    if (why) *why = fmt::format("not {} (forced by config 'transport')", forced);
    return true;
  }
  if (contract.any() && !allows(contract, r, q, file)) {
    if (why) *why = "not allowed by the route contract";
    return true;
  }
  return unfit(view, r, q, buf, why);
}

}  // namespace

bool cheaperRoute(const Route& a, const Route& b) { return cheaper(a, b); }

bool routeServes(const SegmentView& view, const Route& route, const RouteQuery& q, const std::string& forced,
                 const Contract& contract, RouteDecline* buffer) {
  RouteDecline buf;
  const bool ok = !passOver(view, route, q, forced, contract, buf, nullptr);
  if (buffer) *buffer = std::move(buf);
  return ok;
}

uint32_t routeProperties(const TransportCaps& caps, const RouteQuery& q, bool file) {
  const uint32_t kinds = file ? q.local_kind : (q.local_kind | q.remote_kind);
  return (kinds & kGpuMemory) ? caps.gpu_properties : caps.host_properties;
}

RouteChoice selectRoute(const SegmentView& view, const RouteQuery& q, const std::string& forced,
                        const Contract& contract, std::string* why) {
  RouteChoice out;
  std::string passed;
  const bool file = isFile(view);
  const bool contracted = contract.any();
  const bool unforced = forced.empty() || file;
  // A transport that opened the peer but declined this request's buffer:
  // a fallback candidate of its own (the cheapest one).
  const Route* buffer_declined = nullptr;
  RouteDecline buffer_why;
  for (const Route& r : view.routes) {
    RouteDecline buf;
    std::string no;
    const bool passed_over = passOver(view, r, q, forced, contract, buf, why ? &no : nullptr);
    if (buf.declined() && (!buffer_declined || cheaper(r, *buffer_declined))) {
      buffer_declined = &r;
      buffer_why = std::move(buf);
    }
    if (passed_over) {
      if (why) passed += fmt::format("{}{}: {}", passed.empty() ? "" : "; ", r.name, no);
      continue;
    }
    if (!out.route || cheaper(r, *out.route)) out.route = &r;
  }
  // A cheaper transport the contract allows that fits the request but
  // declined: the fallback (not when one transport is forced).
  if (out.route && unforced && (view.any_counts || buffer_declined)) {
    auto consider = [&](const Route& r) {
      if (!r.counts || r.peer || !cheaper(r, *out.route) || unfitKinds(view, r.caps, q)) return;
      if (contracted && !allows(contract, r, q, file)) return;
      if (!out.fallback || cheaper(r, *out.fallback)) out.fallback = &r;
    };
    if (view.any_counts) {
      for (const Route& r : view.routes) consider(r);
      for (const Route& r : view.absent) consider(r);
    }
    if (out.fallback) out.fallback_why = out.fallback->decline;
    if (buffer_declined && cheaper(*buffer_declined, *out.route) &&
        (!out.fallback || cheaper(*buffer_declined, *out.fallback))) {
      out.fallback = buffer_declined;
      out.fallback_why = std::move(buffer_why);
    }
  }
  if (why) {
    if (out.route)
      *why = fmt::format("{} (rank {}) is the cheapest transport that can serve it{}{}", out.route->name,
                         out.route->caps.cost_rank, passed.empty() ? "" : "; passed over: ", passed);
    else
      *why = passed.empty() ? "no transport is installed" : passed;
    if (out.fallback)
      *why += fmt::format("; a fallback from {} ({}: {})", out.fallback->name,
                          routeReasonName(out.fallback_why.reason), out.fallback_why.text);
  }
  return out;
}

Status contractRefusal(const SegmentView& view, const RouteQuery& q, const Contract& contract, const Route& would,
                       const char* source) {
  const bool file = isFile(view);
  // The expected route: the cheapest transport of the build (installed or
  // not) that the contract allows and that moves these kinds.
  const Route* expected = nullptr;
  auto consider = [&](const Route& r) {
    if (unfitKinds(view, r.caps, q) || !allows(contract, r, q, file)) return;
    if (!expected || cheaper(r, *expected)) expected = &r;
  };
  for (const Route& r : view.routes) consider(r);
  for (const Route& r : view.absent) consider(r);
  std::string unavailable;
  if (!expected) {
    // Nothing of this build would do: say what the route taken lacks.
    std::string lacks;
    const uint32_t missing = contract.require & ~routeProperties(would.caps, q, file);
    for (uint32_t bit = 1; bit && bit <= missing; bit <<= 1) {
      if (!(missing & bit)) continue;
      const uint32_t kinds = file ? q.local_kind : (q.local_kind | q.remote_kind);
      RouteDecline d = would.transport ? would.transport->lacks(bit, kinds) : RouteDecline{};
      if (d.text.empty()) d.text = would.name + " does not give " + std::string(routePropertyName(bit));
      lacks += fmt::format("{}{}{}", lacks.empty() ? "" : "; ",
                           d.declined() ? std::string(routeReasonName(d.reason)) + ": " : "", d.text);
    }
    if (contract.transports && !(routeTransportBit(would.name) & contract.transports))
      lacks += fmt::format("{}{} is not among the allowed transports", lacks.empty() ? "" : "; ", would.name);
    unavailable = fmt::format("no transport of this build that the contract allows moves {} to {}{}",
                              kindName(q.local_kind), file ? "a file segment" : kindName(q.remote_kind),
                              lacks.empty() ? "" : " (" + lacks + ")");
  } else if (expected->peer) {
    // It opened the peer: it declined the request (its buffer; a variant:
    // the peer), or config 'transport' forces another.
    const RouteDecline d = declines(*expected, q);
    unavailable = d.declined() ? fmt::format("the expected route, {}, is unavailable: {}: {}", expected->name,
                                             routeReasonName(d.reason), d.text)
                               : fmt::format("the expected route, {}, is not the transport forced by config "
                                             "'transport'", expected->name);
  } else {
    RouteDecline d = expected->decline;
    if (!d.declined() && expected->caps.same_host_only && !view.same_host)
      d = {RouteReason::kOtherHost, "the peer is on another host"};
    if (!d.declined()) d = {RouteReason::kRefused, expected->refusal.message()};
    unavailable = fmt::format("the expected route, {}, is unavailable: {}: {}", expected->name,
                              routeReasonName(d.reason), d.text);
  }
  return {Code::kNoTransport,
          fmt::format("segment '{}': the route contract ({}, from {}) forbids the route this request would take, {}; "
                      "{}",
                      view.desc->name, contractText(contract), source, would.name, unavailable)};
}

}  // namespace hawser
