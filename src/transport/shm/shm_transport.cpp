// The shm transport (shm_transport.h): install, peers, the copy workers and
// the sub-batches.
#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
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
#include "base/log.h"
#include "metadata/descriptor.h"
#include "transport/shm/shm_testing.h"

namespace hawser {

namespace shm {

namespace testing {
std::atomic<CopyHook> on_copy{nullptr};
}

constexpr uint32_t kDescVersion = 2;  // 2: the table carries generations and reader slots
constexpr uint32_t kMaxThreads = 64;

// One target process, shared by every handle on it.
struct Peer {
  ShmTransport* owner = nullptr;
  int64_t pid = 0;
  uint64_t nonce = 0;
  int pidfd = -1;
  std::atomic<bool> dead{false};
  std::mutex mu;
  std::shared_ptr<TableView> table;  // null once the peer is gone
  // The reader slot in its table of each of our copy threads (claimed at
  // its first copy; -1: none yet). Only that thread touches its entry.
  int slots[kMaxThreads];

  Peer() { std::fill(std::begin(slots), std::end(slots), -1); }

  std::shared_ptr<TableView> view() {
    std::lock_guard lk(mu);
    return table;
  }
  // Copy thread `worker`'s reader slot in `t` (-1: the table has none free).
  int slotFor(unsigned worker, const TableView& t) {
    if (slots[worker] < 0) slots[worker] = t.claimSlot();
    return slots[worker];
  }
  // Whether the process has exited (its pidfd is readable).
  bool exited() const {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  // The process is gone: unmap its table (once no copy uses it).
  void markDead() {
    if (dead.exchange(true)) return;
    std::shared_ptr<TableView> t;
    {
      std::lock_guard lk(mu);
      t = std::move(table);
    }
    HLOG_INFO("shm: peer process {} exited; its registration table is unmapped", pid);
  }
};

class PeerRef final : public PeerHandle {
 public:
  explicit PeerRef(std::shared_ptr<Peer> p) : peer(std::move(p)) {}
  const std::shared_ptr<Peer> peer;
};

// At most shm.split_bytes of one task: one process_vm_readv/writev loop.
// Every slice of a task is bound to the registration its task found at
// prepare (`gen`, the target's range [reg_addr, +reg_len)); gen 0: none
// held the task's range.
struct Slice {
  Task* task = nullptr;
  SubBatchImpl* sb = nullptr;
  Peer* peer = nullptr;
  char* local = nullptr;
  uint64_t remote = 0;
  uint64_t len = 0;
  uint64_t gen = 0;
  uint64_t reg_addr = 0, reg_len = 0;
  bool is_read = false;
};

// Consecutive slices of one window moved by one process_vm_readv/writev
// call (one iovec pair each): same peer, same direction, same registration;
// at most shm.max_iov of them and shm.split_bytes in all (a slice of that
// size goes alone), so a window of small runs costs a call per
// shm.split_bytes, as contiguous bytes do.
struct Group {
  Slice* first = nullptr;
  uint32_t n = 0;
};

struct Work final : PreparedWork {
  std::unique_ptr<Slice[]> chunk;
  std::unique_ptr<Group[]> groups;
  size_t ngroups = 0;
};

// A copy thread's iovec arrays and per-slice outcomes (shm.max_iov each).
struct Scratch {
  explicit Scratch(size_t n) : local(n), remote(n), err(n) {}
  std::vector<iovec> local, remote;
  std::vector<int> err;
};

class SubBatchImpl final : public SubBatch {
 public:
  explicit SubBatchImpl(ShmTransport* owner) : owner_(owner) {}
  ~SubBatchImpl() override {
    // The engine frees only idle sub-batches; copies are short and bounded.
    while (outstanding.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override {
    if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "shm transport is not running"};
    const uint64_t split = owner_->settings_.split_bytes;
    size_t total = 0;
    for (Task* t : tasks) {
      const uint64_t n = std::max<uint64_t>(1, (t->request().length + split - 1) / split);
      if (n > UINT32_MAX)
        return {Code::kInvalidArgument, fmt::format("requests[{}]: length {} needs {} slices of {} bytes (max {})",
                                                    t->id(), t->request().length, n, split, UINT32_MAX)};
      total += n;
    }
    auto work = std::make_unique<Work>();
    work->chunk.reset(new Slice[total]);
    work->slices = total;
    size_t k = 0;
    Peer* last = nullptr;
    std::shared_ptr<TableView> view;
    for (Task* t : tasks) {
      const TransferRequest& r = t->request();
      Peer* peer = static_cast<const PeerRef*>(t->peer())->peer.get();
      if (peer != last) {
        view = peer->view();
        last = peer;
      }
      // The task's registration: the one that holds its range now.
      TableEntry reg{};
      if (!view || !view->find(r.target_offset, r.length, reg)) reg = TableEntry{};
      uint32_t n = 0;
      uint64_t off = 0;
      do {
        Slice& s = work->chunk[k++];
        s.task = t;
        s.sb = this;
        s.peer = peer;
        s.len = std::min<uint64_t>(split, r.length - off);
        s.local = static_cast<char*>(r.source) + off;
        s.remote = r.target_offset + off;
        s.gen = reg.gen;
        s.reg_addr = reg.addr;
        s.reg_len = reg.length;
        s.is_read = r.opcode == OpCode::kRead;
        off += s.len;
        ++n;
      } while (off < r.length);
      t->setSliceCount(n);
    }
    // Groups of consecutive slices, one system call each.
    const uint32_t max_iov = owner_->settings_.max_iov;
    work->groups.reset(new Group[total]);
    Group* g = nullptr;
    uint64_t g_bytes = 0;
    for (size_t i = 0; i < total; ++i) {
      Slice& s = work->chunk[i];
      if (g && g->n < max_iov && g_bytes + s.len <= split && s.peer == g->first->peer &&
          s.is_read == g->first->is_read && s.gen == g->first->gen) {
        ++g->n;
        g_bytes += s.len;
        continue;
      }
      g = &work->groups[work->ngroups++];
      g->first = &s;
      g->n = 1;
      g_bytes = s.len;
    }
    out = std::move(work);
    return Status::OK();
  }

  void post(std::unique_ptr<PreparedWork> base) override {
    Work& w = static_cast<Work&>(*base);
    const size_t n = base->slices;
    std::vector<Group*> v(w.ngroups);
    for (size_t i = 0; i < w.ngroups; ++i) v[i] = &w.groups[i];
    {
      std::lock_guard lk(mu_);
      chunks_.push_back(std::move(w.chunk));
      groups_.push_back(std::move(w.groups));
    }
    outstanding.fetch_add(static_cast<int64_t>(n), std::memory_order_acq_rel);
    owner_->enqueue(v);
  }

  void cancel() override { owner_->cancelQueued(this); }
  bool idle() const override { return outstanding.load(std::memory_order_acquire) == 0; }

  std::atomic<int64_t> outstanding{0};  // slices queued or being copied

 private:
  ShmTransport* owner_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slice[]>> chunks_;
  std::vector<std::unique_ptr<Group[]>> groups_;
};

// Ends a slice: it is no longer referenced once `outstanding` drops, so
// everything needed is read first.
void finish(Slice* s, TransferState st, uint64_t bytes, const Status& why = Status::OK()) {
  Task* t = s->task;
  s->sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
  t->completeSlice(st, bytes, why);
}

// Ends every slice of a group the same way (`why` names each slice's range).
template <class Why>
void finishAll(Group* g, TransferState st, Code code, Why why) {
  Slice* const first = g->first;
  const uint32_t n = g->n;  // g is not touched once its last slice ended
  for (uint32_t i = 0; i < n; ++i) finish(&first[i], st, 0, Status(code, why(first[i])));
}

std::string cmaRefusal(int64_t pid, int err) {
  return fmt::format("cross-memory attach to pid {} refused ({}): process_vm_readv needs the same user or ptrace "
                     "permission (CAP_SYS_PTRACE, Yama ptrace_scope)",
                     pid, err == EPERM ? "EPERM" : std::strerror(err));
}

}  // namespace shm

using shm::Group;
using shm::Peer;
using shm::Slice;

static_assert(findKnob("shm.threads")->hi == static_cast<int64_t>(shm::kMaxThreads));

Status ShmTransport::loadSettings(const Config& cfg, ShmSettings& out) {
  ShmSettings s;
  Status st;
  if (!(st = cfg.getInt("shm.threads", s.threads)).ok() || !(st = cfg.getSize("shm.split_bytes", s.split_bytes)).ok() ||
      !(st = cfg.getInt("shm.max_iov", s.max_iov)).ok())
    return st;
  if (s.threads == 0) s.threads = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 4);
  out = s;
  return Status::OK();
}

ShmTransport::ShmTransport() : counts_(std::make_unique<Counts>()) {}

ShmTransport::~ShmTransport() {
  shutdown();
  if (epfd_ >= 0) ::close(epfd_);
  if (evfd_ >= 0) ::close(evfd_);
}

TransportCaps ShmTransport::caps() const {
  TransportCaps c;
  c.memory_segments = true;
  c.local_memory = kHostMemory;
  c.remote_memory = kHostMemory;
  c.same_host_only = true;
  c.cost_rank = 20;
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
  // The kernel may lack or forbid cross-memory attach (seccomp in containers).
  uint64_t probe = 0;
  iovec l{&probe, sizeof probe}, r{&nonce_, sizeof nonce_};
  if (::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof probe) || probe != nonce_)
    return {Code::kNotSupported, fmt::format("process_vm_readv does not work here: {}", std::strerror(errno))};
  const long self = ::syscall(SYS_pidfd_open, ::getpid(), 0);
  if (self < 0) return {Code::kNotSupported, fmt::format("pidfd_open (Linux 5.3+): {}", std::strerror(errno))};
  ::close(static_cast<int>(self));
  s = table_.create(nonce_);
  if (!s.ok()) return s;
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  evfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epfd_ < 0 || evfd_ < 0) return {Code::kInternal, fmt::format("shm: epoll/eventfd: {}", std::strerror(errno))};
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = evfd_;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
  watcher_ = std::thread([this] { watch(); });
  for (uint32_t i = 0; i < settings_.threads; ++i) workers_.emplace_back([this, i] { work(i); });
  installed_ = true;
  HLOG_INFO("shm transport: {} copy thread(s), split {} B, up to {} runs per call", settings_.threads,
            settings_.split_bytes, settings_.max_iov);
  return Status::OK();
}

