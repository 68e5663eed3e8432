// The shm transport's copy workers (shm.threads of them) and their queue,
// and the copies a submitting thread makes itself (shm.inline_bytes): a
// group of slices is moved by one process_vm_readv/writev call, or copied
// with memcpy from/to the peer's mapping, after being announced in the
// peer's table (shm_transport.h).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "base/log.h"
#include "transport/shm/shm_internal.h"
#include "transport/shm/shm_testing.h"
#include "transport/shm/shm_transport.h"

namespace hawser {

namespace shm::testing {
std::atomic<CopyHook> on_copy{nullptr};
}

using shm::Group;
using shm::Peer;
using shm::Slice;

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

namespace {
// The iovecs for cross-memory attach of a thread that is not a copy thread
// (a submitter, a waiter), made at its first use.
shm::Scratch* callerScratch() {
  thread_local std::unique_ptr<shm::Scratch> scratch;
  if (!scratch) scratch = std::make_unique<shm::Scratch>(shm::kMaxIov);
  return scratch.get();
}
}  // namespace

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
  std::vector<Group*> handed;
  // The peer of the group before (a batch mostly has one), its table (null:
  // the peer is dead) and the inline reader lent for it.
  Peer* peer = nullptr;
  const shm::TableView* table = nullptr;
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
      table = nullptr;
      slot = -1;
      if (!p->dead.load(std::memory_order_acquire)) {
        lent = p->borrowInline(table, slot);
        if (lent == -1) {
          handed.push_back(g);  // every inline reader of the peer is lent: the copy threads take it
          peer = nullptr;
          continue;
        }
        if (lent < 0) lent = -1;  // it died meanwhile: table null
      }
    }
    counts_->inline_slices.add(g->n);
    runGroup(g, table, slot, g->first->map_base ? nullptr : callerScratch());
  }
  giveBack();
  if (handed.empty()) return false;
  enqueue(handed);
  return true;
}

bool ShmTransport::moveDirect(PeerHandle& handle, int buffer, std::span<const TransferRequest> reqs, uint64_t bytes) {
  // What the batch's inline path does for a group of one registration
  // (copyHere, runGroup, copyMapped), with every check made before the
  // first byte moves: anything but a live peer's mapped registration,
  // announced, goes the batch's way, which reports it.
  if (!installed_ || bytes > settings_.inline_bytes || stopping_.load(std::memory_order_relaxed)) return false;
  const auto& ref = static_cast<const shm::PeerRef&>(handle);
  const shm::Reg& reg = shm::regOf(ref, buffer);
  if (!reg.map || reg.gen == 0 || reqs.empty()) return false;
  Peer* const p = ref.peer.get();
  if (p->dead.load(std::memory_order_acquire)) return false;
  const shm::TableView* table = nullptr;
  int slot = -1;
  const int lent = p->borrowInline(table, slot);
  if (lent < 0) return false;  // every inline reader lent (or the peer died meanwhile)
  bool moved = false;
  if (slot >= 0 && !table->closed()) {
    shm::testing::call(shm::testing::Point::kTurn, reqs[0].target_offset, reqs[0].length);
    // Until leave() the target's unregister of the registration waits for us.
    if (table->enter(slot, reg.addr, reg.gen)) {
      shm::testing::call(shm::testing::Point::kAnnounced, reqs[0].target_offset, reqs[0].length);
      char* const base = reg.map->base;
      uint64_t read = 0;
      for (const TransferRequest& r : reqs) {
        char* const m = base + (r.target_offset - reg.addr);
        if (r.opcode == OpCode::kRead) {
          std::memcpy(r.source, m, r.length);
          read += r.length;
        } else {
          std::memcpy(m, r.source, r.length);
        }
      }
      table->leave(slot);
      const size_t shard = metrics::threadShard();
      counts_->direct_requests.addAt(shard, reqs.size());
      counts_->slices_completed.addAt(shard, reqs.size());
      counts_->mapped_slices.addAt(shard, reqs.size());
      if (read) counts_->bytes_read.addAt(shard, read);
      if (read != bytes) counts_->bytes_written.addAt(shard, bytes - read);
      moved = true;
    }
  }
  p->giveInline(lent);
  return moved;
}

bool ShmTransport::assist(shm::SubBatchImpl* sb) {
  Group* g = nullptr;
  {
    std::lock_guard lk(mu_);
    if (stopping_.load()) return false;  // shutdown fails what is queued
    auto it = std::find_if(queue_.begin(), queue_.end(), [sb](const Group* q) { return q->first->sb == sb; });
    if (it == queue_.end()) return false;
    g = *it;
    queue_.erase(it);
  }
  Peer* p = g->first->peer;
  const shm::TableView* table = nullptr;  // null: the peer is dead
  int slot = -1, lent = -1;
  if (!p->dead.load(std::memory_order_acquire)) {
    lent = p->borrowInline(table, slot);
    if (lent == -1) {
      std::vector<Group*> back{g};  // every inline reader of the peer is lent: the copy threads take it
      enqueue(back);
      return false;
    }
    if (lent < 0) lent = -1;  // it died meanwhile: table null
  }
  counts_->waiter_slices.add(g->n);
  runGroup(g, table, slot, g->first->map_base ? nullptr : callerScratch());
  if (lent >= 0) p->giveInline(lent);
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
    counts_->slices_failed.add(n);
    shm::endAll(g, TransferState::kFailed, c, why);
  };
  auto gone = [&] {
    p->markDead();
    failAll(Code::kUnavailable, [pid](const Slice&) { return fmt::format("shm peer process {} exited", pid); });
  };
  auto withdrawn = [&] {
    counts_->refused.add(n);
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
    counts_->copy_calls.add(1);
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
  counts_->slices_completed.add(ok);
  counts_->slices_failed.add(n - ok);
  (is_read ? counts_->bytes_read : counts_->bytes_written).add(ok_bytes);
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
  counts_->slices_completed.add(n);
  counts_->mapped_slices.add(n);
  (is_read ? counts_->bytes_read : counts_->bytes_written).add(bytes);
  shm::Ends ends;
  for (uint32_t k = 0; k < n; ++k) ends.end(&first[k], TransferState::kCompleted, first[k].len, Status::OK());
}

}  // namespace hawser
