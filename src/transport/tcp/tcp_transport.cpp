// The tcp transport: the Transport interface on top of the io threads
// (tcp_io.cpp, initiator) and the data-connection server (tcp_target.cpp).
#include "transport/tcp/tcp_transport.h"

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/config.h"
#include "base/log.h"
#include "metadata/descriptor.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser {

using tcp::Slice;
using tcp::SubBatchImpl;

namespace {

constexpr size_t kMaxIoThreads = 16;

// Reads `key` as an integer (sizes accept K/M/G) within [lo, hi].
Status readNumber(const Config& cfg, const char* key, bool size, uint64_t lo, uint64_t hi, uint64_t& out) {
  auto raw = cfg.raw(key);
  if (!raw) return Status::OK();  // keep the default
  std::optional<uint64_t> v;
  if (size) {
    v = parseSize(*raw);
  } else {
    uint64_t x = 0;
    auto [p, ec] = std::from_chars(raw->data(), raw->data() + raw->size(), x);
    if (ec == std::errc() && p == raw->data() + raw->size()) v = x;
  }
  if (!v)
    return {Code::kInvalidArgument,
            fmt::format("{} ({}) = '{}' is not a {}", key, Config::envName(key), *raw, size ? "size" : "number")};
  if (*v < lo || *v > hi)
    return {Code::kInvalidArgument,
            fmt::format("{} ({}) = {} is out of range [{}, {}]", key, Config::envName(key), *v, lo, hi)};
  out = *v;
  return Status::OK();
}

}  // namespace

Status TcpTransport::loadSettings(const Config& cfg, TcpSettings& out) {
  TcpSettings s;
  uint64_t v;
  Status st;
#define HAWSER_TCP_SETTING(key, field, size, lo, hi) \
  v = s.field;                                       \
  st = readNumber(cfg, key, size, lo, hi, v);        \
  if (!st.ok()) return st;                           \
  s.field = static_cast<decltype(s.field)>(v);
  HAWSER_TCP_SETTING("tcp.connections", connections, false, 1, 64)
  HAWSER_TCP_SETTING("tcp.max_frame", max_frame, true, 4096, tcp::kMaxFrameLimit)
  HAWSER_TCP_SETTING("tcp.slice_size", slice_size, true, 4096, tcp::kMaxFrameLimit)
  HAWSER_TCP_SETTING("tcp.timeout_ms", timeout_ms, false, 10, 3600000)
  HAWSER_TCP_SETTING("tcp.connect_timeout_ms", connect_timeout_ms, false, 10, 3600000)
  HAWSER_TCP_SETTING("tcp.io_threads", io_threads, false, 1, kMaxIoThreads)
  HAWSER_TCP_SETTING("tcp.inflight", inflight, false, 1, 65536)
  HAWSER_TCP_SETTING("tcp.sock_buf", sock_buf, true, 0, 1ull << 30)
#undef HAWSER_TCP_SETTING
  if (s.slice_size > s.max_frame)
    return {Code::kInvalidArgument, fmt::format("tcp.slice_size {} exceeds tcp.max_frame {}", s.slice_size,
                                                s.max_frame)};
  out = s;
  return Status::OK();
}

TcpTransport::TcpTransport() = default;

TcpTransport::~TcpTransport() { shutdown(); }

TransportCaps TcpTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  c.host_memory = true;
  return c;
}

Status TcpTransport::install(const TransportContext& ctx) {
  if (installed_) return {Code::kInvalidArgument, "tcp transport is already installed"};
  if (!ctx.config || !ctx.registry || !ctx.rpc)
    return {Code::kInvalidArgument, "tcp transport: install needs config, registry and rpc server"};
  Status s = loadSettings(*ctx.config, settings_);
  if (!s.ok()) return s;

  counters_ = std::make_unique<tcp::InitiatorCounters>();
  for (uint32_t i = 0; i < settings_.io_threads; ++i) {
    auto io = std::make_unique<tcp::IoThread>(settings_, counters_.get());
    s = io->start();
    if (!s.ok()) {
      io.reset();
      for (auto& t : io_) t->stop();
      io_.clear();
      return s;
    }
    io_.push_back(std::move(io));
  }

  target_ = std::make_shared<tcp::TargetState>();
  target_->registry = ctx.registry;
  target_->max_frame = settings_.max_frame;
  target_->timeout_ms = settings_.timeout_ms;
  target_->sock_buf = settings_.sock_buf;
  ctx.rpc->onStream(rpc::kConnTcpData, [t = target_](net::Fd fd) { t->serve(std::move(fd)); });
  installed_ = true;
  HLOG_INFO("tcp transport: {} connection(s) per peer, slice {} B, {} io thread(s), timeout {} ms",
            settings_.connections, settings_.slice_size, settings_.io_threads, settings_.timeout_ms);
  return Status::OK();
}

