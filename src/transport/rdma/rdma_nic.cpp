#include "transport/rdma/rdma_nic.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"
#include "transport/rdma/rdma_config.h"

namespace hawser::rdma {

namespace {

std::string readLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

const char* portStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "UNKNOWN";
  }
}

bool ipv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i] != 0) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

bool linkLocal(const ibv_gid& g) { return g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80; }

bool gidZero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

// One GID table entry: value and type. False when the entry is empty.
bool readGid(const VerbsApi& v, ibv_context* ctx, const NicInfo& info, int idx, ibv_gid& gid, uint32_t& type) {
  if (v.query_gid_ex) {
    ibv_gid_entry e{};
    if (v.query_gid_ex(ctx, info.port, static_cast<uint32_t>(idx), &e, 0, sizeof(e)) != 0) return false;
    gid = e.gid;
    type = e.gid_type;
    return !gidZero(gid);
  }
  if (v.query_gid(ctx, info.port, idx, &gid) != 0 || gidZero(gid)) return false;
  if (info.ib()) {
    type = IBV_GID_TYPE_IB;
  } else {
    // Older libibverbs: the kernel tells the type through sysfs.
    std::string t = readLine(fmt::format("{}/ports/{}/gid_attrs/types/{}", info.ibdev_path, info.port, idx));
    type = t.find("v2") != std::string::npos ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  }
  return true;
}

}  // namespace

const char* gidTypeName(uint32_t t) {
  switch (t) {
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    default: return "IB";
  }
}

bool gidTypeFromName(const std::string& name, uint32_t& type) {
  for (uint32_t t : {uint32_t(IBV_GID_TYPE_ROCE_V2), uint32_t(IBV_GID_TYPE_ROCE_V1), uint32_t(IBV_GID_TYPE_IB)})
    if (name == gidTypeName(t)) {
      type = t;
      return true;
    }
  return false;
}

const char* gidFamily(const ibv_gid& g) {
  if (ipv4Mapped(g)) return "IPv4";
  return linkLocal(g) ? "IPv6 link-local" : "IPv6";
}

int gidScore(const ibv_gid& g, uint32_t type) {
  if (type == IBV_GID_TYPE_ROCE_V2) {
    if (ipv4Mapped(g)) return 40;
    return linkLocal(g) ? 20 : 30;
  }
  if (type == IBV_GID_TYPE_ROCE_V1) return ipv4Mapped(g) ? 15 : 10;
  return 5;
}

bool pickGidPair(const std::vector<GidChoice>& a, const std::vector<GidChoice>& b, size_t& ai, size_t& bi) {
  int best = -1;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b.size(); ++j) {
      if (a[i].type != b[j].type || std::strcmp(gidFamily(a[i].gid), gidFamily(b[j].gid)) != 0) continue;
      int score = gidScore(a[i].gid, a[i].type) + gidScore(b[j].gid, b[j].type);
      if (score > best) {
        best = score;
        ai = i;
        bi = j;
      }
    }
  return best >= 0;
}

// Types, defaults and ranges: rdma_config.h (kRdmaKnobs).
Status Tunables::load(const Config& config) {
  const RdmaConfig c(config);
  Status s;
  std::string list;
  if (!(s = c.getString("rdma.verbs_lib", verbs_lib)).ok() || !(s = c.getString("rdma.devices", list)).ok()) return s;
  devices.clear();
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) devices.push_back(item);
  }
  if (!(s = c.getInt("rdma.gid_index", gid_index)).ok() ||
      !(s = c.getInt("rdma.qps_per_peer", qps_per_peer)).ok() ||
      !(s = c.getInt("rdma.max_wr", max_wr)).ok() ||
      !(s = c.getSize("rdma.slice_size", slice_size)).ok() ||
      !(s = c.getInt("rdma.retry_limit", retry_limit)).ok() ||
      !(s = c.getInt("rdma.workers", workers)).ok() ||
      !(s = c.getInt("rdma.cq_entries", cq_entries)).ok() ||
      !(s = c.getInt("rdma.mtu", mtu)).ok() ||
      !(s = c.getInt("rdma.qp_timeout", timeout)).ok() ||
      !(s = c.getInt("rdma.qp_retry_cnt", retry_cnt)).ok() ||
      !(s = c.getInt("rdma.qp_rnr_retry", rnr_retry)).ok() ||
      !(s = c.getInt("rdma.qp_min_rnr_timer", min_rnr_timer)).ok() ||
      !(s = c.getInt("rdma.traffic_class", traffic_class)).ok() ||
      !(s = c.getInt("rdma.service_level", service_level)).ok() ||
      !(s = c.getInt("rdma.hop_limit", hop_limit)).ok() ||
      !(s = c.getSize("rdma.pretouch_threshold", pretouch_threshold)).ok() ||
      !(s = c.getInt("rdma.pretouch_threads", pretouch_threads)).ok() ||
      !(s = c.getBool("rdma.relaxed_ordering", relaxed_ordering)).ok() ||
      !(s = c.getInt("rdma.connect_timeout_ms", connect_timeout_ms)).ok() ||
      !(s = c.getInt("rdma.poll_spin_us", poll_spin_us)).ok() ||
      !(s = c.getInt("rdma.flush_timeout_ms", flush_timeout_ms)).ok())
    return s;
  return Status::OK();
}

std::string gidToString(const ibv_gid& g) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    if (i) out += ':';
    out += fmt::format("{:02x}{:02x}", g.raw[i], g.raw[i + 1]);
  }
  return out;
}

