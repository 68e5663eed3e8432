// The shm sub-batch: prepare cuts tasks into slices, prepareRuns a block
// request's window of runs, both bound to the registrations their
// descriptor names and grouped for the copy threads; post queues the
// groups; cancel takes back what was not copied. And how slices end (Ends).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "base/segment_desc.h"
#include "transport/shm/shm_internal.h"

namespace hawser::shm {

std::vector<Reg> registrationsOf(const SegmentDesc& seg) {
  std::vector<Reg> regs(seg.buffers.size());
  for (size_t i = 0; i < seg.buffers.size(); ++i) {
    const BufferDesc& b = seg.buffers[i];
    regs[i].addr = b.addr;
    regs[i].length = b.length;
    auto a = b.attrs.find("shm");
    if (a == b.attrs.end() || !a->is_object()) continue;  // not exposed to shm: gen 0
    auto g = a->find("gen");
    if (g != a->end() && g->is_number_unsigned()) regs[i].gen = g->get<uint64_t>();
    auto sh = a->find("shared");
    regs[i].shared = sh != a->end() && sh->is_boolean() && sh->get<bool>();
  }
  return regs;
}

namespace {

// Cuts a request's [local, +len) <-> [remote, +len) into slices of at most
// `split` at `out`, each `proto` but for its range; returns how many.
uint32_t cut(Slice* out, const Slice& proto, char* local, uint64_t remote, uint64_t len, uint64_t split) {
  uint32_t n = 0;
  uint64_t off = 0;
  do {
    Slice& s = out[n++];
    s = proto;
    s.local = local + off;
    s.remote = remote + off;
    s.len = std::min<uint64_t>(split, len - off);
    off += s.len;
  } while (off < len);
  return n;
}

// A slice of `sb` to `peer`, bound to `reg` (its range still to set).
Slice bound(const Reg& reg, SubBatchImpl* sb, Peer* peer, bool is_read) {
  Slice s;
  s.sb = sb;
  s.peer = peer;
  s.gen = reg.gen;
  s.reg_addr = reg.addr;
  s.reg_len = reg.length;
  s.map_base = reg.map ? reg.map->base : nullptr;
  s.is_read = is_read;
  return s;
}

}  // namespace

SubBatchImpl::~SubBatchImpl() {
  // The engine frees only idle sub-batches; copies are short and bounded.
  while (outstanding.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

Status SubBatchImpl::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "shm transport is not running"};
  // Up to shm.inline_bytes in all: the submitting thread copies the tasks
  // itself, one slice each. Else slices for the copy threads.
  uint64_t bytes = 0;
  for (Task* t : tasks) bytes += t->request().length;
  const uint64_t inline_bytes = owner_->settings_.inline_bytes;
  const bool on_submitter = bytes <= inline_bytes;
  if (on_submitter) return prepareInline(tasks, out);
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
  for (Task* t : tasks) {
    const TransferRequest& r = t->request();
    const auto* ref = static_cast<const PeerRef*>(t->peer());
    const Reg& reg = regOf(*ref, t->remoteBuffer());
    Slice proto = bound(reg, this, ref->peer.get(), r.opcode == OpCode::kRead);
    proto.task = t;
    const uint32_t n = cut(&work->chunk[k], proto, static_cast<char*>(r.source), r.target_offset, r.length, split);
    k += n;
    t->setSliceCount(n);
  }
  group(*work, split);
  out = std::move(work);
  return Status::OK();
}

Status SubBatchImpl::prepareInline(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  // A slice a task, none cut (the submit is within shm.inline_bytes): each
  // written field by field (its run fields stay null), no division.
  const size_t n = tasks.size();
  std::unique_ptr<Work> work;
  if (spare_ && spare_->capacity >= n) {
    work = std::move(spare_);  // its slices' run fields stay null: only this writes them
    work->ngroups = 0;
  } else {
    work = std::make_unique<Work>();
    work->chunk.reset(new Slice[n]);
    work->groups.reset(new Group[n]);
    work->capacity = n;
    work->spare = true;
  }
  work->slices = n;
  for (size_t k = 0; k < n; ++k) {
    Task* const t = tasks[k];
    const TransferRequest& r = t->request();
    const auto* ref = static_cast<const PeerRef*>(t->peer());
    const Reg& reg = regOf(*ref, t->remoteBuffer());
    Slice& s = work->chunk[k];
    s.task = t;
    s.sb = this;
    s.peer = ref->peer.get();
    s.local = static_cast<char*>(r.source);
    s.remote = r.target_offset;
    s.len = r.length;
    s.gen = reg.gen;
    s.reg_addr = reg.addr;
    s.reg_len = reg.length;
    s.map_base = reg.map ? reg.map->base : nullptr;
    s.is_read = r.opcode == OpCode::kRead;
    t->setSliceCount(1);
  }
  work->on_submitter = true;
  group(*work, std::max<uint64_t>(owner_->settings_.inline_bytes, 1));
  out = std::move(work);
  return Status::OK();
}

Status SubBatchImpl::prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "shm transport is not running"};
  const auto* ref = static_cast<const PeerRef*>(w.peer);
  const std::span<const RunRef> runs = w.runs();
  uint64_t bytes = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRef& r = runs[i];
    if (r.buffer < 0 || static_cast<size_t>(r.buffer) >= ref->regs.size())
      return {Code::kInternal, fmt::format("blocks: run {} has no remote buffer index for shm", i)};
    bytes += r.length;
  }
  // The first window of up to shm.inline_bytes: its submitter copies it,
  // runs whole (later windows come from the pump: the copy threads).
  const uint64_t inline_bytes = owner_->settings_.inline_bytes;
  const bool on_submitter = w.on_submitter && bytes <= inline_bytes;
  const uint64_t split = on_submitter ? std::max<uint64_t>(inline_bytes, 1) : owner_->settings_.split_bytes;
  size_t total = 0, multi = 0;
  for (const RunRef& r : runs) {
    const uint64_t n = std::max<uint64_t>(1, (r.length + split - 1) / split);
    total += n;
    multi += n > 1;
  }
  auto work = std::make_unique<Work>();
  work->chunk.reset(new Slice[total]);
  if (multi) work->pieces.reset(new RunPieces[multi]);
  work->slices = total;
  size_t k = 0, m = 0;
  const bool is_read = w.op == OpCode::kRead;
  for (const RunRef& r : runs) {
    const Reg& reg = ref->regs[static_cast<size_t>(r.buffer)];
    RunPieces* rp = nullptr;
    if (r.length > split) {
      rp = &work->pieces[m++];
      rp->left.store(static_cast<uint32_t>((r.length + split - 1) / split), std::memory_order_relaxed);
      rp->length = r.length;
    }
    Slice proto = bound(reg, this, ref->peer.get(), is_read);
    proto.sink = w.sink;
    proto.pieces = rp;
    k += cut(&work->chunk[k], proto, reinterpret_cast<char*>(r.local), r.remote, r.length, split);
  }
  work->on_submitter = on_submitter;
  group(*work, on_submitter ? inline_bytes : split);
  out = std::move(work);
  return Status::OK();
}

