// The tcp transport: install, peers, stats. Sub-batches: tcp_sub_batch.cpp.
#include "transport/tcp/tcp_transport.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/config.h"
#include "base/json_integer.h"
#include "base/log.h"
#include "base/peer_entry.h"
#include "base/segment_desc.h"
#include "transport/tcp/tcp_config.h"
#include "gpu/cuda_driver.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_conn_picker.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser {


// Every tcp.* knob through its table (tcp_config.h, kTcpKnobs: types,
// defaults, ranges); the one cross-key rule lives here.
static_assert(findKnobIn(kTcpKnobs, "tcp.max_frame")->hi == static_cast<int64_t>(tcp::kMaxFrameLimit));
static_assert(findKnobIn(kTcpKnobs, "tcp.slice_size")->hi == static_cast<int64_t>(tcp::kMaxFrameLimit));
static_assert(findKnobIn(kTcpKnobs, "tcp.io_threads")->hi == static_cast<int64_t>(tcp::kMaxIoThreads));
static_assert(findKnobIn(kTcpKnobs, "tcp.connections")->hi == static_cast<int64_t>(tcp::ConnPicker::kMaxConns));

Status TcpTransport::loadSettings(const Config& config, TcpSettings& out) {
  const TcpConfig cfg(config);
  TcpSettings s;
  Status st;
  if (!(st = cfg.getInt("tcp.connections", s.connections)).ok() ||
      !(st = cfg.getBool("tcp.home_connections", s.home_connections)).ok() ||
      !(st = cfg.getSize("tcp.home_slack", s.home_slack)).ok() ||
      !(st = cfg.getInt("tcp.home_window_ms", s.home_window_ms)).ok() ||
      !(st = cfg.getSize("tcp.max_frame", s.max_frame)).ok() ||
      !(st = cfg.getSize("tcp.slice_size", s.slice_size)).ok() ||
      !(st = cfg.getSize("tcp.group_bytes", s.group_bytes)).ok() ||
      !(st = cfg.getInt("tcp.timeout_ms", s.timeout_ms)).ok() ||
      !(st = cfg.getInt("tcp.connect_timeout_ms", s.connect_timeout_ms)).ok() ||
      !(st = cfg.getInt("tcp.io_threads", s.io_threads)).ok() ||
      !(st = cfg.getInt("tcp.inflight", s.inflight)).ok() ||
      !(st = cfg.getSize("tcp.sock_buf", s.sock_buf)).ok() ||
      !(st = cfg.getSize("tcp.loopback_send_buf", s.loopback_send_buf)).ok() ||
      !(st = cfg.getInt("tcp.gpu_staging_buffers", s.gpu_staging_buffers)).ok() ||
      !(st = cfg.getBool("tcp.gpu_poll_copies", s.gpu_poll_copies)).ok())
    return st;
  if (s.slice_size > s.max_frame)
    return {Code::kInvalidArgument, fmt::format("tcp.slice_size {} exceeds tcp.max_frame {}", s.slice_size,
                                                s.max_frame)};
  out = s;
  return Status::OK();
}

namespace tcp {

// Over loopback there is no wire to keep busy: what the send buffer holds
// only waits for the receiving process, and autotuning lets it grow to
// tcp_wmem's 4 MiB, by which time the bytes the sender copied in have left
// the CPU caches the receiver's copy would read them from.
void sizeBuffers(int fd, uint32_t sock_buf, uint32_t loopback_send_buf) {
  if (sock_buf) {
    net::setBufferSizes(fd, static_cast<int>(sock_buf));
  } else if (loopback_send_buf && net::isLoopback(fd)) {
    net::setSendBuffer(fd, static_cast<int>(loopback_send_buf));
  }
}

}  // namespace tcp

TcpTransport::TcpTransport() = default;

TcpTransport::~TcpTransport() { shutdown(); }

TransportCaps TcpTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  // GPU memory at either end once the CUDA driver is loaded: staged through
  // pinned buffers on the side that holds it.
  const uint32_t kinds = gpu::CudaDriver::get() ? (kHostMemory | kGpuMemory) : kHostMemory;
  c.local_memory = kinds;
  c.remote_memory = kinds;
  c.cost_rank = 40;
  c.host_properties = kNoStaging;  // GPU memory: staged, so none
  return c;
}

