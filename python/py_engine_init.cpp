// PyEngine::init (py_engine.h): initialize() with Mooncake's protocol argument,
// MC_* variables and python.* knobs, falling back to tcp as Mooncake does.
#include "py_engine.h"

#include <algorithm>

namespace hawser::pymod {

Status PyEngine::init(const std::string& local_hostname, const std::string& uri, const std::string& protocol,
                      const std::string& device_name, const std::map<std::string, std::string>& config) {
  std::lock_guard lk(init_mu_);
  if (live())
    return {Code::kInvalidArgument,
            fmt::format("initialize: already initialized (segment '{}')", engine_->segmentName())};
  std::string host;
  uint16_t port = 0;
  Status s = splitHostPort(local_hostname, host, port);
  if (!s.ok()) return context(s, "initialize");
  const MooncakeEnv mc = readMooncakeEnv(log_);
  EngineOptions opts;
  for (const auto& [k, v] : config) opts.config[k] = v;  // validated by init(), naming the key
  // Every python.* knob is in the config table (hawser/config.h): read
  // through the public API, validated as init() validates it.
  ConfigSource src = ConfigSource::kDefault;
  std::string text;
  std::string proto = lower(protocol);
  if (!(s = configValue("transport", opts, text, &src)).ok()) return context(s, "initialize");
  const bool operator_forced = src != ConfigSource::kDefault;  // HAWSER_TRANSPORT
  std::string forced;                                          // what the protocol argument (or MC_FORCE_TCP) forces
  if (!operator_forced) {
    if (mc.force_tcp)
      forced = "tcp";
    else if (!proto.empty() && proto != "auto")
      forced = proto;
    if (!forced.empty()) opts.config["transport"] = forced;
  }
  if (!device_name.empty()) {
    if (!(s = configValue("rdma.devices", opts, text, &src)).ok()) return context(s, "initialize");
    if (src == ConfigSource::kDefault) opts.config["rdma.devices"] = device_name;
  }

  if (!(s = configInt("python.sync_timeout_ms", opts, limits_.sync_timeout_ms, &src)).ok())
    return context(s, "initialize");
  // Mooncake's knob (seconds) is honoured when ours is not set.
  if (src == ConfigSource::kDefault && mc.timeout_ms) limits_.sync_timeout_ms = *mc.timeout_ms;
  int64_t pool = 0;
  if (!(s = configInt("python.sync_timeout_ns_per_byte", opts, limits_.ns_per_byte)).ok() ||
      !(s = configInt("python.cancel_wait_ms", opts, limits_.cancel_wait_ms)).ok() ||
      !(s = configInt("python.managed_pool_size", opts, pool)).ok())
    return context(s, "initialize");
  managed_.setPoolSize(static_cast<uint64_t>(pool));

  auto e = std::make_unique<TransferEngine>();
  s = e->init(uri, local_hostname, host, port, opts);
  // The forced transport is not in this build (init refuses config
  // `transport` as a bad value), or is and cannot install here (no NIC, no
  // verbs library: kNoTransport).
  const std::vector<std::string> built = TransferEngine::builtTransports();
  const bool not_built = s.code() == Code::kInvalidArgument && !forced.empty() &&
                         std::find(built.begin(), built.end(), forced) == built.end();
  const bool cannot_install = s.code() == Code::kNoTransport;
  if ((not_built || cannot_install) && !forced.empty() && forced != "tcp" && isMooncakeProtocol(forced) &&
      !(forced == "rdma" && mc.force_hca)) {
    log_.push_back(
        LogLine{kLogWarning, fmt::format("initialize: protocol '{}' cannot be used on this host ({}); using tcp, as "
                                         "Mooncake does without an RDMA NIC (HAWSER_TRANSPORT={} fails instead)",
                                         protocol, s.message(), forced)});
    opts.config["transport"] = "tcp";
    e = std::make_unique<TransferEngine>();
    s = e->init(uri, local_hostname, host, port, opts);
  } else if (not_built && !forced.empty()) {
    return {Code::kNotSupported, fmt::format("initialize: protocol '{}' is not supported: {}", protocol, s.message())};
  } else if (cannot_install && !forced.empty()) {
    return {s.code(), fmt::format("initialize: protocol '{}': {}; pass an installed transport or \"auto\" "
                                  "(or set HAWSER_TRANSPORT, which wins over the argument)",
                                  protocol, s.message())};
  }
  if (!s.ok()) return context(s, "initialize");
  engine_ = std::move(e);
  inited_.store(true, std::memory_order_release);
  return Status::OK();
}

}  // namespace hawser::pymod
