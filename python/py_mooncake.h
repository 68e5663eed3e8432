// What Mooncake's users bring to the Python module and expect back from it:
// the MC_* environment variables they set (honoured, or reported once per
// process as ignored), the protocol names Mooncake accepts (one this host
// cannot honour falls back to tcp, as Mooncake does without an RDMA NIC),
// and the local topology in the JSON shape of Mooncake's
// get_local_topology(). Reports go to Python's logging (logger "hawser").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hawser/stats.h"

namespace hawser::pymod {

// One line for Python's logging; levels are logging's (INFO 20, WARNING 30).
struct LogLine {
  int level = 30;
  std::string text;
};
inline constexpr int kLogInfo = 20;
inline constexpr int kLogWarning = 30;

// Appends `text` unless a line with `key` was appended before in this process.
void noteOnce(std::vector<LogLine>& out, const std::string& key, int level, std::string text);
// Writes the lines to logging.getLogger("hawser") (GIL held).
void emitLog(const std::vector<LogLine>& lines);

// The MC_* variables that change what hawser does.
struct MooncakeEnv {
  bool force_tcp = false;              // MC_FORCE_TCP set (any value, as in Mooncake)
  bool force_hca = false;              // MC_FORCE_HCA set: protocol "rdma" without the fallback
  std::optional<int64_t> timeout_ms;   // MC_TRANSFER_TIMEOUT, when it is a number of seconds in 1..86400
};

// Reads every MC_* variable of the environment. A bad MC_TRANSFER_TIMEOUT and
// each variable hawser does not act on get one line (once per process).
MooncakeEnv readMooncakeEnv(std::vector<LogLine>& lines);

// True for a protocol name Mooncake's initialize() accepts ("rdma", "efa", ...).
bool isMooncakeProtocol(const std::string& lower_name);

// {"cpu:N": [[NICs on NUMA node N], [the other NICs]], ...} from the rdma
// transport's diagnosis ("NIC <name>" facts) and /sys/devices/system/node;
// `devices` (comma-separated, "" = all) keeps only the NICs it names.
std::string topologyJson(const std::vector<TransportDiagnosis>& diagnosis, const std::string& devices);

}  // namespace hawser::pymod