Status TcpTransport::install(const TransportContext& ctx) {
  if (installed_) return {Code::kInvalidArgument, "tcp transport is already installed"};
  if (!ctx.config || !ctx.registry || !ctx.rpc)
    return {Code::kInvalidArgument, "tcp transport: install needs config, registry and rpc server"};
  Status s = loadSettings(*ctx.config, settings_);
  if (!s.ok()) return s;

  gpu::CopySettings copy;
  if (!(s = gpu::CopySettings::fromConfig(*ctx.config, copy)).ok()) return s;
  counters_ = std::make_unique<tcp::InitiatorCounters>();
  // The initiator's staging slots are shared out among the io threads (each
  // owns its own, so no thread waits on another's).
  const size_t slots_per_thread = std::max<size_t>(2, settings_.gpu_staging_buffers / settings_.io_threads);
  for (uint32_t i = 0; i < settings_.io_threads; ++i) {
    auto io = std::make_unique<tcp::IoThread>(settings_, copy, counters_.get(), slots_per_thread);
    s = io->start();
    if (!s.ok()) {
      io.reset();
      for (auto& t : io_) t->stop();
      io_.clear();
      return s;
    }
    io_.push_back(std::move(io));
  }

  metrics_ = ctx.metrics ? ctx.metrics : std::make_shared<metrics::Registry>();
  target_ = std::make_shared<tcp::TargetState>();
  target_->registry = ctx.registry;
  target_->registry_ref = metrics_;
  target_->served = metrics::ServedMetrics::of(*metrics_, "tcp");
  target_->max_frame = settings_.max_frame;
  target_->timeout_ms = settings_.timeout_ms;
  target_->sock_buf = settings_.sock_buf;
  target_->loopback_send_buf = settings_.loopback_send_buf;
  target_->copy = copy;
  target_->slot_size = settings_.slice_size;
  target_->staging_count = settings_.gpu_staging_buffers;
  s = ctx.rpc->onStream(kTcpDataChannel, [t = target_](net::Fd fd) { t->serve(std::move(fd)); });
  if (!s.ok()) {
    for (auto& t : io_) t->stop();
    io_.clear();
    return s;
  }
  installed_ = true;
  HLOG_INFO("tcp transport: {} connection(s) per peer, slice {} B, {} io thread(s), timeout {} ms, GPU memory {}",
            settings_.connections, settings_.slice_size, settings_.io_threads, settings_.timeout_ms,
            gpu::CudaDriver::get() ? "staged" : "not served (no CUDA driver)");
  return Status::OK();
}

void TcpTransport::shutdown() {
  if (!installed_ || stopping_.exchange(true)) return;
  if (target_) target_->stop();
  for (auto& io : io_) io->stop();
}

void TcpTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  // The newest request version the target takes (2: requests bound to a registration).
  attrs["version"] = tcp::kBoundVersion;
  attrs["max_frame"] = settings_.max_frame;
  // The target serves RUNS requests (frames of many runs) of up to this many runs.
  attrs["max_runs"] = tcp::kMaxFrameRuns;
  // Peers send requests for our GPU memory only when we serve it.
  attrs["gpu"] = gpu::CudaDriver::get() != nullptr;
}

Status TcpTransport::registerRegion(const Region& r, nlohmann::json& attrs, std::shared_ptr<const Registration>& out) {
  attrs = nlohmann::json::object();
  out.reset();
  if (r.gpu < 0 || gpu::CudaDriver::get()) return Status::OK();
  return {Code::kNotSupported,
          fmt::format("tcp moves GPU memory ({}) only with a CUDA driver loaded: {}", r.location,
                      gpu::CudaDriver::reason().empty() ? "none was loaded" : gpu::CudaDriver::reason())};
}