void ShmTransport::shutdown() {
  if (!installed_) return;
  {
    std::lock_guard lk(mu_);  // enqueue() reads stopping_ under it
    if (stopping_.exchange(true)) return;
  }
  table_.close();  // initiators stop copying from/to this engine's memory
  cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  uint64_t one = 1;
  (void)!::write(evfd_, &one, sizeof one);
  if (watcher_.joinable()) watcher_.join();
  // What the workers left in the queue fails.
  std::deque<Group*> left;
  {
    std::lock_guard lk(mu_);
    left.swap(queue_);
  }
  for (Group* g : left)
    shm::finishAll(g, TransferState::kFailed, Code::kUnavailable, [](const Slice&) { return "shm transport shut down"; });
}

void ShmTransport::describe(nlohmann::json& attrs) const {
  attrs = nlohmann::json::object();
  attrs["version"] = shm::kDescVersion;
  attrs["pid"] = static_cast<int64_t>(::getpid());
  attrs["nonce"] = nonce_;
  attrs["probe"] = reinterpret_cast<uint64_t>(&nonce_);
  attrs["table_fd"] = table_.fd();
}

Status ShmTransport::registerMemory(void* addr, size_t length, const std::string& location, bool remote_accessible,
                                    nlohmann::json& attrs) {
  attrs = nlohmann::json::object();
  if (!installed_ || !remote_accessible || memoryKindOf(location) != kHostMemory) return Status::OK();
  uint64_t gen = 0;
  Status s = table_.add(reinterpret_cast<uint64_t>(addr), length, gen);
  if (s.ok()) attrs["gen"] = gen;
  return s;
}

