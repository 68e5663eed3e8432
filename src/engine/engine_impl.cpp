#include "engine/engine_impl.h"

#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <random>

#include "base/knob_registry.h"
#include "base/log.h"
#include "engine/transport_list.h"
#include "gpu/cuda_driver.h"

namespace hawser {

// The kernel's boot id: processes of one host share it whatever namespaces
// (containers) they run in. Whether a same-host transport reaches a peer
// across namespaces is that transport's to say (shm: its socket, nvlink:
// the driver), with the reason when it cannot.
std::string localHostId() {
  std::string id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, id);
  return id;
}

EngineImpl::EngineImpl() = default;

EngineImpl::~EngineImpl() { shutdown(); }

Status EngineImpl::checkInit() const {
  if (!initialized_) return {Code::kInvalidArgument, "engine is not initialized: call init() first"};
  return Status::OK();
}

TransportContext EngineImpl::transportContext() {
  TransportContext ctx;
  ctx.config = &config_;
  ctx.registry = &registry_;
  ctx.rpc = &rpc_;
  ctx.server_name = server_name_;
  ctx.host = host_;
  ctx.rpc_port = rpc_.port();
  ctx.metrics = metrics_;
  // Fallbacks a transport finds out as I/O runs (file: cuFile refused a file).
  ctx.fallback = [this](const std::string& segment, const std::string& from, const std::string& to,
                        const RouteDecline& why) {
    if (fallbacks_) fallbacks_->note(segment, from, to, why, 1);
  };
  return ctx;
}

void EngineImpl::abandonInit() {
  outbox_.stop();
  signals_.stop();
  rpc_.stop();
  for (auto& t : transports_) t->shutdown();
  transports_.clear();
  schemes_.clear();
}