void TcpTransport::shutdown() {
  if (!installed_ || stopping_.exchange(true)) return;
  if (target_) target_->stop();
  for (auto& io : io_) io->stop();
}

void TcpTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  attrs["version"] = tcp::kWireVersion;
  attrs["max_frame"] = settings_.max_frame;
}

Status TcpTransport::registerMemory(void* addr, size_t length, const std::string& location, bool,
                                    nlohmann::json& attrs) {
  attrs = nlohmann::json::object();
  if (target_ && location.rfind("cpu", 0) != 0)
    target_->addNonHost(reinterpret_cast<uint64_t>(addr), length, location);
  return Status::OK();
}

Status TcpTransport::unregisterMemory(void* addr, size_t) {
  if (target_) target_->removeNonHost(reinterpret_cast<uint64_t>(addr));
  return Status::OK();
}

bool TcpTransport::canServe(const SegmentDesc& seg, const std::string& local_location) const {
  if (seg.kind != SegmentDesc::Kind::kMemory) return false;
  if (!seg.transports.is_object() || !seg.transports.contains("tcp")) return false;
  if (seg.host.empty() || seg.rpc_port == 0) return false;
  return local_location.rfind("cpu", 0) == 0;
}

TcpStats TcpTransport::stats() const {
  TcpStats s;
  if (target_) {
    s.refused_requests = target_->refused.load();
    s.malformed_frames = target_->malformed.load();
    s.served_reads = target_->served_reads.load();
    s.served_writes = target_->served_writes.load();
    s.served_bytes = target_->served_bytes.load();
    s.data_connections = target_->connections.load();
    s.open_data_connections = target_->open_connections.load();
  }
  if (counters_) {
    s.connects = counters_->connects.load();
    s.connect_failures = counters_->connect_failures.load();
    s.connection_failures = counters_->connection_failures.load();
    s.slices_completed = counters_->slices_completed.load();
    s.slices_failed = counters_->slices_failed.load();
  }
  return s;
}

void TcpTransport::closeSegment(const SegmentDesc& seg) {
  if (!installed_ || seg.kind != SegmentDesc::Kind::kMemory) return;
  std::string key = fmt::format("{}:{}", seg.host, seg.rpc_port);
  std::lock_guard lk(peers_mu_);
  auto it = peers_.find(key);
  if (it == peers_.end()) return;
  for (auto& c : it->second->conns) c->close_idle.store(true, std::memory_order_relaxed);
  for (auto& io : io_) io->requestCloseIdle();
}

tcp::Peer* TcpTransport::peerFor(const SegmentDesc& seg) {
  std::string key = fmt::format("{}:{}", seg.host, seg.rpc_port);
  std::lock_guard lk(peers_mu_);
  auto it = peers_.find(key);
  if (it != peers_.end()) return it->second.get();
  auto p = std::make_unique<tcp::Peer>();
  p->host = seg.host;
  p->port = seg.rpc_port;
  p->name = key;
  for (uint32_t i = 0; i < settings_.connections; ++i) {
    auto c = std::make_unique<tcp::Conn>();
    c->peer = p.get();
    c->index = i;
    c->io_index = static_cast<uint32_t>(next_conn_++ % io_.size());
    c->io = io_[c->io_index].get();
    p->conns.push_back(std::move(c));
  }
  tcp::Peer* raw = p.get();
  peers_.emplace(std::move(key), std::move(p));
  return raw;
}

// ---- sub-batches -------------------------------------------------------------------

