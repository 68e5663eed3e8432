#include "py_mooncake.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "py_support.h"

extern char** environ;

namespace hawser::pymod {

namespace {

std::mutex g_noted_mu;
std::set<std::string> g_noted;  // keys of the lines already written in this process

// Mooncake's variables hawser does not read, with what to use instead.
const std::map<std::string_view, std::string_view>& ignoredHints() {
  static const std::map<std::string_view, std::string_view> hints = {
      {"MC_TCP_BIND_ADDRESS", "hawser listens on, and advertises, the host of initialize()'s local_hostname"},
      {"MC_TCP_ENABLE_CONNECTION_POOL", "hawser always keeps HAWSER_TCP_CONNECTIONS connections per peer"},
      {"MC_TCP_LANES_PER_PEER", "hawser keeps HAWSER_TCP_CONNECTIONS connections per peer"},
      {"MC_TCP_SLICE_SIZE", "hawser's is HAWSER_TCP_SLICE_SIZE"},
      {"MC_SLICE_SIZE", "hawser's is HAWSER_RDMA_SLICE_SIZE"},
      {"MC_MIN_RPC_PORT", "hawser listens on the port of local_hostname, or a free one"},
      {"MC_MAX_RPC_PORT", "hawser listens on the port of local_hostname, or a free one"},
      {"MC_NUM_QP_PER_EP", "hawser's is HAWSER_RDMA_QPS_PER_PEER"},
      {"MC_WORKERS_PER_CTX", "hawser's is HAWSER_RDMA_WORKERS"},
      {"MC_RETRY_CNT", "hawser's is HAWSER_RDMA_RETRY_LIMIT"},
      {"MC_GID_INDEX", "hawser's is HAWSER_RDMA_GID_INDEX"},
      {"MC_MTU", "hawser's is HAWSER_RDMA_MTU"},
      {"MC_IB_PORT", "hawser uses each NIC's first active port"},
      {"MC_HANDSHAKE_MAX_LENGTH", "hawser's descriptors have no such limit"},
      {"MC_METADATA_SERVER", "pass the server to initialize()"},
      {"MC_USE_TENT", "hawser has one engine"},
      {"MC_USE_TEV1", "hawser has one engine"},
  };
  return hints;
}

// Variables hawser acts on (read by readMooncakeEnv), or that describe what
// hawser does anyway: MC_LEGACY_RPC_PORT_BINDING (hawser always listens on
// the port local_hostname names).
bool honoured(std::string_view name) {
  return name == "MC_FORCE_TCP" || name == "MC_FORCE_HCA" || name == "MC_TRANSFER_TIMEOUT" ||
         name == "MC_LEGACY_RPC_PORT_BINDING";
}

}  // namespace

void noteOnce(std::vector<LogLine>& out, const std::string& key, int level, std::string text) {
  {
    std::lock_guard lk(g_noted_mu);
    if (!g_noted.insert(key).second) return;
  }
  out.push_back(LogLine{level, std::move(text)});
}

void emitLog(const std::vector<LogLine>& lines) {
  if (lines.empty()) return;
  py::object logger = py::module_::import("logging").attr("getLogger")("hawser");
  for (auto& l : lines) logger.attr("log")(l.level, l.text);
}

MooncakeEnv readMooncakeEnv(std::vector<LogLine>& lines) {
  MooncakeEnv env;
  env.force_tcp = std::getenv("MC_FORCE_TCP") != nullptr;
  env.force_hca = std::getenv("MC_FORCE_HCA") != nullptr;
  if (const char* mc = std::getenv("MC_TRANSFER_TIMEOUT")) {
    std::string_view t(mc);
    int64_t sec = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), sec);
    if (!t.empty() && ec == std::errc() && p == t.data() + t.size() && sec >= 1 && sec <= 86400)
      env.timeout_ms = sec * 1000;
    else
      noteOnce(lines, fmt::format("MC_TRANSFER_TIMEOUT={}", mc), kLogWarning,
               fmt::format("MC_TRANSFER_TIMEOUT = '{}' is not a number of seconds in 1..86400: ignored, sync "
                           "transfers time out after python.sync_timeout_ms (HAWSER_PYTHON_SYNC_TIMEOUT_MS)",
                           mc));
  }
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (entry.rfind("MC_", 0) != 0) continue;
    std::string name(entry.substr(0, entry.find('=')));
    if (honoured(name)) continue;
    auto it = ignoredHints().find(name);
    std::string why = it != ignoredHints().end() ? std::string(it->second)
                                                 : std::string("`hawser config` lists hawser's tunables");
    noteOnce(lines, name, kLogWarning, fmt::format("{} is Mooncake's and hawser ignores it: {}", name, why));
  }
  return env;
}

bool isMooncakeProtocol(const std::string& name) {
  static const std::set<std::string> known = {"rdma",  "tcp",  "efa",          "cxi",    "barex",   "nvlink",
                                              "nvlink_intra", "hip", "musa",  "maca",   "cxl",     "ub",
                                              "ascend", "ubshmem", "nccl", "sunrise_link", "nvmeof"};
  return known.count(name) > 0;
}

std::string topologyJson(const std::vector<TransportDiagnosis>& diagnosis, const std::string& devices) {
  std::set<std::string> wanted;
  for (size_t start = 0; start <= devices.size();) {
    size_t comma = std::min(devices.find(',', start), devices.size());
    std::string d = devices.substr(start, comma - start);
    d.erase(0, d.find_first_not_of(' '));
    d.erase(d.find_last_not_of(' ') + 1);
    if (!d.empty()) wanted.insert(d);
    start = comma + 1;
  }
  // NIC name -> NUMA node (-1 unknown), for the NICs the rdma transport
  // uses: its typed device records.
  std::vector<std::pair<std::string, int>> nics;
  for (auto& d : diagnosis) {
    if (d.transport != "rdma" || !d.installed) continue;
    for (const DeviceRecord& r : d.devices) {
      if (r.kind != DeviceRecord::Kind::kNic || !r.used) continue;
      if (!wanted.empty() && !wanted.count(r.name)) continue;
      nics.emplace_back(r.name, r.numa_node);
    }
  }
  std::set<int> nodes;
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    std::string f = entry.path().filename().string();
    if (f.rfind("node", 0) == 0 && f.size() > 4 && std::all_of(f.begin() + 4, f.end(), ::isdigit))
      nodes.insert(std::stoi(f.substr(4)));
  }
  if (nodes.empty()) nodes.insert(0);
  nlohmann::json out = nlohmann::json::object();
  for (int n : nodes) {
    nlohmann::json preferred = nlohmann::json::array(), other = nlohmann::json::array();
    for (auto& [name, node] : nics) (node == n ? preferred : other).push_back(name);
    out[fmt::format("cpu:{}", n)] = nlohmann::json::array({preferred, other});
  }
  return out.dump();
}

}  // namespace hawser::pymod
