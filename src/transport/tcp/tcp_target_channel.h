// The target's side of one data connection (internal to the tcp transport;
// docs/tcp.md "Data path and threading"): blocking I/O on a socket whose
// SO_RCVTIMEO / SO_SNDTIMEO is a short poll interval. Waits are bounded by
// "no progress for timeout_ms", except the wait for the first byte of a
// request (an idle connection), which is unbounded until the transport
// stops.
//
// Receiving: request headers are read ahead into a buffer together with
// whatever follows (more headers, the payload of small writes), so a burst
// of small requests costs one recv; after a large write only the next
// header is read, so large payloads go straight to memory. Sending: OK
// responses queue and leave together in one sendmsg when the connection
// would otherwise wait for its next request (or the queue is full); every
// other send goes after what is queued.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

class TargetChannel {
 public:
  static constexpr size_t kReadAhead = 64 * 1024;
  static constexpr uint32_t kSmallWrite = 16 * 1024;  // larger write payloads are not read ahead of
  static constexpr int kMaxQueued = 32;                // responses sent together
  static constexpr size_t kMaxQueuedBytes = 256 * 1024;

  TargetChannel(TargetState& st, int fd, std::chrono::milliseconds tick);

  // The next request's header. `idle_ok`: waiting for its first byte is not
  // a stall. (Inline, with recvExact, below: the per-request path.)
  Status recvHeader(WireHeader& h, bool idle_ok);

  // A whole header is already here: serving it needs no wait.
  bool headerBuffered() const { return in_end_ - in_begin_ >= sizeof(WireHeader); }

  Status recvExact(void* buf, size_t len, bool idle_ok);

  // A write's payload, received into registered memory (or a staging slot
  // bound for it) only while the initiator still holds the connection. An
  // initiator closes a connection with requests outstanding only when it
  // gave up on them (its timeout, its shutdown) and reported them FAILED;
  // bytes of such a request still buffered here (this process was stopped,
  // or busy, while they arrived; read ahead with an earlier header, too)
  // must not land: the initiator may already have written that range again.
  // Before bytes land a poll sees the close (POLLRDHUP: the FIN queued
  // behind the data; POLLHUP / POLLERR: a reset); each recv takes only what
  // is already there. `then_header`: the payload ends its message, so the
  // receive that completes it also takes the next request's header (never
  // more: a large write's payload goes only to its destination), saving a
  // recv per write and letting the answer wait for the next one (and the
  // registration that follows it, when this request carried one).
  Status recvPayload(void* buf, size_t len, bool then_header = false) {
    iovec one{buf, len};
    return recvPayload(&one, 1, then_header);
  }

  // The same into `cnt` pieces in turn (a frame's runs: many per recvmsg);
  // consumes `pieces` (advanced as bytes land).
  Status recvPayload(iovec* pieces, size_t cnt, bool then_header = false);

  // Queues an OK response: its header, then the bytes of `n` runs (a
  // read's data, kept pinned by `pins` until sent; `pins` is emptied).
  Status queue(const WireHeader& r, const RunEntry* runs, size_t n, std::vector<MemoryRegistry::Pin>& pins);

  // Sends what is queued.
  Status flush();

  // Sends after what is queued.
  Status sendExact(iovec* iov, int cnt) {
    Status s = flush();
    return s.ok() ? sendAll(iov, cnt) : s;
  }

  // Receives and drops `len` bytes (a refused write's payload).
  Status drain(size_t len);

  // Bytes (or EOF) are waiting: reading now will not block.
  bool readable() const;

  // Sends an error response `r` (its status and reason from `why`).
  Status sendError(WireHeader& r, const Status& why);

 private:
  // Receives into [p, p+max) until at least `min` bytes came (`got` says how
  // many did, also on failure).
  Status recvAtLeast(char* p, size_t min, size_t max, bool idle_ok, size_t& got);

  Status sendAll(iovec* iov, int cnt);

  TargetState& st_;
  int fd_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds tick_;  // poll interval: notices stop() and stalls
  std::unique_ptr<char[]> in_;
  size_t in_begin_ = 0, in_end_ = 0;  // unread bytes of in_
  bool ahead_ = true;                 // read ahead with the next header
  size_t next_ = sizeof(WireHeader);  // bytes of the next request's header (and binding), when not reading ahead
  WireHeader hdrs_[kMaxQueued];
  std::vector<iovec> iov_;  // headers and the runs of the data they answer with
  size_t nq_ = 0, niov_ = 0;
  size_t queued_bytes_ = 0;
  std::vector<MemoryRegistry::Pin> pins_;
};

inline Status TargetChannel::recvHeader(WireHeader& h, bool idle_ok) {
  size_t have = in_end_ - in_begin_;
  if (have < sizeof(h)) {
    if (in_begin_ > 0) {
      std::memmove(in_.get(), in_.get() + in_begin_, have);
      in_begin_ = 0;
      in_end_ = have;
    }
    const size_t need = sizeof(h) - have;
    size_t got = 0;
    Status s = recvAtLeast(in_.get() + in_end_, need, ahead_ ? kReadAhead - in_end_ : next_ - have,
                           idle_ok && have == 0, got);
    in_end_ += got;
    if (!s.ok()) return s;
  }
  std::memcpy(&h, in_.get() + in_begin_, sizeof(h));
  in_begin_ += sizeof(h);
  ahead_ = !((h.type == kWriteReq || h.type == kWriteRunsReq) && h.size > kSmallWrite);
  // An initiator binds all its requests or none: the next one likely has
  // the same header (and binding) as this one.
  next_ = sizeof(h) + bindingBytes(h);
  return Status::OK();
}

inline Status TargetChannel::recvExact(void* buf, size_t len, bool idle_ok) {
  char* p = static_cast<char*>(buf);
  const size_t t = std::min(len, in_end_ - in_begin_);
  std::memcpy(p, in_.get() + in_begin_, t);
  in_begin_ += t;
  if (t == len) return Status::OK();
  size_t got = 0;
  return recvAtLeast(p + t, len - t, len - t, idle_ok && t == 0, got);
}

}  // namespace hawser::tcp