Status TcpTransport::allocateSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) {
  auto sb = std::make_unique<SubBatchImpl>();
  sb->chunks.reserve(std::min<size_t>(task_capacity, 64));
  out = std::move(sb);
  return Status::OK();
}

Status TcpTransport::prepare(SubBatch& base, std::span<Task* const> tasks, size_t& slices) {
  auto& sb = static_cast<SubBatchImpl&>(base);
  slices = 0;
  if (!installed_ || stopping_.load()) return {Code::kUnavailable, "tcp transport is not running"};

  // Pass 1: validate and count. Tasks of one batch usually share a segment:
  // per-segment facts are looked up once per run of equal segments.
  struct Plan {
    tcp::Peer* peer;
    uint64_t slice;
    uint32_t n;
  };
  std::vector<Plan> plan(tasks.size());
  const SegmentDesc* last = nullptr;
  tcp::Peer* peer = nullptr;
  uint64_t slice = settings_.slice_size;
  size_t total = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = *tasks[i];
    const SegmentDesc& seg = t.segment();
    const TransferRequest& r = t.request();
    if (&seg != last) {
      if (seg.kind != SegmentDesc::Kind::kMemory || seg.host.empty() || seg.rpc_port == 0)
        return {Code::kInvalidArgument,
                fmt::format("requests[{}]: segment '{}' is not a memory segment with a host and port", t.id(),
                            seg.name)};
      slice = settings_.slice_size;
      auto it = seg.transports.find("tcp");
      if (it != seg.transports.end() && it->is_object()) {
        auto mf = it->find("max_frame");
        if (mf != it->end() && mf->is_number_unsigned() && mf->get<uint64_t>() >= 4096)
          slice = std::min<uint64_t>(slice, mf->get<uint64_t>());
      }
      peer = peerFor(seg);
      last = &seg;
    }
    if (r.length == 0) return {Code::kInvalidArgument, fmt::format("requests[{}]: length is 0", t.id())};
    int b = seg.findBuffer(r.target_offset, r.length);
    if (b >= 0 && seg.buffers[static_cast<size_t>(b)].location.rfind("cpu", 0) != 0)
      return {Code::kNotSupported,
              fmt::format("requests[{}]: remote buffer [{:#x}, +{}) of segment '{}' is {} memory; tcp moves host "
                          "memory only",
                          t.id(), r.target_offset, r.length, seg.name, seg.buffers[static_cast<size_t>(b)].location)};
    uint64_t n = (r.length + slice - 1) / slice;
    if (n > UINT32_MAX)
      return {Code::kInvalidArgument, fmt::format("requests[{}]: length {} needs {} slices of {} bytes (max {})",
                                                  t.id(), r.length, n, slice, UINT32_MAX)};
    plan[i] = Plan{peer, slice, static_cast<uint32_t>(n)};
    total += n;
  }

  // Pass 2: cut. One allocation per prepare, none per slice.
  std::unique_ptr<Slice[]> chunk(new Slice[total]);
  size_t k = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task* t = tasks[i];
    const TransferRequest& r = t->request();
    const Plan& p = plan[i];
    const bool is_read = r.opcode == OpCode::kRead;
    const uint32_t nconn = static_cast<uint32_t>(p.peer->conns.size());
    uint32_t rr = p.peer->rr.fetch_add(p.n, std::memory_order_relaxed);
    uint64_t off = 0;
    for (uint32_t j = 0; j < p.n; ++j) {
      Slice& s = chunk[k++];
      uint64_t len = std::min<uint64_t>(p.slice, r.length - off);
      s.task = t;
      s.sb = &sb;
      s.conn = p.peer->conns[(rr + j) % nconn].get();
      s.local = static_cast<char*>(r.source) + off;
      s.len = static_cast<uint32_t>(len);
      s.is_read = is_read;
      s.hdr.type = is_read ? tcp::kReadReq : tcp::kWriteReq;
      s.hdr.size = static_cast<uint32_t>(len);
      s.hdr.length = is_read ? 0 : static_cast<uint32_t>(len);
      s.hdr.addr = r.target_offset + off;
      off += len;
    }
    t->setSliceCount(p.n);
  }
  std::lock_guard lk(sb.mu);
  sb.pending.push_back(std::move(chunk));
  sb.pending_sizes.push_back(total);
  slices = total;
  return Status::OK();
}

