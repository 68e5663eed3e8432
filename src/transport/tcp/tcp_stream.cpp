// Initiator side of the tcp transport, one data connection's byte stream:
// requests go out gathered, many per sendmsg (headers, run tables, and write
// payload straight from the user's buffers); responses come in with read
// payload received straight into its destinations (a frame's runs: many
// iovecs per recvmsg; small reads: with their headers into the connection's
// buffer, then copied), and each finished slice is completed here. The io
// thread's loop (tcp_io.cpp) calls these.
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "base/segment_desc.h"
#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

namespace {
constexpr size_t kMaxSendBytes = 16u << 20;  // per sendmsg
constexpr size_t kMaxControlAhead = 64;  // responses read ahead in one recv

// The iovecs of one request on the wire from byte `off` on, appended to
// iov[cnt..kMaxIov): header (and binding), run table (a frame), write payload (a frame in
// host memory: run by run). False when they did not all fit.
bool appendRequest(Slice* s, size_t off, iovec* iov, int& cnt, size_t& bytes) {
  size_t pos = 0;
  auto piece = [&](void* p, size_t n) {
    if (off >= pos + n) {
      pos += n;
      return true;
    }
    if (cnt == kMaxIov) return false;
    const size_t skip = off > pos ? off - pos : 0;
    iov[cnt++] = {static_cast<char*>(p) + skip, n - skip};
    bytes += n - skip;
    pos += n;
    return true;
  };
  if (!piece(&s->hdr, kHeaderSize + bindingBytes(s->hdr))) return false;
  if (s->frame() && !piece(s->table, runTableBytes(s->live))) return false;
  if (s->is_read) return true;
  if (!s->frame() || s->packed()) return piece(s->buf, s->flen);
  for (uint32_t j = 0; j < s->runs; ++j)
    if (s[j].state.load(std::memory_order_relaxed) == kSliceCommitted && !piece(s[j].buf, s[j].len)) return false;
  return true;
}

// " of registration G [base, +len)" for a request bound to a registration
// of the target (the remote buffer its task was made for), else "".
std::string boundTo(const Slice* s) {
  if (s->hdr.seq == 0) return {};
  const Task* t = s->task;
  const BufferDesc& b = t->segment().buffers[static_cast<size_t>(t->remoteBuffer())];
  return fmt::format(" of registration {} [{:#x}, +{})", s->hdr.seq, b.addr, b.length);
}

// The first run of the frame `lead` carries from `r` on that is on the
// wire, or null.
Slice* runFrom(Slice* lead, Slice* r) {
  for (Slice* e = lead + lead->runs; r < e; ++r)
    if (r->state.load(std::memory_order_relaxed) == kSliceCommitted) return r;
  return nullptr;
}
}  // namespace

// ---- a request's life ------------------------------------------------------------

bool IoThread::commitFrame(Slice* s) {
  if (!s->frame()) {
    uint8_t expect = kSliceQueued;
    if (s->state.compare_exchange_strong(expect, kSliceCommitted, std::memory_order_acq_rel)) return true;
    releaseStaging(s);
    dropCanceled(s);
    return false;
  }
  uint32_t live = 0;
  for (uint32_t j = 0; j < s->runs; ++j) {
    uint8_t expect = kSliceQueued;
    live += s[j].state.compare_exchange_strong(expect, kSliceCommitted, std::memory_order_acq_rel);
  }
  if (live == 0) {
    dropFrame(s);
    return false;
  }
  // The runs that stay keep the frame (and its sub-batch) alive meanwhile.
  uint64_t off = 0;
  uint32_t k = 0;
  for (uint32_t j = 0; j < s->runs; ++j) {
    Slice& r = s[j];
    const uint8_t st = r.state.load(std::memory_order_relaxed);
    if (st == kSliceCanceled) dropCanceled(&r);
    if (st != kSliceCommitted) continue;
    s->table[k++] = RunEntry{r.hdr.addr, r.len, 0};
    if (s->packed()) r.buf = s->buf + off;  // the run's place in the staging slot
    off += r.len;
  }
  s->live = static_cast<uint16_t>(live);
  s->flen = static_cast<uint32_t>(off);
  s->hdr.type = s->is_read ? kReadRunsReq : kWriteRunsReq;
  s->hdr.addr = live;
  s->hdr.size = s->flen;
  s->hdr.length = static_cast<uint32_t>(bindingBytes(s->hdr) + runTableBytes(live) + (s->is_read ? 0 : off));
  return true;
}

void IoThread::endFrame(Slice* s, bool ok, const Status& why) {
  releaseStaging(s);
  forEachRun(s, [&](Slice* r) { finishSlice(r, ok, why); });
}

void IoThread::finishSlice(Slice* s, bool ok, const Status& why) {
  Task* task = s->task;
  uint64_t len = s->len;
  SubBatchImpl* sb = s->sb;
  s->conn->load.fetch_sub(len, std::memory_order_relaxed);
  // Last touch of the slice and its sub-batch: after this, freeSubBatch may run.
  sb->outstanding.fetch_sub(1, std::memory_order_acq_rel);
  if (ok) {
    counters_->slices_completed.fetch_add(1, std::memory_order_relaxed);
    task->completeSlice(TransferState::kCompleted, len);
  } else {
    counters_->slices_failed.fetch_add(1, std::memory_order_relaxed);
    task->completeSlice(TransferState::kFailed, 0, why);
  }
}

