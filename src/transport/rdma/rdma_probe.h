// RDMA NIC discovery: what this host has and why each NIC is or is not used.
// The rdma transport installs on the NICs probeNics() reports as used, and its
// diagnose() (what `hawser doctor` prints) carries each NIC and why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hawser {
class Config;
}

namespace hawser::rdma {

struct NicReport {
  std::string name;          // ibverbs device name ("mlx5_0")
  bool used = false;         // the rdma transport would use this NIC
  std::string reason;        // why not (empty when used)
  int numa_node = -1;        // from sysfs <ibdev_path>/device/numa_node; -1 unknown
  int port = 0;              // active port chosen (1-based); 0 none
  std::string port_state;    // "ACTIVE", "DOWN", ...
  std::string link_layer;    // "InfiniBand" | "Ethernet"
  int gid_index = -1;        // RoCE: chosen GID index; -1 for IB (LID routed)
  std::string gid;           // text form of the chosen GID
  std::string gid_type;      // "RoCE v2" | "RoCE v1" | "IB"
  uint16_t lid = 0;          // IB: port LID
  int active_mtu = 0;        // bytes
  uint32_t max_qp_wr = 0;    // device limit on WRs per QP
};

// Opens every device the verbs library lists (config "rdma.verbs_lib"),
// applies the "rdma.devices" filter and "rdma.gid_index", and reports each.
// When the library itself cannot be loaded, or a tunable is invalid, the
// result is empty and *error (if given) says why.
std::vector<NicReport> probeNics(const Config& config, std::string* error = nullptr);

}  // namespace hawser::rdma
