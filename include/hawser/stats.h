// hawser — what an engine reports about itself: counters per transport,
// and a diagnosis per transport (why it is or is not installed, what it
// moves, what it found on this host).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hawser {

// Named monotonic counters (or gauges, where the name says "open"/"inflight").
using Counters = std::vector<std::pair<std::string, uint64_t>>;

struct TransportStats {
  std::string transport;  // "tcp", "file", ...
  Counters counters;
};

struct EngineStats {
  Counters engine;                         // batches, tasks, bytes by outcome
  std::vector<TransportStats> transports;  // one per installed transport
};

struct TransportDiagnosis {
  std::string transport;
  bool installed = false;
  std::string reason;  // why not installed ("" when installed)
  int cost_rank = 0;   // lower is preferred when several can serve a request
  std::string moves;   // what it can move, e.g. "memory segments; local host memory; remote host memory"
  std::vector<std::pair<std::string, std::string>> facts;  // what it found (NICs, io_uring, ...)
};

// Which transport the engine picks for one kind of request, and why.
struct RouteExplanation {
  std::string transport;  // "" when none can serve it
  std::string why;        // the rule that decided, and each candidate refused with its reason
};

}  // namespace hawser
