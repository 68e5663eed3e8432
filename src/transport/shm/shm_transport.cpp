// The shm transport (shm_transport.h): install, shutdown, registration,
// the descriptor and its decoder, doctor and counters. Opening peers:
// shm_peer.cpp; the copy workers and inline copies: shm_workers.cpp.
#include "transport/shm/shm_transport.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/config.h"
#include "base/json_integer.h"
#include "base/log.h"
#include "base/peer_entry.h"
#include "base/segment_desc.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_backing.h"
#include "transport/shm/shm_internal.h"
#include "transport/shm/shm_server.h"
#include "local/local_socket.h"
#include "transport/shm/shm_socket.h"

namespace hawser {

using shm::Group;
using shm::Slice;

static_assert(findKnobIn(kShmKnobs, "shm.threads")->hi == static_cast<int64_t>(shm::kMaxThreads));
static_assert(findKnobIn(kShmKnobs, "shm.max_iov")->hi == static_cast<int64_t>(shm::kMaxIov));

Status ShmTransport::loadSettings(const Config& config, ShmSettings& out) {
  const ShmConfig cfg(config);
  ShmSettings s;
  Status st;
  if (!(st = cfg.getInt("shm.threads", s.threads)).ok() || !(st = cfg.getSize("shm.split_bytes", s.split_bytes)).ok() ||
      !(st = cfg.getSize("shm.inline_bytes", s.inline_bytes)).ok() ||
      !(st = cfg.getInt("shm.max_iov", s.max_iov)).ok() || !(st = cfg.getString("shm.socket_dir", s.socket_dir)).ok() ||
      !(st = cfg.getBool("shm.shared_mappings", s.shared_mappings)).ok())
    return st;
  while (s.socket_dir.size() > 1 && s.socket_dir.back() == '/') s.socket_dir.pop_back();
  if (s.threads == 0) s.threads = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 4);
  out = s;
  return Status::OK();
}

ShmTransport::ShmTransport() : counts_(std::make_unique<Counts>()) {}

ShmTransport::~ShmTransport() { shutdown(); }

TransportCaps ShmTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  c.local_memory = kHostMemory;
  c.remote_memory = kHostMemory;
  c.same_host_only = true;
  c.cost_rank = 20;
  c.run_windows = true;  // a block request's runs come as windows (SubBatchImpl::prepareRuns)
  c.moves_direct = true;  // small submits to a mapped registration (moveDirect)
  c.host_properties = kNoStaging | kSameHost;  // one copy by the kernel (or the CPU), no bounce buffer
  return c;
}

Status ShmTransport::install(const TransportContext& ctx) {
  if (installed_) return {Code::kInvalidArgument, "shm transport is already installed"};
  if (!ctx.config) return {Code::kInvalidArgument, "shm transport: install needs a config"};
  Status s = loadSettings(*ctx.config, settings_);
  if (!s.ok()) return s;
  std::random_device rd;
  do nonce_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  while (nonce_ == 0);
  // The kernel may lack or forbid cross-memory attach (seccomp in
  // containers): then only shareable memory is served (each peer's probe
  // finds the same).
  uint64_t probe = 0;
  iovec l{&probe, sizeof probe}, r{&nonce_, sizeof nonce_};
  if (::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof probe) || probe != nonce_)
    cma_here_ = fmt::format("process_vm_readv does not work here: {}", std::strerror(errno));
  const long self = ::syscall(SYS_pidfd_open, ::getpid(), 0);
  if (self < 0) return {Code::kNotSupported, fmt::format("pidfd_open (Linux 5.3+): {}", std::strerror(errno))};
  ::close(static_cast<int>(self));
  s = table_.create(nonce_);
  if (!s.ok()) return s;
  server_ = std::make_unique<shm::Server>(table_, nonce_);
  s = server_->start(settings_.socket_dir);
  if (!s.ok()) {
    server_.reset();
    return s;
  }
  if (!(s = deaths_.start()).ok()) return {s.code(), "shm: " + s.message()};
  for (uint32_t i = 0; i < settings_.threads; ++i) workers_.emplace_back([this, i] { work(i); });
  installed_ = true;
  HLOG_INFO("shm transport: {} copy thread(s), split {} B, submits of up to {} B copied by their thread, up to {} "
            "runs per call, socket {}, shared mappings {}",
            settings_.threads, settings_.split_bytes, settings_.inline_bytes, settings_.max_iov, server_->name(),
            settings_.shared_mappings ? "on" : "off");
  return Status::OK();
}

void ShmTransport::shutdown() {
  if (!installed_) return;
  {
    std::lock_guard lk(mu_);  // enqueue() reads stopping_ under it
    if (stopping_.exchange(true)) return;
  }
  table_.close();  // initiators stop copying from/to this engine's memory
  if (server_) server_->stop();
  cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  deaths_.stop();
  // What the workers left in the queue fails.
  std::deque<Group*> left;
  {
    std::lock_guard lk(mu_);
    left.swap(queue_);
  }
  for (Group* g : left)
    shm::endAll(g, TransferState::kFailed, Code::kUnavailable, [](const Slice&) { return "shm transport shut down"; });
}

void ShmTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  attrs["version"] = shm::kDescVersion;
  attrs["pid"] = static_cast<int64_t>(::getpid());
  attrs["nonce"] = nonce_;
  attrs["probe"] = reinterpret_cast<uint64_t>(&nonce_);
  attrs["socket"] = server_ ? server_->name() : "";
}

