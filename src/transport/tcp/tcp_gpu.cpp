// GPU memory at the initiator: requests whose local buffer is GPU memory go
// through pinned staging slots of their io thread, with copies on a CUDA
// stream per GPU overlapped with the network (docs/tcp.md "GPU memory").
// A request is one slice, or a frame of many runs packed into one slot and
// copied with one copyRuns call each way.
//
//   write: wait for a slot -> copy GPU -> slot (committed from here) ->
//          once the copy is done, the connection's unsent list -> socket ->
//          response: slot freed, its slices complete
//   read:  wait for a slot -> the connection's unsent list -> socket ->
//          payload received into the slot -> copy slot -> GPU -> once the
//          copy is done: slot freed, its slices complete
//
// A slice completes only when no copy of it is in flight, so a task the
// user gets back (completed, failed or canceled) has no copy still reading
// or writing its memory.
#include <fmt/format.h>

#include "base/log.h"
#include "gpu/cuda_driver.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

// ---- the initiator's staging ---------------------------------------------------------

void IoThread::releaseStaging(Slice* s) {
  if (s->slot < 0) return;
  staging_->release(static_cast<size_t>(s->slot));
  s->slot = -1;
  counters_->staging_in_use.fetch_sub(1, std::memory_order_relaxed);
}

bool IoThread::copiesPending() const {
  for (auto& l : lanes_)
    if (!l->copying.empty()) return true;
  return false;
}

void IoThread::waitOneCopy() {
  for (auto& l : lanes_) {
    if (l->copying.empty()) continue;
    (void)l->stream->wait(l->copying.head->ticket);  // an error shows in pumpStaging's poll
    return;
  }
}

IoThread::Lane* IoThread::lane(int device, Status& why) {
  for (auto& l : lanes_)
    if (l->device == device) return l.get();
  auto l = std::make_unique<Lane>();
  l->device = device;
  why = gpu::CopyStream::open(device, l->stream, copy_settings_);
  if (!why.ok()) return nullptr;
  lanes_.push_back(std::move(l));
  return lanes_.back().get();
}

void IoThread::markReady(Conn* c) {
  if (c->touched) return;
  c->touched = true;
  ready_.push_back(c);
}

Status IoThread::queueCopy(Lane* l, Slice* s, bool to_slot) {
  counters_->staging_copies.fetch_add(1, std::memory_order_relaxed);
  if (!s->frame()) {
    Status st = to_slot ? l->stream->copy(s->buf, s->local, s->len, s->ticket)
                        : l->stream->copy(s->local, s->buf, s->len, s->ticket);
    gpu::CopyReport one;  // one run, one cuMemcpyAsync
    one.launches = 1;
    one.runs = 1;
    one.bytes = s->len;
    if (st.ok()) counters_->copy.add(one);
    return st;
  }
  // A frame: its runs lie packed in the slot (commitFrame); one call for all.
  copy_runs_.clear();
  for (uint32_t j = 0; j < s->runs; ++j) {
    const Slice& r = s[j];
    if (r.state.load(std::memory_order_relaxed) != kSliceCommitted) continue;
    const uint64_t slot = reinterpret_cast<uint64_t>(r.buf), user = reinterpret_cast<uint64_t>(r.local);
    copy_runs_.push_back(to_slot ? gpu::CopyRun{slot, user, r.len} : gpu::CopyRun{user, slot, r.len});
  }
  gpu::CopyReport rep;
  Status st = l->stream->copyRuns(copy_runs_, s->ticket, &rep);
  if (st.ok()) counters_->copy.add(rep);
  return st;
}

void IoThread::finishPayload(Conn* c) {
  c->rx_mode = RxMode::kHeader;
  Slice* s = c->inflight.head;
  if (s->gpu < 0) {
    completeFront(c, true, Status::OK());
    return;
  }
  // The bytes are in the staging slot: the slices complete once they are on the GPU.
  c->inflight.pop();
  Status st;
  Lane* l = lane(s->gpu, st);
  if (l) st = queueCopy(l, s, false);
  if (!st.ok()) {
    // Copies of a frame queued before the failure may still run.
    if (l) (void)l->stream->waitAll();
    endFrame(s, false, Status(st.code(), fmt::format("tcp: copying read data to GPU {}: {}", s->gpu, st.message())));
    return;
  }
  l->copying.push(s);
}