Status ShmTransport::unregisterMemory(void* addr, size_t) {
  table_.remove(reinterpret_cast<uint64_t>(addr));
  return Status::OK();
}

Status ShmTransport::openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) {
  if (!installed_ || stopping_.load()) return {Code::kUnavailable, "shm transport is not running"};
  if (seg.kind != SegmentDesc::Kind::kMemory) return {Code::kNotSupported, "not a memory segment"};
  auto it = seg.transports.find("shm");
  if (it == seg.transports.end() || !it->is_object())
    return {Code::kNotSupported, fmt::format("segment '{}' publishes no shm transport", seg.name)};
  auto num = [&](const char* k, uint64_t& v) {
    auto f = it->find(k);
    if (f == it->end() || !f->is_number_integer()) return false;
    if (!f->is_number_unsigned() && f->get<int64_t>() < 0) return false;
    v = f->get<uint64_t>();
    return true;
  };
  uint64_t version = 0, pid = 0, nonce = 0, probe = 0, table_fd = 0;
  if (!num("version", version) || !num("pid", pid) || !num("nonce", nonce) || !num("probe", probe) ||
      !num("table_fd", table_fd) || pid == 0 || pid > INT32_MAX || table_fd > INT32_MAX)
    return {Code::kNotSupported, fmt::format("segment '{}': malformed shm attributes {}", seg.name, it->dump())};
  if (version != shm::kDescVersion)
    return {Code::kNotSupported, fmt::format("segment '{}': shm version {} (this build speaks {})", seg.name, version,
                                             shm::kDescVersion)};
  const std::string key = fmt::format("{}/{}", pid, nonce);
  {
    std::shared_ptr<Peer> p;  // released after the lock (its deleter takes it)
    std::lock_guard lk(peers_mu_);
    if (auto e = peers_.find(key); e != peers_.end()) p = e->second.lock();
    if (p && !p->dead.load()) {
      out = std::make_shared<shm::PeerRef>(std::move(p));
      return Status::OK();
    }
  }
  // A pidfd first: if the probe then finds the nonce, the pidfd is that process.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    counts_->peers_refused++;
    return {Code::kNotSupported, fmt::format("pid {} of segment '{}' is not running in this pid namespace ({})", pid,
                                             seg.name, std::strerror(errno))};
  }
  auto peer = std::shared_ptr<Peer>(new Peer(), [this](Peer* p) {
    if (p->table)
      for (int slot : p->slots) p->table->releaseSlot(slot);
    {
      std::lock_guard plk(peers_mu_);
      auto b = by_pidfd_.find(p->pidfd);
      if (b != by_pidfd_.end() && b->second.expired()) by_pidfd_.erase(b);
      for (auto e = peers_.begin(); e != peers_.end();)
        e = e->second.expired() ? peers_.erase(e) : std::next(e);
      if (epfd_ >= 0) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, p->pidfd, nullptr);
    }
    ::close(p->pidfd);
    delete p;
  });
  peer->owner = this;
  peer->pid = static_cast<int64_t>(pid);
  peer->nonce = nonce;
  peer->pidfd = pidfd;
  uint64_t word = 0;
  iovec l{&word, sizeof word}, r{reinterpret_cast<void*>(probe), sizeof word};
  if (::process_vm_readv(static_cast<pid_t>(pid), &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof word)) {
    const int err = errno;
    counts_->peers_refused++;
    if (err == EPERM || err == EACCES) return {Code::kNotSupported, shm::cmaRefusal(peer->pid, err)};
    return {Code::kNotSupported,
            fmt::format("process_vm_readv of pid {}'s probe word failed: {}", pid, std::strerror(err))};
  }
  if (word != nonce) {
    counts_->peers_refused++;
    return {Code::kNotSupported,
            fmt::format("pid {} here is not the owner of segment '{}' (another pid namespace?)", pid, seg.name)};
  }
  std::unique_ptr<shm::TableView> table;
  Status s = shm::TableView::open(peer->pid, static_cast<int>(table_fd), nonce, table);
  if (!s.ok()) {
    counts_->peers_refused++;
    return s;
  }
  if (table->closed()) {
    counts_->peers_refused++;
    return {Code::kNotSupported, fmt::format("the engine of pid {} shut down", pid)};
  }
  peer->table = std::move(table);
  std::lock_guard lk(peers_mu_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = pidfd;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, pidfd, &ev) != 0)
    return {Code::kInternal, fmt::format("shm: epoll_ctl on a pidfd: {}", std::strerror(errno))};
  by_pidfd_[pidfd] = peer;
  peers_[key] = peer;
  counts_->peers_opened++;
  out = std::make_shared<shm::PeerRef>(std::move(peer));
  return Status::OK();
}