// ---- send ------------------------------------------------------------------------

Slice* IoThread::commitNext(Conn* c) {
  if (c->inflight.n >= settings_.inflight) return nullptr;
  while (Slice* s = c->unsent.pop()) {
    if (!s->staged && !commitFrame(s)) continue;
    if (s->frame()) {
      counters_->run_frames.fetch_add(1, std::memory_order_relaxed);
      counters_->framed_runs.fetch_add(s->live, std::memory_order_relaxed);
    }
    s->hdr.id = ++c->seq;
    if (c->inflight.empty()) ++c->progress;  // its wait is timed from here
    c->inflight.push(s);
    if (!c->tx) {
      c->tx = s;
      c->tx_off = 0;
    }
    return s;
  }
  return nullptr;
}

void IoThread::advanceTx(Conn* c, size_t n) {
  while (n > 0 && c->tx) {
    Slice* s = c->tx;
    size_t rem = wireBytes(s) - c->tx_off;
    if (n >= rem) {
      n -= rem;
      c->tx = s->next;
      c->tx_off = 0;
    } else {
      c->tx_off += n;
      n = 0;
    }
  }
}

void IoThread::doSend(Conn* c) {
  while (c->state == ConnState::kConnected && c->writable) {
    iovec iov[kMaxIov];
    int cnt = 0;
    size_t bytes = 0;
    Slice* s = c->tx;
    size_t off = c->tx_off;
    while (cnt < kMaxIov && bytes < kMaxSendBytes) {
      if (!s) {
        s = commitNext(c);
        if (!s) break;
      }
      if (!appendRequest(s, off, iov, cnt, bytes)) break;  // the rest goes with the next sendmsg
      s = s->next;
      off = 0;
    }
    if (cnt == 0) return;
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(cnt);
    ssize_t n = ::sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) {
        c->writable = false;
        return;
      }
      failConn(c, Status(Code::kUnavailable, fmt::format("tcp: send to {}: {}", c->peer->name, std::strerror(e))));
      return;
    }
    ++c->progress;
    advanceTx(c, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < bytes) {
      c->writable = false;  // the socket is full; EPOLLOUT (edge) resumes us
      return;
    }
  }
}

// ---- receive -----------------------------------------------------------------------

// Bytes of the responses from the one to `s` on that may be received into
// rxbuf: every header, and the payload of small reads, up to and including
// the header of the first larger read (its payload goes to its buffer). When
// no larger read is awaited, whatever fits: nothing else can arrive, and
// asking for more than comes tells that the socket is drained without
// another recvmsg.
size_t IoThread::bufferedBytesFrom(const Slice* s) const {
  size_t total = 0;
  for (size_t k = 0; k < kMaxControlAhead; s = s->next, ++k) {
    if (!s) return Conn::kRxBuf;
    total += kHeaderSize;
    if (s->is_read) {
      if (s->flen > Conn::kSmallRead) return total;
      total += s->flen;
    }
  }
  return total;
}

void IoThread::completeFront(Conn* c, bool ok, const Status& why) { endFrame(c->inflight.pop(), ok, why); }

size_t IoThread::tookPayload(Conn* c, size_t k) {
  size_t took = 0;
  while (k > 0) {
    const size_t p = std::min(k, c->rx_left);
    c->rx_dst += p;
    c->rx_left -= p;
    took += p;
    k -= p;
    if (c->rx_left > 0) break;
    // This piece is in; a frame's next run, or the end of the payload.
    if (Slice* r = c->rx_run ? runFrom(c->inflight.head, c->rx_run + 1) : nullptr) {
      c->rx_run = r;
      c->rx_dst = r->buf;
      c->rx_left = r->len;
      continue;
    }
    c->rx_run = nullptr;
    finishPayload(c);
    break;
  }
  return took;
}