void IoThread::pumpStaging() {
  if (slot_wait_.empty() && !copiesPending()) return;
  ready_.clear();
  // 1. Copies that are done, in issue order per GPU.
  for (auto& l : lanes_) {
    while (Slice* s = l->copying.head) {
      bool done = false;
      Status st = l->stream->poll(s->ticket, done);
      if (st.ok() && !done) break;
      l->copying.pop();
      if (!st.ok()) {
        // The stream failed: this copy and every later one on it. Wait for
        // them to stop before the slices give their memory back.
        (void)l->stream->waitAll();
        endFrame(s, false, Status(st.code(), "tcp: GPU staging copy failed: " + st.message()));
        continue;
      }
      if (s->is_read) {
        counters_->gpu_to_device.fetch_add(s->flen, std::memory_order_relaxed);
        endFrame(s, true, Status::OK());
      } else {
        counters_->gpu_from_device.fetch_add(s->flen, std::memory_order_relaxed);
        s->conn->unsent.push(s);
        markReady(s->conn);
      }
    }
  }
  // 2. Free slots to the slices waiting for one, in order.
  while (Slice* s = slot_wait_.head) {
    if (allCanceled(s)) {
      slot_wait_.pop();
      dropFrame(s);
      continue;
    }
    if (!staging_) {
      Status st = gpu::PinnedBuffers::create(staging_slots_, settings_.slice_size, staging_);
      if (!st.ok()) {
        HLOG_ERROR("tcp: cannot allocate GPU staging buffers: {}", st.toString());
        failList(slot_wait_, false,
                 Status(st.code(), "tcp: no pinned staging buffers for GPU memory: " + st.message()));
        break;
      }
    }
    long slot = staging_->tryAcquire();
    if (slot < 0) {
      if (!s->waited) {
        s->waited = true;
        counters_->staging_waits.fetch_add(1, std::memory_order_relaxed);
      }
      break;  // a completing slice frees one
    }
    slot_wait_.pop();
    s->slot = static_cast<int32_t>(slot);
    s->buf = staging_->slot(static_cast<size_t>(slot));
    counters_->staging_in_use.fetch_add(1, std::memory_order_relaxed);
    if (s->is_read) {  // sent as is; its payload lands in the slot
      s->conn->unsent.push(s);
      markReady(s->conn);
      continue;
    }
    // A write: from the copy on, it is the io thread's (cancel cannot take it back).
    if (!commitFrame(s)) continue;
    s->staged = true;
    Status st;
    Lane* l = lane(s->gpu, st);
    if (l) st = queueCopy(l, s, true);
    if (!st.ok()) {
      if (l) (void)l->stream->waitAll();
      endFrame(s, false, Status(st.code(), fmt::format("tcp: copying write data from GPU {}: {}", s->gpu,
                                                       st.message())));
      continue;
    }
    l->copying.push(s);
  }
  // 3. Connections with new sendable slices.
  for (Conn* c : ready_) {
    c->touched = false;
    if (stop_.load(std::memory_order_relaxed)) continue;
    if (c->state == ConnState::kDisconnected) startConnect(c);
    else if (c->state == ConnState::kConnected) doSend(c);
  }
  ready_.clear();
}

void IoThread::failWaiting(Conn* c, const Status& why) {
  if (slot_wait_.empty()) return;
  SliceList keep, gone;
  while (Slice* s = slot_wait_.pop()) (s->conn == c ? gone : keep).push(s);
  slot_wait_ = keep;
  failList(gone, false, why);
}

void IoThread::failStaging(const Status& why) {
  for (auto& l : lanes_) {
    (void)l->stream->waitAll();  // nothing of a slice may still be copied once it completes
    while (Slice* s = l->copying.pop()) endFrame(s, false, why);
  }
  failList(slot_wait_, false, why);
  for (Conn* c : ready_) c->touched = false;
  ready_.clear();
}

}  // namespace hawser::tcp
