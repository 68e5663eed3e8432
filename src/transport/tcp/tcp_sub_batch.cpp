// A tcp sub-batch: prepare cuts slices (one allocation per prepare), post
// groups consecutive small ones into frames of many runs, picks their
// connections and hands them to the io threads, cancel takes back what was
// not yet sent.
#include <algorithm>
#include <fmt/format.h>
#include <thread>

#include "base/log.h"
#include "base/segment_desc.h"
#include "transport/tcp/tcp_conn_picker.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

Status SubBatchImpl::prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) {
  if (!owner_->installed_ || owner_->stopping_.load()) return {Code::kUnavailable, "tcp transport is not running"};

  // Pass 1: count. The peer's facts were decoded when the segment was opened.
  std::vector<uint32_t> counts(tasks.size());
  std::vector<int16_t> gpus(tasks.size(), -1), remote_gpus(tasks.size(), -2);
  size_t total = 0;
  bool frames = false;  // a peer takes frames of many runs
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = *tasks[i];
    const auto* ref = static_cast<const PeerRef*>(t.peer());
    frames |= ref->runs > 1;
    // GPU memory at this end is staged (the task's region, found at submit, says which GPU).
    gpus[i] = static_cast<int16_t>(t.region().gpu);
    if (t.remoteBuffer() >= 0) {
      const auto& b = t.segment().buffers[static_cast<size_t>(t.remoteBuffer())];
      remote_gpus[i] = static_cast<size_t>(t.remoteBuffer()) < ref->buffer_gpu.size()
                           ? ref->buffer_gpu[static_cast<size_t>(t.remoteBuffer())]
                           : int16_t{-2};
      // GPU memory at the other end needs a peer that stages it.
      if (!ref->gpu && remote_gpus[i] >= 0)
        return {Code::kNotSupported,
                fmt::format("requests[{}]: remote buffer [{:#x}, +{}) of segment '{}' is GPU memory ({}), which its "
                            "tcp target does not serve (no CUDA driver there)",
                            t.id(), b.addr, b.length, t.segment().name, b.location)};
    }
    const uint64_t n = (t.request().length + ref->slice - 1) / ref->slice;
    if (n > UINT32_MAX)
      return {Code::kInvalidArgument, fmt::format("requests[{}]: length {} needs {} slices of {} bytes (max {})",
                                                  t.id(), t.request().length, n, ref->slice, UINT32_MAX)};
    counts[i] = static_cast<uint32_t>(n);
    total += n;
  }

  // Pass 2: cut.
  auto work = std::make_unique<Work>();
  work->chunk.reset(new Slice[total]);
  if (frames && total > 1) work->tables.reset(new RunEntry[total]);
  work->slices = total;
  size_t k = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task* t = tasks[i];
    const TransferRequest& r = t->request();
    const auto* ref = static_cast<const PeerRef*>(t->peer());
    const bool is_read = r.opcode == OpCode::kRead;
    // Bound to the registration of the remote buffer the task was made for
    // (its seq in the descriptor): the target serves no slice of it from another.
    const uint64_t seq = ref->bound && t->remoteBuffer() >= 0
                             ? t->segment().buffers[static_cast<size_t>(t->remoteBuffer())].seq
                             : 0;
    uint64_t off = 0;
    for (uint32_t j = 0; j < counts[i]; ++j) {
      Slice& s = work->chunk[k++];
      uint64_t len = std::min<uint64_t>(ref->slice, r.length - off);
      s.task = t;
      s.sb = this;
      s.conn = nullptr;  // post() picks it
      s.local = static_cast<char*>(r.source) + off;
      s.gpu = gpus[i];
      s.remote_gpu = remote_gpus[i];
      s.buf = s.gpu < 0 ? s.local : nullptr;  // GPU memory: a staging slot, once one is free
      s.len = static_cast<uint32_t>(len);
      s.flen = s.len;
      s.is_read = is_read;
      s.hdr.type = is_read ? kReadReq : kWriteReq;
      s.hdr.size = static_cast<uint32_t>(len);
      s.hdr.length = is_read ? 0 : static_cast<uint32_t>(len);
      s.hdr.addr = r.target_offset + off;
      if (seq != 0) {
        s.hdr.version = kBoundVersion;
        s.hdr.seq = seq;
        s.hdr.length += kBindingSize;
      }
      off += len;
    }
    t->setSliceCount(counts[i]);
  }
  out = std::move(work);
  return Status::OK();
}

