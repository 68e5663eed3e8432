// Initiator side of the tcp transport, one data connection's byte stream:
// requests go out gathered, many per sendmsg (headers, and write payload
// straight from the user's buffer); responses come in with read payload
// received straight into its destination (small reads: with their headers
// into the connection's buffer, then copied), and each finished slice is
// completed here. The io thread's loop (tcp_io.cpp) calls these.
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "transport/tcp/tcp_internal.h"

namespace hawser::tcp {

namespace {
constexpr int kMaxIov = 64;
constexpr size_t kMaxSendBytes = 16u << 20;  // per sendmsg
constexpr size_t kMaxControlAhead = 64;  // responses read ahead in one recv
}  // namespace

// ---- send ------------------------------------------------------------------------

Slice* IoThread::commitNext(Conn* c) {
  if (c->inflight.n >= settings_.inflight) return nullptr;
  while (Slice* s = c->unsent.pop()) {
    uint8_t expect = kSliceQueued;
    if (!s->staged && !s->state.compare_exchange_strong(expect, kSliceCommitted, std::memory_order_acq_rel)) {
      dropCanceled(s);
      continue;
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
    size_t total = kHeaderSize + (s->is_read ? 0 : s->len);
    size_t rem = total - c->tx_off;
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
    while (cnt + 2 <= kMaxIov && bytes < kMaxSendBytes) {
      if (!s) {
        s = commitNext(c);
        if (!s) break;
      }
      if (off < kHeaderSize) {
        iov[cnt++] = {reinterpret_cast<char*>(&s->hdr) + off, kHeaderSize - off};
        bytes += kHeaderSize - off;
      }
      if (!s->is_read) {
        size_t poff = off > kHeaderSize ? off - kHeaderSize : 0;
        iov[cnt++] = {s->buf + poff, s->len - poff};
        bytes += s->len - poff;
      }
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
      if (s->len > Conn::kSmallRead) return total;
      total += s->len;
    }
  }
  return total;
}

void IoThread::completeFront(Conn* c, bool ok, const Status& why) { finishSlice(c->inflight.pop(), ok, why); }

void IoThread::finishSlice(Slice* s, bool ok, const Status& why) {
  releaseStaging(s);
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
      completeFront(c, false,
                    Status(code, fmt::format("tcp: {} refused {} [{:#x}, +{}): {}", c->peer->name,
                                             f->is_read ? "read" : "write", f->hdr.addr, f->len, c->reason)));
      c->rx_mode = RxMode::kHeader;
      continue;
    }
    if (c->rx_mode == RxMode::kPayload) {
      // Only a misbehaving peer makes payload land here (we never read past
      // the headers we expect); still deliver it in order.
      if (have == 0) break;
      size_t t = std::min(have, c->rx_left);
      std::memcpy(c->rx_dst, c->rxbuf + c->rx_begin, t);
      c->rx_begin += static_cast<uint32_t>(t);
      c->rx_dst += t;
      c->rx_left -= t;
      if (c->rx_left == 0) finishPayload(c);
      continue;
    }
    if (have < kHeaderSize) break;
    WireHeader h;
    std::memcpy(&h, c->rxbuf + c->rx_begin, kHeaderSize);
    c->rx_begin += kHeaderSize;
    Slice* f = c->inflight.head;
    Awaited want;
    if (f && f != c->tx) want = Awaited{true, f->hdr.id, f->is_read, f->len};
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
      c->rx_dst = f->buf;
      c->rx_left = f->len;
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
    iovec iov[2];
    int cnt = 0;
    size_t want = 0;
    size_t ctl = 0;
    Slice* f = c->inflight.head;
    const size_t have = c->rx_end - c->rx_begin;
    if (c->rx_mode == RxMode::kPayload) {
      iov[cnt++] = {c->rx_dst, c->rx_left};
      want = c->rx_left;
      ctl = bufferedBytesFrom(f->next);
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
    if (c->rx_mode == RxMode::kPayload) {
      size_t p = std::min(k, c->rx_left);
      c->rx_dst += p;
      c->rx_left -= p;
      k -= p;
      if (c->rx_left == 0) finishPayload(c);
    }
    c->rx_end += static_cast<uint32_t>(k);
    if (static_cast<size_t>(n) < want) {
      // Drained for now (edge-triggered: new data raises a new event).
      parse(c);
      return;
    }
  }
}

}  // namespace hawser::tcp