void TcpTransport::submit(SubBatch& base) {
  auto& sb = static_cast<SubBatchImpl&>(base);
  std::lock_guard lk(sb.mu);
  Slice* first[kMaxIoThreads] = {};
  Slice* lastp[kMaxIoThreads] = {};
  const bool down = stopping_.load();
  for (size_t c = 0; c < sb.pending.size(); ++c) {
    Slice* arr = sb.pending[c].get();
    size_t n = sb.pending_sizes[c];
    sb.outstanding.fetch_add(static_cast<int64_t>(n), std::memory_order_acq_rel);
    for (size_t i = 0; i < n; ++i) {
      Slice* s = &arr[i];
      if (down) {
        s->state.store(tcp::kSliceCommitted, std::memory_order_relaxed);
        sb.outstanding.fetch_sub(1, std::memory_order_acq_rel);
        s->task->completeSlice(TransferState::kFailed, 0,
                               Status(Code::kUnavailable, "tcp transport shut down"));
        continue;
      }
      s->state.store(tcp::kSliceQueued, std::memory_order_relaxed);
      // Chains are built newest-first (post() wants a stack segment).
      const size_t io = s->conn->io_index;
      s->next = first[io];
      first[io] = s;
      if (!lastp[io]) lastp[io] = s;
    }
    sb.chunks.push_back(std::move(sb.pending[c]));
    sb.chunk_sizes.push_back(n);
  }
  sb.pending.clear();
  sb.pending_sizes.clear();
  for (size_t io = 0; io < io_.size(); ++io)
    if (first[io]) io_[io]->post(first[io], lastp[io]);
}

void TcpTransport::discard(SubBatch& base) {
  auto& sb = static_cast<SubBatchImpl&>(base);
  std::lock_guard lk(sb.mu);
  sb.pending.clear();
  sb.pending_sizes.clear();
}

void TcpTransport::cancel(SubBatch& base) {
  auto& sb = static_cast<SubBatchImpl&>(base);
  bool any = false;
  {
    std::lock_guard lk(sb.mu);
    for (size_t c = 0; c < sb.chunks.size(); ++c) {
      Slice* arr = sb.chunks[c].get();
      for (size_t i = 0; i < sb.chunk_sizes[c]; ++i) {
        uint8_t expect = tcp::kSliceQueued;
        if (arr[i].state.compare_exchange_strong(expect, tcp::kSliceCanceled, std::memory_order_acq_rel)) {
          any = true;
          arr[i].task->completeSlice(TransferState::kCanceled, 0,
                                     Status(Code::kUnavailable, "canceled by cancelTransfer before it was sent"));
        }
      }
    }
  }
  if (!any) return;
  // Let the io threads drop the canceled slices now, so that once the tasks
  // are terminal the sub-batch is idle (freeBatchID succeeds) without a race.
  std::vector<uint64_t> tickets;
  for (auto& io : io_) tickets.push_back(io->requestPurge());
  for (size_t i = 0; i < io_.size(); ++i) io_[i]->waitPurged(tickets[i], std::chrono::seconds(1));
}

bool TcpTransport::idle(SubBatch& base) {
  return static_cast<SubBatchImpl&>(base).outstanding.load(std::memory_order_acquire) == 0;
}

void TcpTransport::freeSubBatch(std::unique_ptr<SubBatch> base) {
  if (!base) return;
  auto* sb = static_cast<SubBatchImpl*>(base.get());
  // The engine frees only idle sub-batches; never free slices an io thread
  // still holds (wait a bounded time, then leak rather than corrupt).
  auto deadline = tcp::Clock::now() + std::chrono::milliseconds(settings_.timeout_ms) + std::chrono::seconds(1);
  while (sb->outstanding.load(std::memory_order_acquire) != 0 && tcp::Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (sb->outstanding.load(std::memory_order_acquire) != 0) {
    HLOG_ERROR("tcp: freeSubBatch with {} slice(s) still in flight; leaking it", sb->outstanding.load());
    (void)base.release();
  }
}

std::unique_ptr<Transport> makeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace hawser