// How many slices from arr[i] on go in one request (docs/tcp.md "Frames of
// many runs"): consecutive slices of one peer handle, one direction, one
// kind of memory at each end (host, or the same GPU), bound to one
// registration of the target (a frame carries one), while their bytes stay
// within the handle's group size and their count within its runs. 1: alone.
static size_t groupAt(const Slice* arr, size_t i, size_t n) {
  const Slice& s = arr[i];
  const auto* ref = static_cast<const PeerRef*>(s.task->peer());
  if (ref->runs < 2 || s.remote_gpu < -1) return 1;
  uint64_t bytes = s.len;
  size_t k = 1;
  for (; i + k < n && k < ref->runs; ++k) {
    const Slice& t = arr[i + k];
    if (t.task->peer() != s.task->peer() || t.is_read != s.is_read || t.gpu != s.gpu ||
        t.remote_gpu != s.remote_gpu || t.hdr.seq != s.hdr.seq || bytes + t.len > ref->group)
      break;
    bytes += t.len;
  }
  return k;
}

void SubBatchImpl::post(std::unique_ptr<PreparedWork> base) {
  Work& w = static_cast<Work&>(*base);
  std::unique_ptr<Slice[]> chunk = std::move(w.chunk);
  RunEntry* tables = w.tables.get();
  const size_t n = base->slices;
  auto& io = owner_->io_;
  Slice* first[kMaxIoThreads] = {};
  Slice* lastp[kMaxIoThreads] = {};
  const bool down = owner_->stopping_.load();
  Slice* arr = slices_.keep(std::move(chunk), n);
  if (tables) tables_.keep(std::move(w.tables), n);
  outstanding.fetch_add(static_cast<int64_t>(n), std::memory_order_acq_rel);
  const TcpSettings& set = owner_->settings_;
  ConnPicker picker(set.home_connections, set.home_slack, set.home_window_ms, threadSeat(), steadyNowNs());
  for (size_t i = 0; i < n;) {
    Slice* s = &arr[i];
    if (down) {
      s->state.store(kSliceCommitted, std::memory_order_relaxed);
      outstanding.fetch_sub(1, std::memory_order_acq_rel);
      s->task->completeSlice(TransferState::kFailed, 0, Status(Code::kUnavailable, "tcp transport shut down"));
      ++i;
      continue;
    }
    // A frame of k runs takes one connection, as one slice of its bytes would.
    const size_t k = tables ? groupAt(arr, i, n) : 1;
    uint64_t bytes = 0;
    for (size_t j = 0; j < k; ++j) bytes += s[j].len;
    const bool first_of_task = i == 0 || s->task != arr[i - 1].task;
    Conn* conn = picker.pick(static_cast<const PeerRef*>(s->task->peer())->peer, static_cast<uint32_t>(bytes),
                             first_of_task ? (k > 1 ? 1 : s->task->sliceCount()) : 0);
    s->runs = static_cast<uint16_t>(k);
    if (k > 1) s->table = tables + i;
    for (size_t j = 0; j < k; ++j) {
      if (j > 0) s[j].runs = 0;
      s[j].conn = conn;
      s[j].state.store(kSliceQueued, std::memory_order_relaxed);
    }
    // Chains are built newest-first (post() wants a stack segment).
    const size_t t = conn->io_index;
    s->next = first[t];
    first[t] = s;
    if (!lastp[t]) lastp[t] = s;
    i += k;
  }
  picker.flush();  // before any slice can finish
  // Sent from this thread where the io thread sleeps (an idle connection):
  // no wake-up between submitTransfer and the wire.
  for (size_t t = 0; t < io.size(); ++t)
    if (first[t]) io[t]->submit(first[t], lastp[t]);
}

void SubBatchImpl::cancel() {
  bool any = false;
  slices_.forEach([&any](Slice& s) {
    uint8_t expect = kSliceQueued;
    if (s.state.compare_exchange_strong(expect, kSliceCanceled, std::memory_order_acq_rel)) {
      any = true;
      s.task->completeSlice(TransferState::kCanceled, 0,
                            Status(Code::kUnavailable, "canceled by cancelTransfer before it was sent"));
    }
  });
  if (!any) return;
  // Let the io threads drop the canceled slices now, so that once the tasks
  // are terminal the sub-batch is idle (freeBatchID succeeds) without a race.
  auto& io = owner_->io_;
  std::vector<uint64_t> tickets;
  for (auto& t : io) tickets.push_back(t->requestPurge());
  for (size_t i = 0; i < io.size(); ++i) io[i]->waitPurged(tickets[i], std::chrono::seconds(1));
}

SubBatchImpl::~SubBatchImpl() {
  // The engine frees only idle sub-batches; never free slices an io thread
  // still holds (wait a bounded time, then leak rather than corrupt).
  const auto grace = std::chrono::milliseconds(owner_->settings_.timeout_ms) + std::chrono::seconds(1);
  if (!slices_.settle(outstanding, grace, "tcp: sub-batch", "slice(s)")) tables_.abandon();  // the slices point into them
}

}  // namespace hawser::tcp
