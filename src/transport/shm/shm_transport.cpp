// The shm transport (shm_transport.h): install, peers, the copy workers and
// the sub-batches.
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
#include "transport/shm/shm_testing.h"

namespace hawser {

namespace shm::testing {
std::atomic<CopyHook> on_copy{nullptr};
}

using shm::Group;
using shm::Peer;
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

void ShmTransport::enqueue(std::vector<Group*>& groups) {
  {
    std::unique_lock lk(mu_);
    if (stopping_.load()) {
      lk.unlock();
      for (Group* g : groups)
        shm::endAll(g, TransferState::kFailed, Code::kUnavailable,
                    [](const Slice&) { return "shm transport shut down"; });
      return;
    }
    queue_.insert(queue_.end(), groups.begin(), groups.end());
  }
  // As many copy threads as there are groups, not all of them for one.
  const size_t wake = std::min<size_t>(groups.size(), workers_.size());
  if (wake == workers_.size()) cv_.notify_all();
  else
    for (size_t i = 0; i < wake; ++i) cv_.notify_one();
}

bool ShmTransport::copyHere(shm::Work& w) {
  // Read before the first slice ends.
  Group* const groups = w.groups.get();
  const size_t ngroups = w.ngroups;
  if (stopping_.load()) {
    for (size_t i = 0; i < ngroups; ++i)
      shm::endAll(&groups[i], TransferState::kFailed, Code::kUnavailable,
                  [](const Slice&) { return "shm transport shut down"; });
    return false;
  }
  thread_local std::unique_ptr<shm::Scratch> scratch;  // for cross-memory attach, made at its first use
  std::vector<Group*> handed;
  // The peer of the group before (a batch mostly has one), its table and
  // the inline reader lent for it.
  Peer* peer = nullptr;
  std::shared_ptr<shm::TableView> table;
  int lent = -1, slot = -1;
  auto giveBack = [&] {
    if (lent >= 0) peer->giveInline(lent);
    lent = -1;
  };
  for (size_t i = 0; i < ngroups; ++i) {
    Group* g = &groups[i];
    Peer* p = g->first->peer;
    if (p != peer) {
      giveBack();
      peer = p;
      table = p->dead.load(std::memory_order_acquire) ? nullptr : p->view();
      slot = -1;
      if (table && (lent = p->borrowInline(*table, slot)) < 0) {
        handed.push_back(g);  // every inline reader of the peer is lent: the copy threads take it
        peer = nullptr;
        continue;
      }
    }
    if (!g->first->map_base && !scratch) scratch = std::make_unique<shm::Scratch>(shm::kMaxIov);
    counts_->inline_slices.fetch_add(g->n, std::memory_order_relaxed);
    runGroup(g, table.get(), slot, scratch.get());
  }
  giveBack();
  if (handed.empty()) return false;
  enqueue(handed);
  return true;
}

void ShmTransport::cancelQueued(shm::SubBatchImpl* sb) {
  std::vector<Group*> taken;
  {
    std::lock_guard lk(mu_);
    auto keep = std::stable_partition(queue_.begin(), queue_.end(), [sb](Group* g) { return g->first->sb != sb; });
    taken.assign(keep, queue_.end());
    queue_.erase(keep, queue_.end());
  }
  for (Group* g : taken)
    shm::endAll(g, TransferState::kCanceled, Code::kUnavailable,
                [](const Slice&) { return "canceled by cancelTransfer before it was copied"; });
}

void ShmTransport::work(unsigned worker) {
  shm::Scratch scratch(settings_.max_iov);
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stopping_.load() || !queue_.empty(); });
    if (stopping_.load()) return;
    Group* g = queue_.front();
    queue_.pop_front();
    lk.unlock();
    Peer* p = g->first->peer;
    std::shared_ptr<shm::TableView> table = p->dead.load(std::memory_order_acquire) ? nullptr : p->view();
    runGroup(g, table.get(), table ? p->slotFor(worker, *table) : -1, &scratch);
    lk.lock();
  }
}