void SubBatchImpl::group(Work& work, uint64_t limit) const {
  const uint32_t max_iov = owner_->settings_.max_iov;
  if (work.capacity < work.slices) {
    work.groups.reset(new Group[work.slices]);
    work.capacity = work.slices;
  }
  Group* g = nullptr;
  uint64_t g_bytes = 0;
  for (size_t i = 0; i < work.slices; ++i) {
    Slice& s = work.chunk[i];
    if (g && g->n < max_iov && g_bytes + s.len <= limit && s.peer == g->first->peer &&
        s.is_read == g->first->is_read && s.gen == g->first->gen) {
      ++g->n;
      g_bytes += s.len;
      continue;
    }
    g = &work.groups[work.ngroups++];
    g->first = &s;
    g->n = 1;
    g_bytes = s.len;
  }
}

void SubBatchImpl::post(std::unique_ptr<PreparedWork> base) {
  if (static_cast<Work*>(base.get())->on_submitter) {
    // Copied here and now; whoever could free this sub-batch waits for
    // the poster (the batch's submit lock, the block runner's lock), so
    // the work need not outlive this call.
    std::unique_ptr<Work> w(static_cast<Work*>(base.release()));
    outstanding.fetch_add(static_cast<int64_t>(w->slices), std::memory_order_acq_rel);
    if (owner_->copyHere(*w)) {  // some went to the copy threads after all
      std::lock_guard lk(mu_);
      posted_.push_back(std::move(w));
    } else if (w->spare && (!spare_ || spare_->capacity < w->capacity)) {
      spare_ = std::move(w);
    }
    return;
  }
  auto* w = static_cast<Work*>(base.release());
  std::vector<Group*> v(w->ngroups);
  for (size_t i = 0; i < w->ngroups; ++i) v[i] = &w->groups[i];
  const size_t n = w->slices;
  {
    std::lock_guard lk(mu_);
    posted_.emplace_back(w);
  }
  outstanding.fetch_add(static_cast<int64_t>(n), std::memory_order_acq_rel);
  owner_->enqueue(v);
}

