// A peer of the shm transport: opening it (openRoute: its descriptor, its
// socket, its table, its pidfd watched, cross-memory attach probed, its
// registrations bound), its registrations mapped into this process
// (shm_internal.h: Mapping, Peer::mapping), and how a handle tells the route
// explanation what it got.
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "base/huge_pages.h"
#include "base/peer_entry.h"
#include "base/segment_desc.h"
#include "local/local_socket.h"
#include "transport/shm/shm_internal.h"
#include "transport/shm/shm_socket.h"
#include "transport/shm/shm_transport.h"

namespace hawser::shm {

namespace {
constexpr int kMapTimeoutMs = 5000;
}

Mapping::~Mapping() {
  if (map) ::munmap(map, map_len);
}

std::shared_ptr<Mapping> Peer::mapping(uint64_t gen, std::string& why) {
  std::lock_guard lk(map_mu);
  if (auto it = maps.find(gen); it != maps.end()) {
    if (auto m = it->second.lock()) return m;
    maps.erase(it);
  }
  if (dead.load(std::memory_order_acquire)) {
    why = "the peer exited";
    return nullptr;
  }
  Msg req;
  req.type = static_cast<uint32_t>(MsgType::kMap);
  req.gen = gen;
  Msg r;
  std::vector<int> fds;
  Status s = sendMsg(sock, req);
  if (s.ok()) s = recvMsg(sock, r, fds, kMapTimeoutMs);
  if (!s.ok()) {
    why = s.message();
    return nullptr;
  }
  const int fd = fds.empty() ? -1 : fds[0];
  for (size_t i = 1; i < fds.size(); ++i) ::close(fds[i]);
  if (r.type != static_cast<uint32_t>(MsgType::kMapped) || r.gen != gen || r.status != 0 || fd < 0) {
    why = r.status != 0 ? r.whyText() : "the peer answered another request";
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = r.offset / page * page;
  const size_t len = static_cast<size_t>(r.offset - start + r.length);
  // Placed for the file's huge pages (allocateHostMemory's are): one
  // page-table entry per 2 MiB where they are.
  void* m = huge_pages::mapShared(fd, start, len, PROT_READ | PROT_WRITE);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED) {
    why = fmt::format("mmap of registration {} ({} bytes at offset {}): {}", gen, len, start, std::strerror(err));
    return nullptr;
  }
  auto out = std::make_shared<Mapping>();
  out->gen = gen;
  out->addr = r.addr;
  out->length = r.length;
  out->map = m;
  out->map_len = len;
  out->base = static_cast<char*>(m) + (r.offset - start);
  maps[gen] = out;
  owner->countMapping();
  return out;
}

std::string PeerRef::mechanism() const {
  size_t exposed = 0, mapped = 0;
  for (const Reg& r : regs) {
    if (r.gen == 0) continue;
    ++exposed;
    mapped += r.map != nullptr;
  }
  if (mapped == exposed)
    return fmt::format("shared mappings for {} of {} buffers (memcpy); pid {} {}", mapped, exposed, peer->own_pid,
                       peer->cma ? "also reachable by cross-memory attach" : "not reachable by cross-memory attach");
  return fmt::format("shared mappings for {} of {} buffers (memcpy), cross-memory attach for the other {} (pid {} here)",
                     mapped, exposed, exposed - mapped, peer->pid);
}

}  // namespace hawser::shm

// ---- opening a peer (ShmTransport) -----------------------------------------

namespace hawser {

namespace {
constexpr int kSocketTimeoutMs = 5000;  // a peer's socket answers within this
}

using shm::Peer;

Status ShmTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  RouteDecline why;
  return openRoute(seg, out, why);
}

