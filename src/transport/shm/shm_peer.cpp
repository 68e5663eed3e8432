// A peer's registrations mapped into this process (shm_internal.h: Mapping,
// Peer::mapping), and how a handle tells the route explanation what it got.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "transport/shm/shm_internal.h"
#include "transport/shm/shm_socket.h"

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
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
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
