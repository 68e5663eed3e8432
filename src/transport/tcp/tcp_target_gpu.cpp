// The target's GPU requests of one data connection: chunks through pinned
// staging slots, copies overlapping the wire (tcp_target_gpu.h).
#include "transport/tcp/tcp_target_gpu.h"

#include <sys/uio.h>

#include <algorithm>

namespace hawser::tcp {

Status GpuPipe::intake(const WireHeader& h, const RunEntry* runs, size_t n, int device, gpu::PinnedBuffers* pool,
                       std::vector<MemoryRegistry::Pin>& pins) {
  gpu::CopyStream* cs = nullptr;
  Status s = streamFor(device, cs);
  if (!s.ok()) return fail(s);
  const bool is_read = isReadRequest(h.type);
  WireHeader r{};
  r.id = h.id;
  r.type = responseTo(h.type);
  r.size = h.size;
  r.length = is_read ? h.size : 0;
  const uint64_t chunk = pool->slotSize();
  size_t at = 0;         // the run the next chunk starts in
  uint64_t at_off = 0;   // and where in it
  for (uint64_t off = 0; off < h.size;) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(chunk, h.size - off));
    long slot = -1;
    s = acquire(pool, slot);
    if (!s.ok()) return fail(s);
    Entry e;
    e.stream = cs;
    e.pool = pool;
    e.slot = slot;
    e.data = pool->slot(static_cast<size_t>(slot));
    e.len = len;
    e.is_read = is_read;
    e.first = off == 0;
    e.last = off + len == h.size;
    e.runs = static_cast<uint32_t>(n);
    e.resp = r;
    // The chunk's pieces: where each lies on the GPU and in the slot.
    pieces_.clear();
    for (uint32_t filled = 0; filled < len;) {
      const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(runs[at].len - at_off, len - filled));
      const uint64_t dev = runs[at].addr + at_off, host = reinterpret_cast<uint64_t>(e.data) + filled;
      pieces_.push_back(is_read ? gpu::CopyRun{host, dev, take} : gpu::CopyRun{dev, host, take});
      filled += take;
      at_off += take;
      if (at_off == runs[at].len) {
        ++at;
        at_off = 0;
      }
    }
    if (!is_read) s = ch_.recvPayload(e.data, len);
    if (s.ok())
      s = pieces_.size() == 1 ? cs->copy(reinterpret_cast<void*>(pieces_[0].dst),
                                         reinterpret_cast<const void*>(pieces_[0].src), pieces_[0].len, e.ticket)
                              : cs->copyRuns(pieces_, e.ticket);
    if (!s.ok()) {
      release(e);
      return fail(s);
    }
    if (e.last) e.pins = std::move(pins);
    q_.push_back(std::move(e));
    off += len;
  }
  pins.clear();
  return Status::OK();
}

Status GpuPipe::progress() {
  while (!q_.empty()) {
    bool done = false;
    Status s = q_.front().stream->poll(q_.front().ticket, done);
    if (!s.ok()) return s;
    if (!done) break;
    s = completeFront(false);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status GpuPipe::completeFront(bool wait) {
  Entry& e = q_.front();
  Status s = wait ? e.stream->wait(e.ticket) : Status::OK();
  if (!s.ok()) return s;  // abort() cleans up
  if (e.is_read) {
    iovec iov[2];
    int n = 0;
    if (e.first) iov[n++] = {&e.resp, sizeof(e.resp)};
    iov[n++] = {e.data, e.len};
    st_.gpu_from_device.fetch_add(e.len, std::memory_order_relaxed);
    if (e.last) {
      st_.served.requests[0]->add(e.runs);
      st_.served.bytes[0]->add(e.resp.size);
    }
    s = ch_.sendExact(iov, n);
    release(e);
  } else {
    release(e);
    st_.gpu_to_device.fetch_add(e.len, std::memory_order_relaxed);
    if (e.last) {
      st_.served.requests[1]->add(e.runs);
      st_.served.bytes[1]->add(e.resp.size);
      iovec iov{&e.resp, sizeof(e.resp)};
      s = ch_.sendExact(&iov, 1);
    }
  }
  q_.pop_front();  // the pins (last chunk) go here
  return s;
}

Status GpuPipe::drain() {
  while (!q_.empty()) {
    Status s = completeFront();
    if (!s.ok()) return s;
  }
  return Status::OK();
}

void GpuPipe::abort() {
  streams_.clear();  // each stream synchronizes as it goes
  for (Entry& e : q_) release(e);
  q_.clear();
}

void GpuPipe::release(Entry& e) {
  if (e.slot < 0) return;
  e.pool->release(static_cast<size_t>(e.slot));
  e.slot = -1;
  st_.staging_in_use.fetch_sub(1, std::memory_order_relaxed);
}

Status GpuPipe::acquire(gpu::PinnedBuffers* pool, long& slot) {
  bool waited = false;
  while (true) {
    slot = pool->tryAcquire();
    if (slot < 0) {
      if (!waited) st_.staging_waits.fetch_add(1, std::memory_order_relaxed);
      waited = true;
      if (!q_.empty()) {  // our own oldest chunk frees one
        Status s = completeFront();
        if (!s.ok()) return s;
        continue;
      }
      slot = pool->acquire(100);  // other connections hold them all
    }
    if (slot >= 0) {
      st_.staging_in_use.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    }
    if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
  }
}

Status GpuPipe::streamFor(int device, gpu::CopyStream*& out) {
  for (auto& [d, s] : streams_)
    if (d == device) {
      out = s.get();
      return Status::OK();
    }
  std::unique_ptr<gpu::CopyStream> s;
  Status st = gpu::CopyStream::open(device, s, st_.copy);
  if (!st.ok()) return st;
  out = s.get();
  streams_.emplace_back(device, std::move(s));
  return Status::OK();
}

}  // namespace hawser::tcp