void ShmTransport::runGroup(Group* g, const shm::TableView* table, int slot, shm::Scratch* scratch) {
  // Everything of the group is read before its first slice ends: once the
  // last one did, its sub-batch (and the group) may be gone.
  Slice* const first = g->first;
  const uint32_t n = g->n;
  Peer* p = first->peer;
  const bool is_read = first->is_read;
  const uint64_t gen = first->gen, reg_addr = first->reg_addr, reg_len = first->reg_len;
  const int64_t pid = p->own_pid;  // names the peer in messages
  const auto cma_pid = static_cast<pid_t>(p->pid);
  auto failAll = [&](Code c, auto why) {
    counts_->slices_failed += n;
    shm::endAll(g, TransferState::kFailed, c, why);
  };
  auto gone = [&] {
    p->markDead();
    failAll(Code::kUnavailable, [pid](const Slice&) { return fmt::format("shm peer process {} exited", pid); });
  };
  auto withdrawn = [&] {
    counts_->refused += n;
    if (gen == 0)
      return failAll(Code::kOutOfRange, [pid](const Slice& s) {
        return fmt::format("pid {} does not expose [{:#x}, +{}): not inside one of its registered, remote-accessible "
                           "regions",
                           pid, s.remote, s.len);
      });
    failAll(Code::kOutOfRange, [&](const Slice& s) {
      return fmt::format("pid {} withdrew [{:#x}, +{}) (registration {}) while this task used it: [{:#x}, +{}) was "
                         "not {}",
                         pid, reg_addr, reg_len, gen, s.remote, s.len, is_read ? "read" : "written");
    });
  };
  // Liveness: the pidfd watcher marks an exited peer dead (no system call
  // here); an exit it has not seen yet fails a copy with ESRCH (cross-memory
  // attach), and a copy through a mapping then is one made just before the exit.
  if (!table) return gone();
  if (table->closed())
    return failAll(Code::kUnavailable,
                   [pid](const Slice&) { return fmt::format("shm peer {}: its engine shut down", pid); });
  shm::testing::call(shm::testing::Point::kTurn, first->remote, first->len);
  if (gen == 0) return withdrawn();
  if (slot < 0)
    return failAll(Code::kUnavailable, [pid](const Slice&) {
      return fmt::format("the shm table of pid {} has no free reader slot: {} copy threads of its initiators hold "
                         "them all",
                         pid, shm::kReaderSlots);
    });
  // From here until leave() the target's unregister of this registration
  // waits for us; and it is still the registration the tasks started on.
  if (!table->enter(slot, reg_addr, gen)) return withdrawn();
  shm::testing::call(shm::testing::Point::kAnnounced, first->remote, first->len);
  if (first->map_base) return copyMapped(g, *table, slot);
  if (!p->cma) {
    table->leave(slot);
    return failAll(Code::kUnavailable, [&](const Slice&) {
      return fmt::format("shm peer {}: its registration {} is not mapped here and cross-memory attach is not "
                         "available: {}",
                         pid, gen, p->cma_why);
    });
  }

  // One call moves the slices from `i` (`off` bytes of it done) on. A short
  // transfer stops at a fault: what it moved completes its slices, the next
  // call starts at the faulting one and fails it alone (EFAULT), the rest go on.
  shm::Scratch& sc = *scratch;
  uint32_t i = 0;
  uint64_t off = 0;
  auto settle = [&] {
    while (i < n && off == first[i].len) {
      sc.err[i++] = 0;
      off = 0;
    }
  };
  int fatal = 0;  // ESRCH: the peer is gone
  settle();
  while (i < n) {
    int cnt = 0;
    for (uint32_t k = i; k < n; ++k, ++cnt) {
      const Slice& s = first[k];
      const uint64_t skip = k == i ? off : 0;
      sc.local[cnt] = {s.local + skip, s.len - skip};
      sc.remote[cnt] = {reinterpret_cast<void*>(s.remote + skip), s.len - skip};
    }
    const ssize_t r = is_read ? ::process_vm_readv(cma_pid, sc.local.data(), cnt, sc.remote.data(), cnt, 0)
                              : ::process_vm_writev(cma_pid, sc.local.data(), cnt, sc.remote.data(), cnt, 0);
    counts_->copy_calls.fetch_add(1, std::memory_order_relaxed);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      for (uint64_t left = static_cast<uint64_t>(r); left > 0;) {
        const uint64_t take = std::min(left, first[i].len - off);
        off += take;
        left -= take;
        settle();
      }
      continue;
    }
    const int err = r < 0 ? errno : EFAULT;
    if (err == ESRCH) {
      fatal = err;
      break;
    }
    sc.err[i++] = err;
    off = 0;
    settle();
  }
  table->leave(slot);
  bool any_err = fatal != 0;
  for (uint32_t k = 0; k < i && !any_err; ++k) any_err = sc.err[k] != 0;
  const bool exited = any_err && (fatal == ESRCH || p->exited());
  if (exited) p->markDead();
  // Counted before any slice ends: whoever sees a task end sees its bytes counted.
  uint64_t ok = 0, ok_bytes = 0;
  for (uint32_t k = 0; k < i; ++k)
    if (sc.err[k] == 0) {
      ++ok;
      ok_bytes += first[k].len;
    }
  counts_->slices_completed += ok;
  counts_->slices_failed += n - ok;
  (is_read ? counts_->bytes_read : counts_->bytes_written) += ok_bytes;
  shm::Ends ends;  // its destructor reports the runs gathered: the last touch of the group
  for (uint32_t k = 0; k < n; ++k) {
    Slice* s = &first[k];
    if (k >= i || (sc.err[k] != 0 && exited)) {
      ends.end(s, TransferState::kFailed, 0,
               Status(Code::kUnavailable, fmt::format("shm peer process {} exited", pid)));
    } else if (sc.err[k] != 0) {
      const int e = sc.err[k];
      ends.end(s, TransferState::kFailed, 0,
               Status(Code::kIoError, fmt::format("{} of pid {} [{:#x}, +{}): {}",
                                                  is_read ? "process_vm_readv" : "process_vm_writev", pid, s->remote,
                                                  s->len, e == EPERM ? shm::cmaRefusal(pid, e) : std::strerror(e))));
    } else {
      ends.end(s, TransferState::kCompleted, s->len, Status::OK());
    }
  }
}