Status ShmTransport::openRoute(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out, RouteDecline& why) {
  why = {};  // every refusal says why, in the words of base/route.h
  if (!installed_ || stopping_.load()) return transportNotRunning("shm", why);
  shm::PeerDesc desc;
  Status ds = shm::decodePeerDesc(seg, desc, why);
  if (!ds.ok()) return ds;
  const std::string& socket = desc.socket;
  const uint64_t nonce = desc.nonce, probe = desc.probe;
  const int64_t pid = desc.pid;
  const std::string key = fmt::format("{}/{}", socket, nonce);
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard lk(peers_mu_);
    if (auto e = peers_.find(key); e != peers_.end()) peer = e->second.lock();
  }
  if (peer && peer->dead.load()) peer.reset();  // (released outside the lock: its deleter takes it)
  if (!peer) {
    Status s = connectPeer(seg, socket, nonce, probe, pid, peer, why);
    if (!s.ok()) {
      counts_->peers_refused++;
      return s;
    }
  }
  std::vector<shm::Reg> regs;
  Status s = bindRegistrations(*peer, seg, regs, why);
  if (!s.ok()) {
    counts_->peers_refused++;
    return s;
  }
  bool all_mapped = true;
  for (const shm::Reg& r : regs)
    if (r.gen != 0 && !r.map) all_mapped = false;
  (all_mapped ? counts_->peers_mapped : counts_->peers_cma)++;
  out = std::make_shared<shm::PeerRef>(std::move(peer), std::move(regs));
  return Status::OK();
}

Status ShmTransport::connectPeer(const SegmentDesc& seg, const std::string& socket, uint64_t nonce, uint64_t probe,
                                 int64_t own_pid, std::shared_ptr<Peer>& out, RouteDecline& why) {
  int fd = -1;
  RouteReason reason = RouteReason::kNone;
  Status s = local::connectTo(socket, "shm.socket_dir", fd, reason);
  if (!s.ok()) return declined(why, reason, {s.code(), fmt::format("segment '{}': {}", seg.name, s.message())});
  auto peer = std::shared_ptr<Peer>(new Peer(), [this](Peer* p) {
    if (p->table) {
      for (int slot : p->slots) p->table->releaseSlot(slot);
      for (const auto& r : p->inline_readers) p->table->releaseSlot(r.slot);
    }
    if (p->pidfd >= 0) {
      {
        std::lock_guard plk(peers_mu_);
        for (auto e = peers_.begin(); e != peers_.end();)
          e = e->second.expired() ? peers_.erase(e) : std::next(e);
      }
      if (p->death_watch) deaths_.remove(p->death_watch);  // outside peers_mu_: waits for a running callback
    }
    if (p->pidfd >= 0) ::close(p->pidfd);
    if (p->sock >= 0) ::close(p->sock);  // the peer frees our reader slots
    delete p;
  });
  peer->owner = this;
  peer->sock = fd;
  peer->own_pid = own_pid;
  peer->nonce = nonce;
  // Who listens there: a process of a user we trust, and where it is in
  // this pid namespace (0: not visible from here).
  local::Cred cred;
  s = local::peerCred(fd, cred);
  if (!s.ok()) return declined(why, RouteReason::kRefused, s);
  if (!local::trusted(cred.uid))
    return declined(why, RouteReason::kPermissionDenied, {Code::kNotSupported, fmt::format("the socket {} of segment '{}' belongs to uid {}: shm serves peers of the "
                                             "same user (or root) only",
                                             socket, seg.name, cred.uid)});
  shm::Msg hello;
  hello.type = static_cast<uint32_t>(shm::MsgType::kHello);
  hello.nonce = nonce;
  shm::Msg w;
  std::vector<int> fds;
  s = shm::sendMsg(fd, hello);
  if (s.ok()) s = shm::recvMsg(fd, w, fds, kSocketTimeoutMs);
  if (!s.ok())
    return declined(why, RouteReason::kPeerGone,
                    {Code::kNotSupported, fmt::format("segment '{}': the shm socket {} did not answer: {}", seg.name,
                                                      socket, s.message())});
  struct Closer {
    std::vector<int>& v;
    ~Closer() {
      for (int f : v)
        if (f >= 0) ::close(f);
    }
  } closer{fds};
  // The target refuses another user (permission), or a nonce it does not
  // hold (a stale descriptor: the owner restarted).
  if (w.type != static_cast<uint32_t>(shm::MsgType::kWelcome) || w.status != 0)
    return declined(why, w.whyText().find("nonce") != std::string::npos ? RouteReason::kPeerGone
                                                                        : RouteReason::kPermissionDenied,
                    {Code::kNotSupported, fmt::format("segment '{}': its shm socket refused this process: {}",
                                                      seg.name, w.whyText())});
  if (w.nonce != nonce || fds.size() != 2 || w.token == 0)
    return declined(why, RouteReason::kPeerIncompatible,
                    {Code::kNotSupported, fmt::format("segment '{}': its shm socket answered with another process's "
                                                      "credentials",
                                                      seg.name)});
  peer->token = w.token;
  std::unique_ptr<shm::TableView> table;
  s = shm::TableView::open(fds[0], nonce, table);
  if (!s.ok()) return declined(why, RouteReason::kRefused, s);
  if (table->closed())
    return declined(why, RouteReason::kPeerGone,
                    {Code::kNotSupported, fmt::format("the engine of pid {} shut down", own_pid)});
  peer->table = std::move(table);
  peer->live_table.store(peer->table.get(), std::memory_order_release);
  peer->pidfd = std::exchange(fds[1], -1);
  // Cross-memory attach: the probe word at the pid the kernel names here.
  peer->pid = cred.pid;
  if (cred.pid <= 0) {
    peer->cma_why = fmt::format("pid {} (in its own pid namespace) is not visible from this one", own_pid);
    peer->cma_reason = RouteReason::kOtherPidNamespace;
  } else {
    uint64_t word = 0;
    iovec l{&word, sizeof word}, r{reinterpret_cast<void*>(probe), sizeof word};
    if (::process_vm_readv(cred.pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof word)) {
      const int err = errno;
      peer->cma_reason = err == EPERM || err == EACCES ? RouteReason::kPermissionDenied : RouteReason::kRefused;
      peer->cma_why = err == EPERM || err == EACCES ? shm::cmaRefusal(cred.pid, err)
                                                    : fmt::format("process_vm_readv of pid {}'s probe word failed: {}",
                                                                  cred.pid, std::strerror(err));
    } else if (word != nonce) {
      peer->cma_why = fmt::format("pid {} here does not hold the owner's nonce", cred.pid);
      peer->cma_reason = RouteReason::kOtherPidNamespace;
    } else {
      peer->cma = true;
    }
  }
  std::weak_ptr<Peer> watched = peer;
  s = deaths_.add(
      peer->pidfd,
      [this, watched] {
        if (auto p = watched.lock()) peerGone(p);
      },
      peer->death_watch);
  if (!s.ok()) return declined(why, RouteReason::kRefused, {s.code(), "shm: " + s.message()});
  std::lock_guard lk(peers_mu_);
  peers_[fmt::format("{}/{}", socket, nonce)] = peer;
  counts_->peers_opened++;
  out = std::move(peer);
  return Status::OK();
}