Status tcp::decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why) {
  const nlohmann::json* e = nullptr;
  Status s = memoryPeerEntry(seg, "tcp", e, why);
  if (!s.ok()) return s;
  if (seg.host.empty() || seg.rpc_port == 0)
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}' publishes no host and port", seg.name)});
  out = PeerDesc{};
  out.host = seg.host;
  out.port = seg.rpc_port;
  uint64_t max_frame = 0;
  if (jsonIntegerField(*e, "transports.tcp", "max_frame", max_frame).ok() && max_frame >= 4096)
    out.max_frame = max_frame;
  auto g = e->find("gpu");
  out.gpu = g != e->end() && g->is_boolean() && g->get<bool>();
  // Frames of many runs only to a peer that says it serves them (a peer of
  // an older release publishes no max_runs and gets one request per slice).
  int64_t runs = 0;
  if (jsonIntegerField(*e, "transports.tcp", "max_runs", runs).ok() && runs >= 2)
    out.max_runs = static_cast<uint32_t>(std::min<int64_t>(runs, kMaxFrameRuns));
  // Requests bound to the registration they were made for (version 2) only
  // to a peer that takes them; a peer of an older release publishes version 1.
  int64_t version = 0;
  out.bound = jsonIntegerField(*e, "transports.tcp", "version", version).ok() && version >= kBoundVersion;
  return Status::OK();
}

Status decodeTcpPeer(const SegmentDesc& seg, RouteDecline& why) {
  tcp::PeerDesc desc;
  return tcp::decodePeerDesc(seg, desc, why);
}

Status TcpTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  if (!installed_ || stopping_.load()) return transportNotRunning("tcp", why);
  tcp::PeerDesc desc;
  Status s = tcp::decodePeerDesc(seg, desc, why);
  if (!s.ok()) return s;
  uint64_t slice = settings_.slice_size;
  if (desc.max_frame != 0) slice = std::min(slice, desc.max_frame);
  const bool peer_gpu = desc.gpu;
  uint32_t runs = desc.max_runs;
  const uint64_t group = std::min(settings_.group_bytes, slice);
  if (group == 0) runs = 0;
  const bool bound = desc.bound;

  std::string key = fmt::format("{}:{}", seg.host, seg.rpc_port);
  std::lock_guard lk(peers_mu_);
  auto pit = peers_.find(key);
  if (pit == peers_.end()) {
    auto p = std::make_unique<tcp::Peer>();
    p->host = seg.host;
    p->port = seg.rpc_port;
    p->name = key;
    p->metrics = metrics::ConnectionMetrics::of(*metrics_, "tcp", key);
    for (uint32_t i = 0; i < settings_.connections; ++i) {
      auto c = std::make_unique<tcp::Conn>();
      c->peer = p.get();
      c->index = i;
      c->io_index = static_cast<uint32_t>(next_conn_++ % io_.size());
      c->io = io_[c->io_index].get();
      p->conns.push_back(std::move(c));
    }
    pit = peers_.emplace(std::move(key), std::move(p)).first;
  }
  tcp::Peer* peer = pit->second.get();
  if (peer->handles++ == 0)
    for (auto& c : peer->conns) c->close_idle.store(false, std::memory_order_relaxed);
  std::vector<int16_t> buffer_gpu;
  buffer_gpu.reserve(seg.buffers.size());
  for (const BufferDesc& b : seg.buffers) buffer_gpu.push_back(static_cast<int16_t>(gpuOrdinalOf(b.location)));
  out = std::make_shared<tcp::PeerRef>(this, peer, slice, peer_gpu, runs, group, bound, std::move(buffer_gpu));
  return Status::OK();
}

void TcpTransport::releasePeer(tcp::Peer* peer) {
  std::lock_guard lk(peers_mu_);
  if (--peer->handles > 0 || stopping_.load()) return;
  for (auto& c : peer->conns) c->close_idle.store(true, std::memory_order_relaxed);
  for (auto& io : io_) io->requestCloseIdle();
}

tcp::PeerRef::~PeerRef() { owner->releasePeer(peer); }

void TcpTransport::diagnose(TransportDiagnosis& out) const {
  out.facts.emplace_back("connections per peer", std::to_string(settings_.connections));
  out.facts.emplace_back("slice size", std::to_string(settings_.slice_size));
  out.facts.emplace_back("frames of many runs",
                         settings_.group_bytes
                             ? fmt::format("up to {} B and {} runs", std::min(settings_.group_bytes, settings_.slice_size),
                                           tcp::kMaxFrameRuns)
                             : std::string("off (tcp.group_bytes 0)"));
  out.facts.emplace_back("io threads", std::to_string(settings_.io_threads));
  out.facts.emplace_back("timeout ms", std::to_string(settings_.timeout_ms));
  out.facts.emplace_back(
      "GPU memory",
      gpu::CudaDriver::get()
          ? fmt::format("staged: {} pinned slots of {} B per side", settings_.gpu_staging_buffers, settings_.slice_size)
          : "not moved (no CUDA driver)");
}

