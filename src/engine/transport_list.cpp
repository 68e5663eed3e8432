#include "engine/transport_list.h"

#include <algorithm>
#include <mutex>

#include "base/knob_registry.h"

namespace hawser {

namespace {
std::mutex g_mu;
std::vector<TransportFactory>& registered() {
  static std::vector<TransportFactory> v;
  return v;
}
}  // namespace

Status registerTransportFactory(const TransportFactory& f) {
  std::lock_guard lk(g_mu);
  auto same = std::find_if(registered().begin(), registered().end(),
                           [&](const TransportFactory& r) { return r.name == f.name; });
  if (same != registered().end() && !same->knobs.empty()) unregisterKnobTable(f.name);
  if (!f.knobs.empty()) {
    Status s = registerKnobTable({f.name, f.knobs});
    if (!s.ok()) {
      if (same != registered().end() && !same->knobs.empty()) (void)registerKnobTable({same->name, same->knobs});
      return s;
    }
  }
  if (same != registered().end()) {
    *same = f;
  } else {
    registered().push_back(f);
  }
  return Status::OK();
}

bool unregisterTransportFactory(const std::string& name) {
  std::lock_guard lk(g_mu);
  auto& v = registered();
  for (auto& r : v)
    if (r.name == name && !r.knobs.empty()) unregisterKnobTable(name);
  return std::erase_if(v, [&](const TransportFactory& r) { return r.name == name; }) > 0;
}

std::vector<TransportFactory> transportFactories() {
  std::vector<TransportFactory> out;
  std::lock_guard lk(g_mu);
  for (auto& b : builtinTransports()) {
    bool replaced = false;
    for (auto& r : registered()) replaced |= r.name == b.name;
    if (!replaced) out.push_back(b);
  }
  for (auto& r : registered()) out.push_back(r);
  return out;
}

}  // namespace hawser