namespace {

std::string movesOf(const TransportCaps& c) {
  std::vector<std::string> parts;
  if (c.memory_segments) parts.push_back("memory segments");
  if (c.file_segments) parts.push_back("file segments");
  auto kinds = [](uint32_t k) {
    std::vector<std::string> v;
    if (k & kHostMemory) v.push_back("host");
    if (k & kGpuMemory) v.push_back("GPU");
    return fmt::format("{}", fmt::join(v, "+"));
  };
  parts.push_back("local " + kinds(c.local_memory) + " memory");
  if (c.memory_segments) parts.push_back("remote " + kinds(c.remote_memory) + " memory");
  if (c.same_host_only) parts.push_back("same host only");
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

Status EngineImpl::init(const std::string& metadata_uri, const std::string& server_name, const std::string& host,
                        uint16_t rpc_port, const EngineOptions& options) {
  if (initialized_) return {Code::kInvalidArgument, "init() was already called on this engine"};
  // Every value, from the environment and from options, is validated
  // before anything starts (base/knob_registry.h has the keys).
  std::vector<std::string> unknown_env;
  Config config = Config::fromEnv(&unknown_env);
  warnUnknownEnvOnce(unknown_env);
  for (auto& [k, v] : options.config) {
    if (!findKnob(k))
      return {Code::kInvalidArgument,
              fmt::format("init: EngineOptions::config key '{}' (value '{}') is not a hawser config key "
                          "(`hawser config` lists them)",
                          k, v)};
    config.set(k, v, ConfigSource::kOptions);
  }
  Status s = config.validate();
  if (!s.ok()) return {s.code(), "init: " + s.message()};
  config_ = config;
  if (!(s = applyLogLevel(config_)).ok()) return s;
  server_name_ = server_name;
  host_ = host.empty() ? "127.0.0.1" : host;
  if (server_name_.empty()) server_name_ = host_;
  host_id_ = localHostId();
  incarnation_ = (uint64_t(std::random_device{}()) << 32 | std::random_device{}()) | 1;  // never 0
  std::string auth_token;
  if (!(s = config_.getString("transport", forced_transport_)).ok() ||
      !(s = config_.getSize("batch.slices_per_task", slices_per_task_)).ok() ||
      !(s = config_.getSize("batch.max_capacity", max_capacity_)).ok() ||
      !(s = config_.getInt("batch.wait_spin_us", wait_spin_us_)).ok() ||
      !(s = config_.getBool("batch.recycle", recycle_batches_)).ok() ||
      !(s = config_.getString("auth.token", auth_token)).ok() ||
      !(s = config_.getSize("block.max_run", block_settings_.max_run)).ok() ||
      !(s = config_.getSize("block.window", block_settings_.window)).ok() ||
      !(s = config_.getSize("block.run_window", block_settings_.run_window)).ok() ||
      !(s = config_.getSize("block.first_run_window", block_settings_.first_run_window)).ok() ||
      !(s = config_.getInt("block.lanes", block_settings_.lanes)).ok())
    return {s.code(), "init: " + s.message()};
  {
    std::string transports, require;
    if (!(s = config_.getString("route.transports", transports)).ok() ||
        !(s = config_.getString("route.require", require)).ok())
      return {s.code(), "init: " + s.message()};
    contract_ = {};
    if (!(s = parseRouteTransports(transports, contract_.transports)).ok())
      return {s.code(), fmt::format("init: config route.transports (env HAWSER_ROUTE_TRANSPORTS) = '{}': {}",
                                    transports, s.message())};
    if (!(s = parseRouteProperties(require, contract_.require)).ok())
      return {s.code(), fmt::format("init: config route.require (env HAWSER_ROUTE_REQUIRE) = '{}': {}", require,
                                    s.message())};
  }
  fallbacks_ = std::make_unique<RouteFallbacks>(metrics_);
  pump_ = std::make_unique<BlockPump>();
  uint32_t max_peers = 0;
  if (!(s = config_.getInt("metrics.max_peers", max_peers)).ok()) return {s.code(), "init: " + s.message()};
  traffic_ = std::make_unique<metrics::TrafficTable>(metrics_, max_peers);
  wait_spin_ = std::make_unique<WaitSpin>(std::chrono::microseconds(wait_spin_us_));
  batches_.configure({max_capacity_, slices_per_task_, wait_spin_.get(), recycle_batches_ ? &segments_ : nullptr,
                      recycle_batches_ ? &registry_ : nullptr});
  // The CUDA driver, where there is one: registration asks it what memory
  // it is given, and the transports use it to move GPU memory.
  std::string cuda_driver;
  if (!(s = config_.getString("gpu.cuda_driver", cuda_driver)).ok()) return {s.code(), "init: " + s.message()};
  if (!cuda_driver.empty()) (void)gpu::CudaDriver::load(cuda_driver);
  if (forced_transport_ == "auto") forced_transport_.clear();
  if (forced_transport_ == "nvmeof") forced_transport_ = "file";  // the reference's name for it
  if (!forced_transport_.empty()) {
    // A name this build does not have is a bad value (kInvalidArgument); one
    // it has that cannot run here is kNoTransport, below, once installed.
    std::vector<std::string> names;
    for (auto& f : transportFactories()) names.push_back(f.name);
    if (std::find(names.begin(), names.end(), forced_transport_) == names.end()) {
      KnobValue raw;
      ConfigSource src = ConfigSource::kDefault;
      (void)config_.lookup("transport", raw, &src);
      return {Code::kInvalidArgument,
              fmt::format("init: config transport (env HAWSER_TRANSPORT) = '{}' from {}: expected auto or one of "
                          "this build's transports: {}",
                          raw.text, sourceName(src), fmt::join(names, ", "))};
    }
  }
  rpc::setAuthToken(auth_token);

  s = makeMetadataStore(metadata_uri, config_, &rpc_, store_);
  if (!s.ok()) return s;
  // A control connection whose peer vanished in silence is found by
  // keepalive within a few rpc timeouts (data connections: tcp.timeout_ms);
  // the listener's bounds against peers that hold connections or memory.
  rpc::ServerLimits limits;
  if (!(s = rpc::ServerLimits::fromConfig(config_, limits)).ok()) return {s.code(), "init: " + s.message()};
  rpc_.setLimits(limits);
  s = rpc_.start(host_, rpc_port);
  if (!s.ok()) return {s.code(), fmt::format("init: rpc listener on {}:{}: {}", host_, rpc_port, s.message())};
  segment_name_ = store_->localSegmentName(server_name_, host_, rpc_.port());
  if (!(s = startNotifications()).ok()) {
    abandonInit();
    return s;
  }

  // Install every transport of the build. One that cannot run on this host
  // says kNotSupported and is left out (doctor shows why); any other error
  // is a broken transport or a bad setting, and fails init.
  const TransportContext ctx = transportContext();
  diagnoses_.clear();
  absent_.clear();
  for (auto& f : transportFactories()) {
    std::unique_ptr<Transport> t = f.make();
    TransportDiagnosis d;
    d.transport = t->name();
    Status ts = t->install(ctx);
    d.installed = ts.ok();
    d.reason = ts.ok() ? "" : ts.message();
    d.cost_rank = t->caps().cost_rank;
    d.moves = movesOf(t->caps());
    t->diagnose(d);
    diagnoses_.push_back(std::move(d));
    if (ts.ok()) {
      HLOG_INFO("transport {} installed", t->name());
      transports_.push_back(std::move(t));
    } else if (ts.code() == Code::kNotSupported) {
      HLOG_INFO("transport {} not installed: {}", t->name(), ts.message());
      Route a;
      a.name = t->name();
      a.caps = t->caps();
      a.refusal = ts;
      a.decline = {t->absentReason(), "not installed on this host: " + ts.message()};
      a.counts = true;
      absent_.push_back(std::move(a));
    } else {
      abandonInit();
      return {ts.code(), fmt::format("init: transport {} failed to install: {}", f.name, ts.message())};
    }
  }
  sortTransports();
  if (!forced_transport_.empty()) {
    bool found = false;
    for (auto& t : transports_) found |= forced_transport_ == t->name();
    if (!found) {
      const std::string installed = fmt::format("{}", fmt::join(transportNames(), ","));
      std::string why = "it did not install";
      for (auto& d : diagnoses_)
        if (d.transport == forced_transport_ && !d.reason.empty()) why = d.reason;
      abandonInit();
      return {Code::kNoTransport, fmt::format("transport '{}' (forced by config 'transport') cannot run here: {} "
                                              "(installed: {})",
                                              forced_transport_, why, installed)};
    }
  }
  s = store_->start(segment_name_, [this] { return localDescriptor(); });
  if (!s.ok()) {
    abandonInit();
    return s;
  }
  initialized_ = true;
  HLOG_INFO("engine '{}' serving segment '{}' on {}:{}", server_name_, segment_name_, host_, rpc_.port());
  return Status::OK();
}

void EngineImpl::sortTransports() {
  std::stable_sort(transports_.begin(), transports_.end(), [](auto& a, auto& b) {
    auto ra = a->caps().cost_rank, rb = b->caps().cost_rank;
    return ra != rb ? ra < rb : std::string_view(a->name()) < b->name();
  });
  schemes_.clear();
  for (auto& t : transports_)
    if (std::string scheme = t->caps().segment_scheme; !scheme.empty()) schemes_.emplace_back(scheme, t.get());
}

Status EngineImpl::installTransport(std::unique_ptr<Transport> t) {
  Status s = checkInit();
  if (!s.ok()) return s;
  const TransportContext ctx = transportContext();
  s = t->install(ctx);
  if (!s.ok()) return s;
  // The memory registered so far, registered in it; then it is installed
  // and the descriptor published, all under the registrar's lock.
  return registrar_.addTransport(*t, [&] {
    TransportDiagnosis d;
    d.transport = t->name();
    d.installed = true;
    d.cost_rank = t->caps().cost_rank;
    d.moves = movesOf(t->caps());
    t->diagnose(d);
    diagnoses_.push_back(std::move(d));
    transports_.push_back(std::move(t));
    sortTransports();
  });
}

void EngineImpl::shutdown() {
  if (!initialized_) return;
  // Give in-flight batches a bounded chance to finish.
  std::vector<std::shared_ptr<Batch>> live = batches_.live();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& b : live) b->waitUntil(deadline);
  pump_->stop();  // block requests: runs not yet started end FAILED
  outbox_.stop();  // sends what is ready; what still waits for its transfer fails (receivers are told)
  signals_.stop();  // waits end (FAILED: shutting down)
  store_->stop();
  rpc_.stop();
  for (auto& t : transports_) t->shutdown();
  batches_.clear();
  segments_.clear();
  live.clear();
  transports_.clear();
  schemes_.clear();
  initialized_ = false;
}

SegmentDesc EngineImpl::localDescriptor() const {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = segment_name_;
  d.host = host_;
  d.rpc_port = rpc_.port();
  d.host_id = host_id_;
  d.server_name = server_name_;
  d.pid = ::getpid();
  d.generation = registry_.version();
  for (auto& t : transports_) {
    nlohmann::json a = nlohmann::json::object();
    t->describe(a);
    d.transports[t->name()] = std::move(a);
  }
  d.buffers = registrar_.buffers();
  return d;
}

std::vector<std::string> EngineImpl::transportNames() const {
  std::vector<std::string> out;
  for (auto& t : transports_) out.push_back(t->name());
  return out;
}

EngineStats EngineImpl::stats() {
  batches_.reapOrphans();
  EngineStats s;
  const size_t orphans = batches_.orphans();
  const size_t live = batches_.open();
  s.engine = {{"batches_allocated", batches_.allocated()},
              {"batches_open", live},
              {"tasks_submitted", n_tasks_.value()},
              {"submits_refused", n_refused_.value()},
              {"sync_timeouts", n_sync_timeouts_.value()},
              {"orphan_batches", orphans},
              {"orphan_batches_reaped", batches_.reaped()},
              {"notifies_delivered", outbox_.delivered()},
              {"notifies_failed", outbox_.failed()},
              {"notifies_received", inbox_.received()},
              {"notifies_refused_queue_full", inbox_.refusedFull()},
              {"notify_failures_received", inbox_.failuresReceived()}};
  const SignalBoard::Counters sc = signals_.counters();
  for (auto& c : Counters{{"signal_waits_completed", sc.completed},
                          {"signal_waits_failed", sc.failed},
                          {"signal_waits_timed_out", sc.timeouts},
                          {"signals_expired", sc.expired},
                          {"signal_peers_lost", sc.peers_lost},
                          {"signal_submits_failed", sc.submits_failed},
                          {"signal_submits_open", sc.submits_open},
                          {"signal_frames_received", sc.frames},
                          {"signal_frames_duplicate", sc.duplicates},
                          {"signal_frame_gaps", sc.gaps},
                          {"signal_frames_resent", outbox_.framesResent()},
                          {"signal_frames_abandoned", outbox_.framesAbandoned()}})
    s.engine.push_back(std::move(c));
  for (auto& c : blockStats()) s.engine.push_back(std::move(c));
  for (auto& t : transports_) s.transports.push_back(TransportStats{t->name(), t->stats()});
  s.metrics = metrics_->collect();
  appendEngineMetrics(s, rpc_.refusedFrames());
  return s;
}

std::vector<TransportDiagnosis> EngineImpl::diagnose() const { return diagnoses_; }

}  // namespace hawser