Counters TcpTransport::stats() const {
  const TcpStats s = counters();
  Counters out = {{"refused_requests", s.refused_requests},
          {"malformed_frames", s.malformed_frames},
          {"abandoned_writes", s.abandoned_writes},
          {"served_reads", s.served_reads},
          {"served_writes", s.served_writes},
          {"served_bytes", s.served_bytes},
          {"served_run_frames", s.served_run_frames},
          {"served_framed_runs", s.served_framed_runs},
          {"data_connections_accepted", s.data_connections},
          {"data_connections_open", s.open_data_connections},
          {"connects", s.connects},
          {"connect_failures", s.connect_failures},
          {"connection_failures", s.connection_failures},
          {"slices_completed", s.slices_completed},
          {"slices_failed", s.slices_failed},
          {"run_frames", s.run_frames},
          {"framed_runs", s.framed_runs},
          {"inline_submits", s.inline_submits},
          {"polled_events", s.polled_events},
          {"gpu_staged_to_device_bytes", s.gpu_staged_to_device_bytes},
          {"gpu_staged_from_device_bytes", s.gpu_staged_from_device_bytes},
          {"gpu_staging_waits", s.gpu_staging_waits},
          {"gpu_staging_copies", s.gpu_staging_copies},
          {"gpu_staging_inflight", s.gpu_staging_inflight},
          {"served_gpu_to_device_bytes", s.served_gpu_to_device_bytes},
          {"served_gpu_from_device_bytes", s.served_gpu_from_device_bytes},
          {"served_gpu_staging_waits", s.served_gpu_staging_waits},
          {"served_gpu_staging_inflight", s.served_gpu_staging_inflight}};
  if (counters_) counters_->copy.appendTo(out);  // the initiator's staging copies
  return out;
}

TcpStats TcpTransport::counters() const {
  TcpStats s;
  if (target_) {
    const metrics::ServedMetrics& m = target_->served;
    s.refused_requests = m.refused->value();
    s.malformed_frames = m.refused_frames->value();
    s.served_reads = m.requests[0]->value();
    s.served_writes = m.requests[1]->value();
    s.served_bytes = m.bytes[0]->value() + m.bytes[1]->value();
    s.data_connections = m.accepted->value();
    s.open_data_connections = static_cast<uint64_t>(std::max<int64_t>(0, m.open->value()));
    s.abandoned_writes = target_->abandoned_writes.load();
    s.served_run_frames = target_->run_frames.load();
    s.served_framed_runs = target_->framed_runs.load();
    s.served_gpu_to_device_bytes = target_->gpu_to_device.load();
    s.served_gpu_from_device_bytes = target_->gpu_from_device.load();
    s.served_gpu_staging_waits = target_->staging_waits.load();
    s.served_gpu_staging_inflight = static_cast<uint64_t>(std::max<int64_t>(0, target_->staging_in_use.load()));
  }
  if (counters_) {
    s.connects = counters_->connects.load();
    s.connect_failures = counters_->connect_failures.load();
    s.connection_failures = counters_->connection_failures.load();
    s.slices_completed = counters_->slices_completed.load();
    s.slices_failed = counters_->slices_failed.load();
    s.run_frames = counters_->run_frames.load();
    s.framed_runs = counters_->framed_runs.load();
    s.inline_submits = counters_->inline_submits.load();
    s.polled_events = counters_->polled_events.load();
    s.gpu_staged_to_device_bytes = counters_->gpu_to_device.load();
    s.gpu_staged_from_device_bytes = counters_->gpu_from_device.load();
    s.gpu_staging_waits = counters_->staging_waits.load();
    s.gpu_staging_copies = counters_->staging_copies.load();
    s.gpu_staging_inflight = static_cast<uint64_t>(std::max<int64_t>(0, counters_->staging_in_use.load()));
  }
  return s;
}

void TcpTransport::poll() {
  if (!installed_ || stopping_.load(std::memory_order_relaxed)) return;
  for (auto& io : io_) io->poll();
}

Status TcpTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<tcp::SubBatchImpl>(this);
  return Status::OK();
}

std::unique_ptr<Transport> makeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace hawser