bool IoThread::parse(Conn* c) {
  while (true) {
    size_t have = c->rx_end - c->rx_begin;
    if (c->rx_mode == RxMode::kReason) {
      size_t t = std::min(have, c->rx_left);
      c->reason.append(c->rxbuf + c->rx_begin, t);
      c->rx_begin += static_cast<uint32_t>(t);
      c->rx_left -= t;
      if (c->rx_left > 0) break;
      Slice* f = c->inflight.head;
      Code code = static_cast<Code>(c->err_code);
      // A frame is refused whole: each of its runs fails with the reason
      // (which names the first run at fault).
      Status why = f->frame()
                       ? Status(code, fmt::format("tcp: {} refused a {} frame of {} runs ({} bytes){} holding this "
                                                  "run: {}",
                                                  c->peer->name, f->is_read ? "read" : "write", f->live, f->flen,
                                                  boundTo(f), c->reason))
                       : Status(code, fmt::format("tcp: {} refused {} [{:#x}, +{}){}: {}", c->peer->name,
                                                  f->is_read ? "read" : "write", f->hdr.addr, f->len, boundTo(f),
                                                  c->reason));
      completeFront(c, false, why);
      c->rx_mode = RxMode::kHeader;
      continue;
    }
    if (c->rx_mode == RxMode::kPayload) {
      // Small reads' payload (read ahead with their headers) lands here,
      // and only a misbehaving peer's otherwise; delivered in order.
      if (have == 0) break;
      while (c->rx_mode == RxMode::kPayload && c->rx_begin < c->rx_end) {
        const size_t t = std::min<size_t>(c->rx_end - c->rx_begin, c->rx_left);
        std::memcpy(c->rx_dst, c->rxbuf + c->rx_begin, t);
        c->rx_begin += static_cast<uint32_t>(t);
        tookPayload(c, t);
      }
      continue;
    }
    if (have < kHeaderSize) break;
    WireHeader h;
    std::memcpy(&h, c->rxbuf + c->rx_begin, kHeaderSize);
    c->rx_begin += kHeaderSize;
    Slice* f = c->inflight.head;
    Awaited want;
    if (f && f != c->tx) want = Awaited{true, f->hdr.id, f->is_read, f->flen, f->frame()};
    if (Status bad = checkResponse(h, want); !bad.ok()) {
      failConn(c, Status(Code::kRemoteError,
                         fmt::format("tcp: malformed response from {}: {}", c->peer->name, bad.message())));
      return false;
    }
    if (h.status != 0) {
      c->rx_mode = RxMode::kReason;
      c->err_code = h.status;
      c->rx_left = h.length;
      c->reason.clear();
    } else if (f->is_read) {
      c->rx_mode = RxMode::kPayload;
      // A frame in host memory: run by run, from its first run on the wire.
      c->rx_run = f->frame() && !f->packed() ? runFrom(f, f) : nullptr;
      c->rx_dst = c->rx_run ? c->rx_run->buf : f->buf;
      c->rx_left = c->rx_run ? c->rx_run->len : f->flen;
    } else {
      completeFront(c, true, Status::OK());
    }
  }
  if (c->rx_begin == c->rx_end) c->rx_begin = c->rx_end = 0;
  return true;
}

void IoThread::doRecv(Conn* c) {
  while (c->state == ConnState::kConnected) {
    if (!parse(c)) return;
    // What may be read now without putting read payload anywhere but its
    // destination: the rest of the current payload, then control bytes.
    iovec iov[kMaxIov];
    int cnt = 0;
    size_t want = 0;
    size_t ctl = 0;
    Slice* f = c->inflight.head;
    const size_t have = c->rx_end - c->rx_begin;
    if (c->rx_mode == RxMode::kPayload) {
      iov[cnt++] = {c->rx_dst, c->rx_left};
      want = c->rx_left;
      // A frame's later runs too: as many as fit, one recvmsg for them all.
      bool whole = true;  // every byte of the payload still to come has an iovec
      for (Slice* r = c->rx_run; r && (r = runFrom(f, r + 1));) {
        if (cnt == kMaxIov - 1) {
          whole = false;
          break;
        }
        iov[cnt++] = {r->buf, r->len};
        want += r->len;
      }
      // What follows the payload may be read with it only when all of it is.
      ctl = whole ? bufferedBytesFrom(f->next) : 0;
    } else if (c->rx_mode == RxMode::kReason) {
      ctl = c->rx_left + bufferedBytesFrom(f->next);
    } else {
      // Unanswered requests: their responses; none: an EOF (or a stray byte).
      ctl = f ? bufferedBytesFrom(f) : kHeaderSize;
    }
    ctl = ctl > have ? ctl - have : 0;
    if (c->rx_begin > 0) {
      std::memmove(c->rxbuf, c->rxbuf + c->rx_begin, c->rx_end - c->rx_begin);
      c->rx_end -= c->rx_begin;
      c->rx_begin = 0;
    }
    ctl = std::min(ctl, Conn::kRxBuf - c->rx_end);
    if (ctl > 0) {
      iov[cnt++] = {c->rxbuf + c->rx_end, ctl};
      want += ctl;
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(cnt);
    ssize_t n = ::recvmsg(c->fd, &m, MSG_DONTWAIT);
    if (n == 0) {
      failConn(c, Status(Code::kUnavailable, fmt::format("tcp: {} closed the connection", c->peer->name)));
      return;
    }
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      failConn(c, Status(Code::kUnavailable, fmt::format("tcp: recv from {}: {}", c->peer->name, std::strerror(e))));
      return;
    }
    ++c->progress;
    size_t k = static_cast<size_t>(n);
    if (c->rx_mode == RxMode::kPayload) k -= tookPayload(c, std::min(k, want - ctl));
    c->rx_end += static_cast<uint32_t>(k);
    if (static_cast<size_t>(n) < want) {
      // Drained for now (edge-triggered: new data raises a new event).
      parse(c);
      return;
    }
  }
}

}  // namespace hawser::tcp
