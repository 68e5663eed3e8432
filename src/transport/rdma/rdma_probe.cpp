// RDMA NIC discovery, shared by the transport's install and probeNics().
#include "transport/rdma/rdma_probe.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/config.h"
#include "transport/rdma/rdma_nic.h"

namespace hawser::rdma {

std::vector<NicReport> scanNics(const VerbsApi& v, const Tunables& t, std::vector<OpenNic>* open,
                                std::string* error) {
  std::vector<NicReport> out;
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  if (!list) {
    if (error) *error = fmt::format("ibv_get_device_list failed: {}", std::strerror(errno));
    return out;
  }
  for (int i = 0; i < n; ++i) {
    NicInfo info;
    NicReport rep;
    const char* name = v.get_device_name(list[i]);
    if (!t.devices.empty() && std::find(t.devices.begin(), t.devices.end(), name ? name : "") == t.devices.end()) {
      rep.name = name ? name : "?";
      rep.reason = fmt::format("not listed in rdma.devices ({})", fmt::join(t.devices, ","));
      out.push_back(rep);
      continue;
    }
    ibv_context* ctx = nullptr;
    (void)inspectNic(v, list[i], t, ctx, info, rep);  // the reason is in rep
    if (ctx && open && rep.used) {
      open->push_back(OpenNic{ctx, std::move(info), out.size()});
    } else if (ctx) {
      v.close_device(ctx);
    }
    out.push_back(rep);
  }
  // Listed devices that do not exist are worth saying too.
  for (const std::string& want : t.devices) {
    bool found = std::any_of(out.begin(), out.end(), [&](const NicReport& r) { return r.name == want; });
    if (!found) {
      NicReport rep;
      rep.name = want;
      rep.reason = "listed in rdma.devices but not present";
      out.push_back(rep);
    }
  }
  v.free_device_list(list);
  if (n == 0 && error) *error = "no RDMA devices found";
  return out;
}

std::vector<NicReport> probeNics(const Config& config, std::string* error) {
  Tunables t;
  Status s = t.load(config);
  const VerbsApi* v = nullptr;
  if (s.ok()) s = loadVerbs(t.verbs_lib, v);
  if (!s.ok()) {
    if (error) *error = s.message();
    return {};
  }
  return scanNics(*v, t, nullptr, error);
}

}  // namespace hawser::rdma