Status ShmTransport::bindRegistrations(Peer& p, const SegmentDesc& seg, std::vector<shm::Reg>& out,
                                       RouteDecline& why) {
  out = shm::registrationsOf(seg);
  size_t unmapped = 0, exposed = 0;
  std::string first_why;
  for (shm::Reg& r : out) {
    if (r.gen == 0) continue;
    ++exposed;
    std::string no_map = "private memory (not a memfd or a shared file)";
    if (r.shared && settings_.shared_mappings) r.map = p.mapping(r.gen, no_map);
    if (!settings_.shared_mappings) no_map = "shm.shared_mappings is off";
    if (!r.map) {
      if (unmapped++ == 0) first_why = fmt::format("[{:#x}, +{}): {}", r.addr, r.length, no_map);
    } else if (r.map->addr != r.addr || r.map->length != r.length) {
      return declined(why, RouteReason::kPeerIncompatible,
                      {Code::kNotSupported, fmt::format("segment '{}': the peer's registration {} is [{:#x}, +{}), its "
                                                        "descriptor says [{:#x}, +{})",
                                                        seg.name, r.gen, r.map->addr, r.map->length, r.addr,
                                                        r.length)});
    }
  }
  if (unmapped && !p.cma)
    return declined(why, p.cma_reason,
                    {Code::kNotSupported,
                     fmt::format("{} of {} buffers of segment '{}' cannot be mapped (first: {}) and cross-memory "
                                 "attach is not available: {}",
                                 unmapped, exposed, seg.name, first_why, p.cma_why)});
  return Status::OK();
}

void ShmTransport::peerGone(const std::shared_ptr<Peer>& p) {
  counts_->peers_gone++;
  p->markDead();
}

}  // namespace hawser
