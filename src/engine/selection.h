// Which transport serves a request: one function, one table.
//
// Every transport reports its caps (base/transport.h). For a request the
// candidates are the installed transports that
//   1. serve the segment's kind (memory or file),
//   2. move the kind of the local buffer (host or GPU memory),
//   3. move the kind of the remote buffer (memory segments),
//   4. are on the same host as the peer, when the transport needs that,
//   5. decoded the peer's descriptor (openPeer succeeded);
// the one with the lowest cost rank wins (ties: by name). Each transport
// declares its rank in caps(); `hawser doctor --ranks` lists those of the
// build, and docs/architecture.md ("Selection") holds that list, generated.
//
// Config key `transport` (HAWSER_TRANSPORT) forces one transport for memory
// segments; file segments still go to the transport that serves files.
//
// A route contract (hawser/types.h RouteContract; config route.transports,
// route.require; docs/routes.md) narrows the candidates to the transports it
// allows that give the properties it requires. A request no candidate can
// serve under its contract, where one could without it, is refused with
// contractRefusal's message.
//
// A fallback: the chosen transport is costlier than one the contract allows
// that fits the request by its caps but declined the peer (Route::counts:
// a refusal the transport classified, a same-host transport across network
// namespaces of one kernel, a transport not installed here that the peer
// publishes). RouteChoice::fallback names the cheapest such one; the engine
// counts it (hawser_route_fallbacks_total) and warns once per peer and reason.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/route.h"
#include "base/traffic_metrics.h"
#include "base/transport.h"
#include "hawser/status.h"
#include "metadata/descriptor.h"

namespace hawser {

// One transport's view of an open segment.
struct Route {
  Transport* transport = nullptr;    // null: a transport of the build not installed here
  std::string name;                  // the transport's name
  TransportCaps caps;                // its caps, taken once when the view is made
  std::shared_ptr<PeerHandle> peer;  // null when it cannot serve the segment
  Status refusal;                    // why (when peer is null)
  RouteDecline decline;              // the same, classified (reason kNone when peer is set)
  bool counts = false;               // passing it over for a costlier one is a fallback
  // The transport's variant (Transport::variant: file's "gds"): it shares the
  // transport's peer and declines requests per peer (variantDeclines).
  bool variant = false;
  std::shared_ptr<metrics::PeerTraffic> traffic;  // where its tasks are counted (when peer is set)
};

// An open segment's descriptor and every installed transport's view of it.
// The metadata store's change count at which a view's descriptor was last
// found unchanged (EngineImpl::currentView; MetadataStore::changeCount),
// written only when it moves. Copyable, so that a view stays a value.
struct UnchangedAt {
  UnchangedAt() = default;
  UnchangedAt(const UnchangedAt& o) : count(o.count.load(std::memory_order_relaxed)) {}
  UnchangedAt& operator=(const UnchangedAt& o) {
    count.store(o.count.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  mutable std::atomic<uint64_t> count{0};  // 0: never
};

struct SegmentView {
  std::shared_ptr<const SegmentDesc> desc;
  UnchangedAt unchanged_at;
  bool same_host = false;  // the owner shares this engine's host id
  // A transport resolves its name (file://...), not the store: the store
  // is never asked whether it changed (set once, by makeView).
  bool scheme_owned = false;
  std::vector<Route> routes;
  // Transports of the build not installed here (transport null); counts
  // where the peer's engine publishes it.
  std::vector<Route> absent;
  bool any_counts = false;  // some route or absent one counts (else no fallback is looked for)
};

struct RouteQuery {
  uint32_t local_kind = kHostMemory;
  uint32_t remote_kind = kHostMemory;  // memory segments only
  int buffer = -1;  // the remote buffer, where one is known (Transport::declinesBuffer)
};

// A request's contract, resolved (the request's own or the engine's).
struct Contract {
  uint32_t transports = 0;  // RouteTransport bits; 0: any
  uint32_t require = 0;     // RouteProperty bits
  bool any() const { return transports != 0 || require != 0; }
};

struct RouteChoice {
  const Route* route = nullptr;     // null: none can serve it
  const Route* fallback = nullptr;  // set: the cheaper transport that declined (see above)
  RouteDecline fallback_why;        // and why: its decline of the peer, or of the request's buffer
};

// The properties `caps` gives a request of `q` on a segment of kind `file`.
uint32_t routeProperties(const TransportCaps& caps, const RouteQuery& q, bool file);

// The route for `q` on `view` under `contract`; `why` (optional) says why,
// naming each candidate passed over. On the submit path `why` is asked for
// only once no route was found (it formats a message per candidate).
RouteChoice selectRoute(const SegmentView& view, const RouteQuery& q, const std::string& forced,
                        const Contract& contract, std::string* why = nullptr);
inline const Route* selectRoute(const SegmentView& view, const RouteQuery& q, const std::string& forced,
                                std::string* why = nullptr) {
  return selectRoute(view, q, forced, Contract{}, why).route;
}

// Whether `route` may serve `q` under `contract` (and config 'transport'
// `forced`): what selectRoute asks of every candidate. Where the transport
// opened the peer but declines `q`'s remote buffer, `buffer` says why.
bool routeServes(const SegmentView& view, const Route& route, const RouteQuery& q, const std::string& forced,
                 const Contract& contract, RouteDecline* buffer = nullptr);
// Selection's order: cost rank, then name.
bool cheaperRoute(const Route& a, const Route& b);

// kNoTransport for a request `contract` forbids (selectRoute under it found
// none, without it `would`): the transport it would have taken, the better
// one expected (the cheapest the contract allows that fits the request by
// its caps) and why that one is unavailable. `source` names where the
// contract came from ("config route.*", "the request").
Status contractRefusal(const SegmentView& view, const RouteQuery& q, const Contract& contract, const Route& would,
                       const char* source);

}  // namespace hawser