Status ShmTransport::registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                                    nlohmann::json& attrs) {
  attrs = nlohmann::json::object();
  if (!installed_ || !remote_accessible || memoryKindOf(location) != kHostMemory) return Status::OK();
  uint64_t gen = 0;
  Status s = table_.add(reinterpret_cast<uint64_t>(addr), length, gen);
  if (!s.ok()) return s;
  attrs["gen"] = gen;
  // Shareable pages: peers map them once and copy with memcpy.
  shm::Backing b;
  std::string why;
  if (shm::findBacking(reinterpret_cast<uint64_t>(addr), length, b, why)) {
    server_->share(gen, reinterpret_cast<uint64_t>(addr), length, b);
    attrs["shared"] = true;
    HLOG_DEBUG("shm: registration {} [{}, +{}) is shareable ({})", gen, addr, length, b.what);
  } else {
    HLOG_DEBUG("shm: registration {} [{}, +{}) is not shareable: {}", gen, addr, length, why);
  }
  return Status::OK();
}

Status ShmTransport::unregisterMemory(void* addr, size_t) {
  const uint64_t gen = table_.remove(reinterpret_cast<uint64_t>(addr));
  if (gen && server_) server_->unshare(gen);
  return Status::OK();
}

Status shm::decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why) {
  const nlohmann::json* e = nullptr;
  Status s = memoryPeerEntry(seg, "shm", e, why);
  if (!s.ok()) return s;
  auto malformed = [&](const std::string& what) {
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}': malformed shm attributes: {}", seg.name, what)});
  };
  uint64_t version = 0;
  if (!(s = jsonIntegerField(*e, "transports.shm", "version", version)).ok()) return malformed(s.message());
  if (version != kDescVersion)
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}': shm version {} (this build speaks {})", seg.name,
                                                      version, kDescVersion)});
  PeerDesc d;
  if (!(s = jsonIntegerField(*e, "transports.shm", "pid", d.pid)).ok() ||
      !(s = jsonIntegerField(*e, "transports.shm", "nonce", d.nonce)).ok() ||
      !(s = jsonIntegerField(*e, "transports.shm", "probe", d.probe)).ok())
    return malformed(s.message());
  if (d.pid <= 0) return malformed(fmt::format("transports.shm.pid must be > 0, got {}", d.pid));
  auto sock = e->find("socket");
  if (sock == e->end() || !sock->is_string() || sock->get<std::string>().empty())
    return malformed("transports.shm.socket must be a non-empty string");
  d.socket = sock->get<std::string>();
  out = std::move(d);
  return Status::OK();
}

Status decodeShmPeer(const SegmentDesc& seg, RouteDecline& why) {
  shm::PeerDesc desc;
  return shm::decodePeerDesc(seg, desc, why);
}

Status ShmTransport::newSubBatch(size_t, std::unique_ptr<SubBatch>& out) {
  out = std::make_unique<shm::SubBatchImpl>(this);
  return Status::OK();
}

void ShmTransport::diagnose(TransportDiagnosis& out) const {
  out.facts.emplace_back("copy threads", std::to_string(settings_.threads));
  out.facts.emplace_back("cross-memory attach", cma_here_.empty() ? "works" : cma_here_);
  out.facts.emplace_back("split bytes", std::to_string(settings_.split_bytes));
  out.facts.emplace_back("iovecs per call", std::to_string(settings_.max_iov));
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int scope = -1;
  if (f >> scope)
    out.facts.emplace_back("yama ptrace_scope", fmt::format("{}{}", scope,
                                                            scope >= 1 ? " (cross-memory attach to a process "
                                                                         "that is not a descendant needs "
                                                                         "CAP_SYS_PTRACE; peers fall back to tcp)"
                                                                       : ""));
  else
    out.facts.emplace_back("yama ptrace_scope", "absent (same user or CAP_SYS_PTRACE)");
  out.facts.emplace_back("exposed regions", std::to_string(table_.size()));
  out.facts.emplace_back("socket", server_ ? server_->name() : "none");
  out.facts.emplace_back("socket scope", settings_.socket_dir.empty()
                                              ? "abstract namespace: peers of this network namespace"
                                              : "the directory shm.socket_dir: peers that mount it");
  out.facts.emplace_back("shared mappings", settings_.shared_mappings ? "on" : "off (shm.shared_mappings)");
}

Counters ShmTransport::stats() const {
  const Counts& c = *counts_;
  return {{"slices_completed", c.slices_completed.value()}, {"slices_failed", c.slices_failed.value()},
          {"bytes_read", c.bytes_read.value()},             {"bytes_written", c.bytes_written.value()},
          {"refused_requests", c.refused.value()},          {"peers_opened", c.peers_opened.load()},
          {"peers_refused", c.peers_refused.load()},       {"peers_gone", c.peers_gone.load()},
          {"copy_calls", c.copy_calls.value()},             {"withdrawals_waited", table_.waits()},
          {"peers_mapped", c.peers_mapped.load()},         {"peers_cma", c.peers_cma.load()},
          {"mappings", c.mappings.load()},                 {"mapped_slices", c.mapped_slices.value()},
          {"inline_slices", c.inline_slices.value()},
          {"waiter_slices", c.waiter_slices.value()},
          {"direct_requests", c.direct_requests.value()},
          {"readers", server_ ? server_->readers() : 0},   {"readers_refused", server_ ? server_->refused() : 0},
          {"files_passed", server_ ? server_->filesPassed() : 0}};
}

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<ShmTransport>(); }

}  // namespace hawser