void SubBatchImpl::cancel() { owner_->cancelQueued(this); }

bool SubBatchImpl::reuse() {
  if (!idle()) return false;
  std::lock_guard lk(mu_);
  posted_.clear();  // every slice of them ended
  return true;
}

bool SubBatchImpl::assist() {
  // Nothing queued or being copied: no look at the queue every submitting
  // thread shares (its lock).
  return outstanding.load(std::memory_order_acquire) != 0 && owner_->assist(this);
}

void Ends::end(Slice* s, TransferState state, uint64_t bytes, const Status& why) {
  SubBatchImpl* sb = s->sb;
  if (Task* t = s->task) {
    if (state == TransferState::kCompleted && t->sliceCount() == 1) {  // a whole task: ended with its neighbours
      if (whole_n_ == kWhole || (whole_sb_ && whole_sb_ != sb)) flushWhole();
      whole_sb_ = sb;
      whole_[whole_n_] = t;
      whole_bytes_[whole_n_++] = bytes;
      return;
    }
    sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
    t->completeSlice(state, bytes, why, now());
    return;
  }
  RunSink* sink = s->sink;
  if (RunPieces* rp = s->pieces) {
    if (state != TransferState::kCompleted) {
      std::lock_guard lk(rp->mu);
      if (!rp->failed) {
        rp->failed = true;
        rp->state = state;
        rp->why = why;
      }
    }
    if (rp->left.fetch_sub(1, std::memory_order_acq_rel) != 1) {
      sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
      return;
    }
    // The run's last slice: every other one ended before (acq_rel above).
    const bool failed = rp->failed;
    const uint64_t length = rp->length;
    const TransferState st = rp->state;
    const Status w = rp->why;
    sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
    if (failed) sink->runsEnded(1, 0, 0, st, w);
    else sink->runsEnded(1, 1, length, TransferState::kCompleted, Status::OK());
    return;
  }
  if (state == TransferState::kCompleted) {
    if (sink_ != sink) flush();  // another window
    sb_ = sb;
    sink_ = sink;
    ++runs_;
    bytes_ += bytes;
    return;
  }
  sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
  sink->runsEnded(1, 0, 0, state, why);
}

void Ends::flushWhole() {
  if (whole_n_ == 0) return;
  const size_t n = whole_n_;
  whole_n_ = 0;
  whole_sb_->outstanding.fetch_sub(static_cast<int64_t>(n), std::memory_order_acq_rel);
  whole_sb_ = nullptr;
  Task::completeWhole(whole_, whole_bytes_, n, now());
}

void Ends::flush() {
  flushWhole();
  if (runs_ == 0) return;
  const size_t n = runs_;
  const uint64_t bytes = bytes_;
  RunSink* sink = sink_;
  runs_ = 0;
  bytes_ = 0;
  sb_->outstanding.fetch_sub(static_cast<int64_t>(n), std::memory_order_acq_rel);
  sink->runsEnded(n, n, bytes, TransferState::kCompleted, Status::OK());
}

std::string cmaRefusal(int64_t pid, int err) {
  return fmt::format("cross-memory attach to pid {} refused ({}): process_vm_readv needs the same user or ptrace "
                     "permission (CAP_SYS_PTRACE, Yama ptrace_scope)",
                     pid, err == EPERM ? "EPERM" : std::strerror(err));
}

}  // namespace hawser::shm