void ShmTransport::watch() {
  epoll_event evs[16];
  while (!stopping_.load()) {
    int n = ::epoll_wait(epfd_, evs, 16, -1);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i)
      if (evs[i].data.fd != evfd_) peerGone(evs[i].data.fd);
  }
}

void ShmTransport::peerGone(int pidfd) {
  std::shared_ptr<Peer> p;
  {
    std::lock_guard lk(peers_mu_);
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, pidfd, nullptr);  // level-triggered: once is enough
    auto it = by_pidfd_.find(pidfd);
    if (it != by_pidfd_.end()) p = it->second.lock();
  }
  if (!p) return;
  counts_->peers_gone++;
  p->markDead();
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
        shm::finishAll(g, TransferState::kFailed, Code::kUnavailable,
                       [](const Slice&) { return "shm transport shut down"; });
      return;
    }
    queue_.insert(queue_.end(), groups.begin(), groups.end());
  }
  if (groups.size() == 1) cv_.notify_one();
  else cv_.notify_all();
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
    shm::finishAll(g, TransferState::kCanceled, Code::kUnavailable,
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
    runGroup(worker, g, scratch);
    lk.lock();
  }
}

void ShmTransport::runGroup(unsigned worker, Group* g, shm::Scratch& sc) {
  // Everything of the group is read before its first slice ends: once the
  // last one did, its sub-batch (and the group) may be gone.
  Slice* const first = g->first;
  const uint32_t n = g->n;
  Peer* p = first->peer;
  const bool is_read = first->is_read;
  const uint64_t gen = first->gen, reg_addr = first->reg_addr, reg_len = first->reg_len;
  const int64_t pid = p->pid;
  auto failAll = [&](Code c, auto why) {
    counts_->slices_failed += n;
    shm::finishAll(g, TransferState::kFailed, c, why);
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
  if (p->dead.load(std::memory_order_acquire) || p->exited()) return gone();
  std::shared_ptr<shm::TableView> table = p->view();
  if (!table) return gone();
  if (table->closed())
    return failAll(Code::kUnavailable,
                   [pid](const Slice&) { return fmt::format("shm peer {}: its engine shut down", pid); });
  shm::testing::call(shm::testing::Point::kTurn, first->remote, first->len);
  if (gen == 0) return withdrawn();
  const int slot = p->slotFor(worker, *table);
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

  // One call moves the slices from `i` (`off` bytes of it done) on. A short
  // transfer stops at a fault: what it moved completes its slices, the next
  // call starts at the faulting one and fails it alone (EFAULT), the rest go on.
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
    const ssize_t r = is_read ? ::process_vm_readv(static_cast<pid_t>(pid), sc.local.data(), cnt, sc.remote.data(),
                                                   cnt, 0)
                              : ::process_vm_writev(static_cast<pid_t>(pid), sc.local.data(), cnt, sc.remote.data(),
                                                    cnt, 0);
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
  for (uint32_t k = 0; k < n; ++k) {
    Slice* s = &first[k];
    if (k >= i || (sc.err[k] != 0 && exited)) {
      shm::finish(s, TransferState::kFailed, 0,
                  Status(Code::kUnavailable, fmt::format("shm peer process {} exited", pid)));
    } else if (sc.err[k] != 0) {
      const int e = sc.err[k];
      shm::finish(s, TransferState::kFailed, 0,
                  Status(Code::kIoError, fmt::format("{} of pid {} [{:#x}, +{}): {}",
                                                     is_read ? "process_vm_readv" : "process_vm_writev", pid,
                                                     s->remote, s->len,
                                                     e == EPERM ? shm::cmaRefusal(pid, e) : std::strerror(e))));
    } else {
      shm::finish(s, TransferState::kCompleted, s->len);
    }
  }
}

void ShmTransport::diagnose(TransportDiagnosis& out) const {
  out.facts.emplace_back("copy threads", std::to_string(settings_.threads));
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
}

Counters ShmTransport::stats() const {
  const Counts& c = *counts_;
  return {{"slices_completed", c.slices_completed.load()}, {"slices_failed", c.slices_failed.load()},
          {"bytes_read", c.bytes_read.load()},             {"bytes_written", c.bytes_written.load()},
          {"refused_requests", c.refused.load()},          {"peers_opened", c.peers_opened.load()},
          {"peers_refused", c.peers_refused.load()},       {"peers_gone", c.peers_gone.load()},
          {"copy_calls", c.copy_calls.load()},             {"withdrawals_waited", table_.waits()}};
}

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<ShmTransport>(); }

}  // namespace hawser