void ShmTransport::copyMapped(Group* g, const shm::TableView& table, int slot) {
  // The registration is mapped here: plain memory copies, no system call
  // (the announcement in the table holds the target's unregister meanwhile).
  Slice* const first = g->first;
  const uint32_t n = g->n;
  const bool is_read = first->is_read;
  uint64_t bytes = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const Slice& s = first[k];
    char* m = s.map_base + (s.remote - s.reg_addr);
    if (is_read) std::memcpy(s.local, m, s.len);
    else std::memcpy(m, s.local, s.len);
    bytes += s.len;
  }
  table.leave(slot);
  counts_->slices_completed += n;
  counts_->mapped_slices += n;
  (is_read ? counts_->bytes_read : counts_->bytes_written) += bytes;
  shm::Ends ends;
  for (uint32_t k = 0; k < n; ++k) ends.end(&first[k], TransferState::kCompleted, first[k].len, Status::OK());
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
  return {{"slices_completed", c.slices_completed.load()}, {"slices_failed", c.slices_failed.load()},
          {"bytes_read", c.bytes_read.load()},             {"bytes_written", c.bytes_written.load()},
          {"refused_requests", c.refused.load()},          {"peers_opened", c.peers_opened.load()},
          {"peers_refused", c.peers_refused.load()},       {"peers_gone", c.peers_gone.load()},
          {"copy_calls", c.copy_calls.load()},             {"withdrawals_waited", table_.waits()},
          {"peers_mapped", c.peers_mapped.load()},         {"peers_cma", c.peers_cma.load()},
          {"mappings", c.mappings.load()},                 {"mapped_slices", c.mapped_slices.load()},
          {"inline_slices", c.inline_slices.load()},
          {"readers", server_ ? server_->readers() : 0},   {"readers_refused", server_ ? server_->refused() : 0},
          {"files_passed", server_ ? server_->filesPassed() : 0}};
}

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<ShmTransport>(); }

}  // namespace hawser
