// Tunables of the rdma transport and per-NIC inspection (port, link layer,
// GID choice, NUMA node), shared by the transport and probeNics().
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "transport/rdma/rdma_probe.h"
#include "transport/rdma/verbs_api.h"

namespace hawser {
class Config;
}

namespace hawser::rdma {

// Every key is documented with its default in docs/rdma.md.
struct Tunables {
  std::string verbs_lib = "libibverbs.so.1";  // rdma.verbs_lib
  std::vector<std::string> devices;           // rdma.devices ("" = all)
  int gid_index = -1;                         // rdma.gid_index (-1 = auto)
  uint32_t qps_per_peer = 2;                  // rdma.qps_per_peer
  uint32_t max_wr = 256;                      // rdma.max_wr: outstanding WRs per QP
  uint64_t slice_size = 64 << 10;             // rdma.slice_size
  uint32_t retry_limit = 8;                   // rdma.retry_limit
  uint32_t workers = 0;                       // rdma.workers (0 = min(NICs, 4))
  uint32_t cq_entries = 16384;                // rdma.cq_entries (per NIC)
  int mtu = 4096;                             // rdma.mtu: upper bound on path MTU
  uint8_t timeout = 14;                       // rdma.qp_timeout (4.096 us * 2^x)
  uint8_t retry_cnt = 7;                      // rdma.qp_retry_cnt
  uint8_t rnr_retry = 7;                      // rdma.qp_rnr_retry (7 = infinite)
  uint8_t min_rnr_timer = 12;                 // rdma.qp_min_rnr_timer (12 = 0.64 ms)
  uint8_t traffic_class = 0;                  // rdma.traffic_class (RoCE GRH)
  uint8_t service_level = 0;                  // rdma.service_level
  uint8_t hop_limit = 64;                     // rdma.hop_limit (RoCE v2 GRH)
  uint64_t pretouch_threshold = 4ull << 30;   // rdma.pretouch_threshold
  uint32_t pretouch_threads = 8;              // rdma.pretouch_threads
  bool relaxed_ordering = true;               // rdma.relaxed_ordering
  uint32_t connect_timeout_ms = 5000;         // rdma.connect_timeout_ms
  uint32_t poll_spin_us = 50;                 // rdma.poll_spin_us
  uint32_t flush_timeout_ms = 2000;           // rdma.flush_timeout_ms

  // kInvalidArgument naming the key and the value at fault.
  Status load(const Config& c);
};

// One usable entry of a port's GID table (RoCE).
struct GidChoice {
  int index = -1;
  ibv_gid gid{};
  uint32_t type = IBV_GID_TYPE_ROCE_V2;  // ibv_gid_type
};

struct NicInfo {
  std::string name;
  std::string ibdev_path;
  int numa = -1;
  uint8_t port = 0;
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  int gid_index = -1;
  ibv_gid gid{};
  std::string gid_type;
  // RoCE: every usable GID, preferred first (gids[0] is gid_index); only
  // the one rdma.gid_index names when it is set. The handshake picks, per
  // peer NIC, an entry of the type and address family the peer has too.
  std::vector<GidChoice> gids;
  uint16_t lid = 0;
  ibv_mtu active_mtu = IBV_MTU_1024;
  ibv_device_attr dev_attr{};

  bool ib() const { return link_layer != IBV_LINK_LAYER_ETHERNET; }
};

// Opens `dev` and decides whether it can be used (an ACTIVE port; a LID on
// InfiniBand; a usable GID on RoCE). On success `ctx` is the open context
// (the caller owns it) and `info` is filled; on failure the context is
// closed and the Status says why. `report` is filled either way.
Status inspectNic(const VerbsApi& v, ibv_device* dev, const Tunables& t, ibv_context*& ctx, NicInfo& info,
                  NicReport& report);

// A NIC scanNics() found usable, its context left open (the caller owns it).
struct OpenNic {
  ibv_context* ctx = nullptr;
  NicInfo info;
  size_t report = 0;  // index of its NicReport
};

// Reports every device `v` lists under t.devices / t.gid_index (and each
// device t.devices names that is not present). With `open`, usable NICs stay
// open and are returned there; without, they are closed. *error is set when
// the device list cannot be read or is empty.
std::vector<NicReport> scanNics(const VerbsApi& v, const Tunables& t, std::vector<OpenNic>* open,
                                std::string* error);

// Preference of a GID: RoCE v2 with an IPv4-mapped address (routable, what
// RoCE fabrics are configured for), then RoCE v2 global IPv6, then RoCE v2
// link-local, then RoCE v1 (IPv4, then the rest). Higher is better.
int gidScore(const ibv_gid& g, uint32_t type);
// "RoCE v2" | "RoCE v1" | "IB"; gidTypeFromName() inverts it (false: unknown).
const char* gidTypeName(uint32_t type);
bool gidTypeFromName(const std::string& name, uint32_t& type);
// "IPv4" (IPv4-mapped), "IPv6 link-local" or "IPv6": the packets of a RoCE v2
// GID are of this family, and both ends of a connection must share it.
const char* gidFamily(const ibv_gid& g);
// The pair of GIDs an RC connection between two RoCE ports uses: one entry
// of each side of the same type and address family, the best such pair by
// the sum of gidScore(). False when the sides share no type and family.
bool pickGidPair(const std::vector<GidChoice>& a, const std::vector<GidChoice>& b, size_t& ai, size_t& bi);

std::string gidToString(const ibv_gid& g);          // "fe80:0000:...", 8 groups
bool gidFromString(const std::string& s, ibv_gid& g);  // accepts gidToString's output
int mtuBytes(ibv_mtu m);
ibv_mtu mtuFromBytes(int bytes);  // largest enum <= bytes (min 256)

}  // namespace hawser::rdma
