// `hawser doctor`: what this host has, through the engine's public API.
// Each transport of the build says whether it installed here (or why not),
// what it moves, its cost rank and what it found (NICs, io_uring, ...);
// with --peer, which transport each kind of local memory would take to that
// peer, and why. Also: GPUs the CUDA driver sees, and whether the metadata
// service answers.
//   hawser doctor --ranks [--markdown]   the transports of this build in the
//       order selection prefers them (cost rank from each one's caps(), ties
//       by name); --markdown: the table README.md and docs/architecture.md
//       hold (cmake/config_docs.cmake fails when they drift)
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "hawser/config.h"
#include "hawser/device_memory.h"
#include "hawser/engine.h"
#include "tools/commands.h"

namespace hawser::tools {

namespace {

using json = nlohmann::json;

// GPUs are a fact of the host, not of one transport: the driver engines
// load (config gpu.cuda_driver), and what it sees.
json probeGpus() {
  json j;
  std::string path;
  (void)configValue("gpu.cuda_driver", EngineOptions{}, path);
  j["driver"] = path;
  Status s = loadCudaDriver();
  j["count"] = cudaDeviceCount();
  if (!s.ok()) j["reason"] = s.message() + " (GPU memory is then refused at registration)";
  return j;
}

json diagnosis(const TransportDiagnosis& d) {
  json j;
  j["name"] = d.transport;
  j["installed"] = d.installed;
  if (!d.installed) j["reason"] = d.reason;
  j["cost_rank"] = d.cost_rank;
  j["moves"] = d.moves;
  json facts = json::object();
  for (auto& [k, v] : d.facts) facts[k] = v;
  j["facts"] = facts;
  // The typed records (hawser/stats.h DeviceRecord), each with the fields
  // its kind fills.
  json devices = json::array();
  for (const DeviceRecord& r : d.devices) {
    json dev = {{"kind", deviceKindName(r.kind)}, {"name", r.name}, {"used", r.used}};
    if (!r.used) dev["reason"] = r.reason;
    if (!r.mode.empty()) dev["mode"] = r.mode;
    if (r.kind == DeviceRecord::Kind::kNic || r.kind == DeviceRecord::Kind::kGpu) {
      dev["index"] = r.index;
      dev["numa_node"] = r.numa_node;
    }
    if (r.kind == DeviceRecord::Kind::kNic) dev["port"] = r.port;
    if (r.kind == DeviceRecord::Kind::kGpu) dev["pci_bus_id"] = r.pci_bus_id;
    devices.push_back(std::move(dev));
  }
  j["devices"] = std::move(devices);
  return j;
}

int runDoctor(const std::string& metadata, const std::string& peer, bool as_json) {
  json out;
  out["version"] = "0.1.0";
  out["gpus"] = probeGpus();
  auto engine = std::make_unique<TransferEngine>();
  Status s = engine->init(metadata, "doctor", "127.0.0.1", 0);
  out["metadata"] = {{"uri", metadata}, {"reachable", s.ok()}};
  if (!s.ok()) {
    out["metadata"]["error"] = s.toString();
    // Still say what the transports find here, without the metadata service.
    if (metadata != "p2p") {
      engine = std::make_unique<TransferEngine>();
      s = engine->init("p2p", "doctor", "127.0.0.1", 0);
    }
  }
  TransferEngine& e = *engine;
  if (!s.ok()) {
    out["engine"] = s.toString();
  } else {
    json ts = json::array();
    for (auto& d : e.diagnose()) ts.push_back(diagnosis(d));
    out["transports"] = ts;
  }
  if (!peer.empty() && s.ok()) {
    SegmentID seg;
    Status ps = e.openSegment(peer, seg);
    json p = {{"name", peer}};
    if (!ps.ok()) {
      p["error"] = ps.toString();
    } else {
      for (const char* loc : {"cpu:0", "cuda:0"}) {
        RouteExplanation r;
        Status rs = e.explainRoute(seg, loc, r);
        json route = rs.ok() ? json{{"transport", r.transport}, {"why", r.why}} : json{{"error", rs.toString()}};
        // A fallback: the cheaper transport that declined, why (the reason
        // label of hawser_route_fallbacks_total) and its words.
        if (rs.ok() && !r.fallback_from.empty())
          route["fallback"] = {{"from", r.fallback_from},
                               {"to", r.transport},
                               {"reason", r.fallback_reason},
                               {"detail", r.fallback_detail}};
        p["routes"][loc] = route;
      }
    }
    out["peer"] = p;
  }
  if (as_json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("hawser {}\n", out["version"].get<std::string>());
  fmt::print("GPUs: {} (CUDA driver {}){}\n", out["gpus"]["count"].get<int>(), out["gpus"]["driver"].get<std::string>(),
             out["gpus"].contains("reason") ? " (" + out["gpus"]["reason"].get<std::string>() + ")" : "");
  fmt::print("metadata {}: {}\n", metadata,
             out["metadata"]["reachable"].get<bool>() ? "reachable" : out["metadata"]["error"].get<std::string>());
  if (out.contains("engine")) fmt::print("engine: {}\n", out["engine"].get<std::string>());
  if (out.contains("transports")) {
    for (auto& t : out["transports"]) {
      fmt::print("transport {}: {} (rank {}; {})\n", t["name"].get<std::string>(),
                 t["installed"].get<bool>() ? "installed" : "not installed: " + t["reason"].get<std::string>(),
                 t["cost_rank"].get<int>(), t["moves"].get<std::string>());
      for (auto& [k, v] : t["facts"].items()) fmt::print("  {}: {}\n", k, v.get<std::string>());
    }
  }
  if (out.contains("peer")) {
    auto& p = out["peer"];
    if (p.contains("error")) {
      fmt::print("peer {}: {}\n", peer, p["error"].get<std::string>());
    } else {
      for (auto& [loc, r] : p["routes"].items()) {
        if (r.contains("error"))
          fmt::print("peer {} from {} memory: {}\n", peer, loc, r["error"].get<std::string>());
        else
          fmt::print("peer {} from {} memory: {} ({})\n", peer, loc,
                     r["transport"].get<std::string>().empty() ? "no transport" : r["transport"].get<std::string>(),
                     r["why"].get<std::string>());
        if (r.contains("fallback"))
          fmt::print("  fallback {} -> {}: {}: {}\n", r["fallback"]["from"].get<std::string>(),
                     r["fallback"]["to"].get<std::string>(), r["fallback"]["reason"].get<std::string>(),
                     r["fallback"]["detail"].get<std::string>());
      }
    }
  }
  return 0;
}

int printRanks(bool markdown) {
  TransferEngine e;
  Status s = e.init("p2p", "doctor", "127.0.0.1", 0);
  if (!s.ok()) {
    fmt::print(stderr, "hawser doctor --ranks: {}\n", s.toString());
    return 1;
  }
  std::vector<TransportDiagnosis> ds = e.diagnose();
  std::stable_sort(ds.begin(), ds.end(), [](const TransportDiagnosis& a, const TransportDiagnosis& b) {
    return a.cost_rank != b.cost_rank ? a.cost_rank < b.cost_rank : a.transport < b.transport;
  });
  if (markdown) fmt::print("| transport | cost rank |\n| --- | --- |\n");
  for (const auto& d : ds) {
    if (markdown)
      fmt::print("| `{}` | {} |\n", d.transport, d.cost_rank);
    else
      fmt::print("{} {}\n", d.transport, d.cost_rank);
  }
  return 0;
}

}  // namespace

void addDoctor(CLI::App& app, Commands& cmds) {
  auto metadata = std::make_shared<std::string>("p2p");
  auto peer = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto ranks = std::make_shared<bool>(false);
  auto markdown = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("doctor", "Report what this host has: transports, NICs, GPUs, io_uring, metadata");
  sub->add_option("--metadata", *metadata, "metadata URI to check")->capture_default_str();
  sub->add_option("--peer", *peer, "a segment (HOST:PORT, a name, file:///path): which transport each memory kind takes");
  sub->add_flag("--json", *as_json, "print one JSON object");
  sub->add_flag("--ranks", *ranks, "only the transports of this build by cost rank, as selection prefers them");
  sub->add_flag("--markdown", *markdown, "with --ranks: as a Markdown table (the one README.md and docs hold)");
  sub->callback([&cmds, metadata, peer, as_json, ranks, markdown] {
    cmds.run = [metadata, peer, as_json, ranks, markdown] {
      if (*ranks) return printRanks(*markdown);
      return runDoctor(*metadata, *peer, *as_json);
    };
  });
}

}  // namespace hawser::tools
