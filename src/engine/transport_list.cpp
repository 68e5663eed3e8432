#include "engine/transport_list.h"

#include <mutex>

namespace hawser {

namespace {
std::mutex g_mu;
std::vector<TransportFactory>& registered() {
  static std::vector<TransportFactory> v;
  return v;
}
}  // namespace

void registerTransportFactory(const TransportFactory& f) {
  std::lock_guard lk(g_mu);
  for (auto& r : registered())
    if (r.name == f.name) {
      r = f;
      return;
    }
  registered().push_back(f);
}

bool unregisterTransportFactory(const std::string& name) {
  std::lock_guard lk(g_mu);
  auto& v = registered();
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