bool gidFromString(const std::string& s, ibv_gid& g) {
  if (s.size() != 39) return false;
  for (int i = 0; i < 8; ++i) {
    size_t pos = static_cast<size_t>(i) * 5;
    if (i && s[pos - 1] != ':') return false;
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data() + pos, s.data() + pos + 4, v, 16);
    if (ec != std::errc() || p != s.data() + pos + 4) return false;
    g.raw[2 * i] = static_cast<uint8_t>(v >> 8);
    g.raw[2 * i + 1] = static_cast<uint8_t>(v);
  }
  return true;
}

int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

ibv_mtu mtuFromBytes(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

Status inspectNic(const VerbsApi& v, ibv_device* dev, const Tunables& t, ibv_context*& ctx, NicInfo& info,
                  NicReport& rep) {
  info = NicInfo{};
  info.name = v.get_device_name(dev) ? v.get_device_name(dev) : "?";
  info.ibdev_path = dev->ibdev_path;
  rep = NicReport{};
  rep.name = info.name;
  std::string numa = readLine(info.ibdev_path + "/device/numa_node");
  if (!numa.empty()) {
    int n = -1;
    auto [p, ec] = std::from_chars(numa.data(), numa.data() + numa.size(), n);
    if (ec == std::errc()) info.numa = n < 0 ? -1 : n;
  }
  rep.numa_node = info.numa;
  auto fail = [&](Code code, std::string why) {
    if (ctx) v.close_device(ctx);
    ctx = nullptr;
    rep.used = false;
    rep.reason = why;
    return Status(code, fmt::format("rdma device {}: {}", info.name, why));
  };
  ctx = v.open_device(dev);
  if (!ctx) return fail(Code::kUnavailable, fmt::format("ibv_open_device failed: {}", std::strerror(errno)));
  int rc = v.query_device(ctx, &info.dev_attr);
  if (rc != 0) return fail(Code::kIoError, fmt::format("ibv_query_device failed: {}", std::strerror(rc)));
  rep.max_qp_wr = static_cast<uint32_t>(info.dev_attr.max_qp_wr);

  std::string states;
  ibv_port_attr pa{};
  for (uint8_t p = 1; p <= info.dev_attr.phys_port_cnt; ++p) {
    ibv_port_attr a{};
    if (v.queryPort(ctx, p, &a) != 0) continue;
    if (!states.empty()) states += ", ";
    states += fmt::format("port {} {}", p, portStateName(a.state));
    if (a.state == IBV_PORT_ACTIVE && info.port == 0) {
      info.port = p;
      pa = a;
    }
  }
  if (info.port == 0) {
    rep.port_state = states.empty() ? "none" : states;
    return fail(Code::kUnavailable, fmt::format("no ACTIVE port ({})", states.empty() ? "no ports" : states));
  }
  rep.port = info.port;
  rep.port_state = "ACTIVE";
  info.link_layer = pa.link_layer;
  info.lid = pa.lid;
  info.active_mtu = pa.active_mtu;
  rep.link_layer = info.ib() ? "InfiniBand" : "Ethernet";
  rep.lid = info.lid;
  rep.active_mtu = mtuBytes(info.active_mtu);

  if (info.ib()) {
    if (info.lid == 0) return fail(Code::kUnavailable, "InfiniBand port has LID 0 (is a subnet manager running?)");
    info.gid_type = "IB";
    if (t.gid_index >= 0) {
      // Only needed for routed (GRH) IB; kept so the override is honoured.
      uint32_t type = 0;
      if (t.gid_index >= pa.gid_tbl_len || !readGid(v, ctx, info, t.gid_index, info.gid, type))
        return fail(Code::kInvalidArgument, fmt::format("rdma.gid_index {}: no GID at that index", t.gid_index));
      info.gid_index = t.gid_index;
    }
  } else {
    int best = -1, best_score = -1;
    ibv_gid best_gid{};
    uint32_t best_type = 0;
    if (t.gid_index >= 0) {
      uint32_t type = 0;
      if (t.gid_index >= pa.gid_tbl_len || !readGid(v, ctx, info, t.gid_index, best_gid, type))
        return fail(Code::kInvalidArgument,
                    fmt::format("rdma.gid_index {}: GID entry is empty or out of the table (length {})",
                                t.gid_index, pa.gid_tbl_len));
      best = t.gid_index;
      best_type = type;
      info.gids.push_back(GidChoice{best, best_gid, best_type});
    } else {
      for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid g{};
        uint32_t type = 0;
        if (!readGid(v, ctx, info, i, g, type)) continue;
        if (type != IBV_GID_TYPE_ROCE_V1 && type != IBV_GID_TYPE_ROCE_V2) continue;
        info.gids.push_back(GidChoice{i, g, type});
        int sc = gidScore(g, type);
        if (sc > best_score) {
          best = i;
          best_score = sc;
          best_gid = g;
          best_type = type;
        }
      }
      std::stable_sort(info.gids.begin(), info.gids.end(), [](const GidChoice& x, const GidChoice& y) {
        return gidScore(x.gid, x.type) > gidScore(y.gid, y.type);
      });
    }
    if (best < 0) return fail(Code::kUnavailable, "no usable RoCE GID (is an IP address configured on its netdev?)");
    info.gid_index = best;
    info.gid = best_gid;
    info.gid_type = gidTypeName(best_type);
  }
  rep.gid_index = info.gid_index;
  rep.gid = info.gid_index >= 0 ? gidToString(info.gid) : "";
  rep.gid_type = info.gid_type;
  rep.used = true;
  return Status::OK();
}

}  // namespace hawser::rdma
