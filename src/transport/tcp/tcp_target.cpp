// Target side of the tcp transport: serves one data connection on the rpc
// listener thread that accepted it. Requests for host memory are served
// straight out of / into registered memory (no staging buffer; only the
// payload of small writes comes through the read-ahead buffer; a frame's
// runs move many per sendmsg / recvmsg); requests for GPU memory go through
// pinned staging slots, a few in flight at once so the copies of some
// overlap the wire of others (GpuPipe); anything outside the registered,
// remote-accessible regions is refused with an error response.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fmt/format.h>

#include "base/log.h"
#include "transport/tcp/tcp_internal.h"
#include "transport/tcp/tcp_testing.h"

namespace hawser::tcp {

namespace testing {
std::atomic<RequestHook> on_request{nullptr};
}

namespace {

std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return fmt::format("{}:{}", host, port);
}

// Blocking I/O on a socket whose SO_RCVTIMEO/SO_SNDTIMEO is a short poll
// interval: waits are bounded by "no progress for timeout_ms", except the wait
// for the first byte of a request (an idle connection), which is unbounded
// until the transport stops.
//
// Receiving: request headers are read ahead into a buffer together with
// whatever follows (more headers, the payload of small writes), so a burst
// of small requests costs one recv; after a large write only the next
// header is read, so large payloads go straight to memory. Sending: OK
// responses queue and leave together in one sendmsg when the connection
// would otherwise wait for its next request (or the queue is full); every
// other send goes after what is queued.
class Channel {
 public:
  static constexpr size_t kReadAhead = 64 * 1024;
  static constexpr uint32_t kSmallWrite = 16 * 1024;  // larger write payloads are not read ahead of
  static constexpr int kMaxQueued = 32;                // responses sent together
  static constexpr size_t kMaxQueuedBytes = 256 * 1024;

  Channel(TargetState& st, int fd, std::chrono::milliseconds tick)
      : st_(st),
        fd_(fd),
        timeout_(std::chrono::milliseconds(st.timeout_ms)),
        tick_(tick),
        in_(new char[kReadAhead]),
        iov_(2 * kMaxQueued + kMaxFrameRuns) {}

  // The next request's header. `idle_ok`: waiting for its first byte is not
  // a stall.
  Status recvHeader(WireHeader& h, bool idle_ok) {
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

  // A whole header is already here: serving it needs no wait.
  bool headerBuffered() const { return in_end_ - in_begin_ >= sizeof(WireHeader); }

  Status recvExact(void* buf, size_t len, bool idle_ok) {
    char* p = static_cast<char*>(buf);
    const size_t t = std::min(len, in_end_ - in_begin_);
    std::memcpy(p, in_.get() + in_begin_, t);
    in_begin_ += t;
    if (t == len) return Status::OK();
    size_t got = 0;
    return recvAtLeast(p + t, len - t, len - t, idle_ok && t == 0, got);
  }

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
  Status recvPayload(iovec* pieces, size_t cnt, bool then_header = false) {
    size_t len = 0;
    for (size_t i = 0; i < cnt; ++i) len += pieces[i].iov_len;
    size_t got = 0, at = 0;  // bytes landed; the first piece with bytes to come
    auto landed = [&](size_t k) {
      got += k;
      for (; at < cnt && (k > 0 || pieces[at].iov_len == 0); ++at) {
        const size_t t = std::min(k, pieces[at].iov_len);
        pieces[at].iov_base = static_cast<char*>(pieces[at].iov_base) + t;
        pieces[at].iov_len -= t;
        k -= t;
        if (pieces[at].iov_len > 0) break;
      }
    };
    auto last = Clock::now();
    bool first = true;
    while (got < len) {
      const size_t buffered = in_end_ - in_begin_;
      pollfd pfd{fd_, POLLIN | POLLRDHUP, 0};
      // Bytes already read ahead need only a look (timeout 0) before landing.
      int r = ::poll(&pfd, 1, buffered > 0 ? 0 : static_cast<int>(tick_.count()));
      if (r < 0) {
        if (errno == EINTR) continue;
        return {Code::kUnavailable, fmt::format("poll: {}", std::strerror(errno))};
      }
      if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        st_.abandoned_writes.fetch_add(1, std::memory_order_relaxed);
        return {Code::kUnavailable,
                fmt::format("the initiator closed the connection with {} of a {}-byte write still to come: the "
                            "write was abandoned and is not applied",
                            len - got, len)};
      }
      if (first && buffered > 0) {
        first = false;
        const size_t t = std::min(len - got, buffered);
        for (size_t done = 0, j = at; done < t; ++j) {
          const size_t c = std::min(t - done, pieces[j].iov_len);
          std::memcpy(pieces[j].iov_base, in_.get() + in_begin_ + done, c);
          done += c;
        }
        in_begin_ += t;
        landed(t);
        continue;
      }
      first = false;
      if (r > 0) {
        iovec iov[kMaxIov];
        const size_t k = std::min(cnt - at, static_cast<size_t>(kMaxIov - 1));
        std::copy(pieces + at, pieces + at + k, iov);
        size_t n_iov = k;
        if (then_header && at + k == cnt && in_begin_ == in_end_) {
          in_begin_ = in_end_ = 0;
          iov[n_iov++] = {in_.get(), next_};
        }
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = n_iov;
        ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT);
        if (n > 0) {
          const size_t got_now = static_cast<size_t>(n), payload = std::min(got_now, len - got);
          landed(payload);
          in_end_ += got_now - payload;
          last = Clock::now();
          continue;
        }
        if (n == 0) return {Code::kUnavailable, "peer closed the connection in the middle of a message"};
        int e = errno;
        if (e != EINTR && e != EAGAIN && e != EWOULDBLOCK)
          return {Code::kUnavailable, fmt::format("recv: {}", std::strerror(e))};
      }
      if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
      if (Clock::now() - last >= timeout_)
        return {Code::kTimeout,
                fmt::format("no bytes from the peer for {} ms (got {} of {})", st_.timeout_ms, got, len)};
    }
    return Status::OK();
  }

  // Queues an OK response: its header, then the bytes of `n` runs (a
  // read's data, kept pinned by `pins` until sent; `pins` is emptied).
  Status queue(const WireHeader& r, const RunEntry* runs, size_t n, std::vector<MemoryRegistry::Pin>& pins) {
    if (niov_ + 1 + n > iov_.size()) {
      Status s = flush();
      if (!s.ok()) return s;
    }
    hdrs_[nq_] = r;
    iov_[niov_++] = {&hdrs_[nq_++], sizeof(WireHeader)};
    for (size_t i = 0; i < n; ++i) iov_[niov_++] = {reinterpret_cast<void*>(runs[i].addr), runs[i].len};
    queued_bytes_ += sizeof(WireHeader) + r.length;
    for (auto& p : pins) pins_.push_back(std::move(p));
    pins.clear();
    if (nq_ == kMaxQueued || queued_bytes_ >= kMaxQueuedBytes) return flush();
    return Status::OK();
  }

  // Sends what is queued.
  Status flush() {
    if (niov_ == 0) return Status::OK();
    Status s = sendAll(iov_.data(), static_cast<int>(niov_));
    niov_ = nq_ = 0;
    queued_bytes_ = 0;
    pins_.clear();
    return s;
  }

  // Sends after what is queued.
  Status sendExact(iovec* iov, int cnt) {
    Status s = flush();
    return s.ok() ? sendAll(iov, cnt) : s;
  }

  Status drain(size_t len) {
    char buf[16384];
    while (len > 0) {
      size_t n = std::min(len, sizeof(buf));
      Status s = recvExact(buf, n, false);
      if (!s.ok()) return s;
      len -= n;
    }
    return Status::OK();
  }

  // Bytes (or EOF) are waiting: reading now will not block.
  bool readable() const {
    if (in_end_ > in_begin_) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  Status sendError(WireHeader& r, const Status& why) {
    std::string reason = why.message().substr(0, kMaxReason);
    r.status = static_cast<uint8_t>(why.code());
    r.length = static_cast<uint32_t>(reason.size());
    r.size = 0;
    iovec iov[2] = {{&r, sizeof(r)}, {reason.data(), reason.size()}};
    return sendExact(iov, reason.empty() ? 1 : 2);
  }

 private:
  // Receives into [p, p+max) until at least `min` bytes came (`got` says how
  // many did, also on failure).
  Status recvAtLeast(char* p, size_t min, size_t max, bool idle_ok, size_t& got) {
    got = 0;
    auto last = Clock::now();
    while (got < min) {
      ssize_t n = ::recv(fd_, p + got, max - got, max == min ? MSG_WAITALL : 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
        last = Clock::now();
        continue;
      }
      if (n == 0)
        return {Code::kUnavailable, got || !idle_ok ? "peer closed the connection in the middle of a message"
                                                   : "peer closed the connection"};
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) {
        if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
        auto now = Clock::now();
        if (got == 0 && idle_ok) {
          last = now;
          continue;
        }
        if (now - last >= timeout_)
          return {Code::kTimeout, fmt::format("no bytes from the peer for {} ms (got {} of {})", st_.timeout_ms, got,
                                              min)};
        continue;
      }
      return {Code::kUnavailable, fmt::format("recv: {}", std::strerror(e))};
    }
    return Status::OK();
  }

  Status sendAll(iovec* iov, int cnt) {
    auto last = Clock::now();
    while (cnt > 0) {
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<size_t>(std::min(cnt, kMaxIov));
      ssize_t n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
      if (n < 0) {
        int e = errno;
        if (e == EINTR) continue;
        if (e == EAGAIN || e == EWOULDBLOCK) {
          if (st_.stopping.load(std::memory_order_relaxed)) return {Code::kUnavailable, "transport shutting down"};
          if (Clock::now() - last >= timeout_)
            return {Code::kTimeout, fmt::format("peer has not read for {} ms", st_.timeout_ms)};
          continue;
        }
        return {Code::kUnavailable, fmt::format("send: {}", std::strerror(e))};
      }
      if (n > 0) last = Clock::now();
      net::advanceIov(iov, cnt, static_cast<size_t>(n));
    }
    return Status::OK();
  }

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

// The GPU requests of one connection in flight, oldest first, as chunks of
// at most one staging slot. A request's runs (one for READ_REQ/WRITE_REQ,
// its table's for a RUNS request) are cut into chunks as one stream of
// bytes, each chunk's pieces copied with one call (copyRuns for several). A
// write's chunk is received into its slot, then copied slot -> GPU; its
// response goes out once the last chunk's copy is done. A read's chunk is
// copied GPU -> slot, then sent (the response header with the first chunk).
// Responses leave in request order. The runs' pins ride with the request's
// last chunk, so unregistering waits for its copies.
//
// Deadlock-free slot use: a connection that holds slots never blocks for
// another one; it completes its own oldest chunk instead (which needs only
// its copy and the socket). Only a connection that holds none waits.
class GpuPipe {
 public:
  static constexpr size_t kMaxAhead = 64;  // chunks in flight per connection

  GpuPipe(TargetState& st, Channel& ch) : st_(st), ch_(ch) {}
  ~GpuPipe() { abort(); }

  bool empty() const { return q_.empty(); }
  bool full() const { return q_.size() >= kMaxAhead; }

  // Takes the request `h` for the `n` runs (checked and pinned: `pins`,
  // emptied here) in GPU memory of `device`: a write's payload is received
  // here, chunk by chunk.
  Status intake(const WireHeader& h, const RunEntry* runs, size_t n, int device, gpu::PinnedBuffers* pool,
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

  // Completes the oldest chunks whose copies are done; never waits for a copy.
  Status progress() {
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

  // Waits for the oldest chunk's copy, then sends it / its response.
  Status completeFront(bool wait = true) {
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

  // Completes everything in flight (before a request served outside the pipe).
  Status drain() {
    while (!q_.empty()) {
      Status s = completeFront();
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  // The connection ends: waits until no copy runs, then frees slots and pins.
  void abort() {
    streams_.clear();  // each stream synchronizes as it goes
    for (Entry& e : q_) release(e);
    q_.clear();
  }

 private:
  struct Entry {
    gpu::CopyStream* stream = nullptr;
    gpu::PinnedBuffers* pool = nullptr;
    uint64_t ticket = 0;
    long slot = -1;
    char* data = nullptr;
    uint32_t len = 0;
    uint32_t runs = 1;  // runs of its request
    bool is_read = false, first = false, last = false;
    WireHeader resp;
    std::vector<MemoryRegistry::Pin> pins;  // the request's (its last chunk)
  };

  Status fail(const Status& s) {
    abort();
    return s;
  }

  void release(Entry& e) {
    if (e.slot < 0) return;
    e.pool->release(static_cast<size_t>(e.slot));
    e.slot = -1;
    st_.staging_in_use.fetch_sub(1, std::memory_order_relaxed);
  }

  Status acquire(gpu::PinnedBuffers* pool, long& slot) {
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

  Status streamFor(int device, gpu::CopyStream*& out) {
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

  TargetState& st_;
  Channel& ch_;
  std::deque<Entry> q_;
  std::vector<std::pair<int, std::unique_ptr<gpu::CopyStream>>> streams_;
  std::vector<gpu::CopyRun> pieces_;  // scratch of intake
};

// Pins the `n` runs of the request `h` (a RUNS request's table, or its own
// range) and says where they lie: `device` -1 for host memory, else their
// GPU. `seq` (not 0): the registration the request is bound to; a run that
// lies in another one (its range was registered again) refuses the request.
// A run outside the registered, remote-accessible memory refuses the
// whole request (the reason names the first such run), and so do runs of one
// frame in host memory and GPU memory, or on two GPUs (an initiator never
// groups such runs: it groups by the remote buffer's location). A run inside
// the region pinned for an earlier run of the frame (the usual case: a KV
// cache is one region) needs no lookup or pin of its own.
Status pinRuns(TargetState& st, const WireHeader& h, uint64_t seq, const RunEntry* runs, size_t n,
               std::vector<MemoryRegistry::Pin>& pins, int& device) {
  pins.clear();
  device = -1;
  const bool frame = isRunsType(h.type);
  uint64_t lo = 1, hi = 0;  // the region pinned last (none yet)
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = runs[i].addr, len = runs[i].len;
    if (a >= lo && a <= hi && len <= hi - a) continue;  // pinned, checked and placed with that region
    MemoryRegistry::Pin pin;
    LocalRegion region;  // one lookup pins it and says where it lies
    Status ps = st.registry->pinRemote(a, len, pin, seq, &region);
    if (!ps.ok()) {
      pins.clear();
      if (!frame) return ps;
      return {ps.code(), fmt::format("run {} of {}: {}", i, n, ps.message())};
    }
    lo = region.addr;
    hi = region.addr + region.length;
    const int d = region.gpu;
    if (i == 0) {
      device = d;
    } else if (d != device) {
      pins.clear();
      auto kind = [](int g) { return g < 0 ? std::string("host memory") : fmt::format("GPU {} memory", g); };
      return {Code::kInvalidArgument,
              fmt::format("run {} of {} [{:#x}, +{}) is {} where run 0 is {}: the runs of one frame must all lie in "
                          "host memory or all on one GPU",
                          i, n, runs[i].addr, runs[i].len, kind(d), kind(device))};
    }
    pins.push_back(std::move(pin));
  }
  return Status::OK();
}

}  // namespace

Status TargetState::staging(gpu::PinnedBuffers*& out) {
  std::lock_guard lk(staging_mu_);
  if (!staging_) {
    Status s = gpu::PinnedBuffers::create(staging_count, slot_size, staging_);
    if (!s.ok()) return {s.code(), "tcp target: no pinned staging buffers for GPU memory: " + s.message()};
  }
  out = staging_.get();
  return Status::OK();
}

void TargetState::serve(net::Fd fd) {
  pthread_setname_np(pthread_self(), "tcp-serve");  // this rpc thread serves one data connection
  const int raw = fd.get();
  {
    std::lock_guard lk(mu_);
    if (stopping.load()) return;
    fds_.push_back(raw);
  }
  served.accepted->add();
  served.open->add(1);
  sizeBuffers(raw, sock_buf, loopback_send_buf);
  net::setNoDelay(raw);
  // An initiator that vanished in silence (a partition: its close never
  // arrives) leaves this connection idle, waiting for the next request:
  // keepalive ends it within a few timeouts, or at once when the network is
  // back and the initiator's host answers a probe with a reset.
  net::setKeepAlive(raw, std::chrono::milliseconds(timeout_ms));
  // Poll interval for the blocking calls: lets the thread notice stop() and
  // bound stalls mid-message by timeout_ms.
  const std::chrono::milliseconds tick(std::clamp<uint32_t>(timeout_ms / 4, 20, 500));
  net::setTimeouts(raw, tick);
  const std::string who = peerName(raw);
  HLOG_DEBUG("tcp target: serving data connection from {}", who);

  Channel ch(*this, raw, tick);
  GpuPipe pipe(*this, ch);
  // The request's runs: its own range, or a RUNS request's table.
  std::unique_ptr<RunEntry[]> runs(new RunEntry[kMaxFrameRuns]);
  std::vector<MemoryRegistry::Pin> pins;
  std::vector<iovec> pieces(kMaxFrameRuns);
  Status s;
  WireHeader h, r;
  while (true) {
    if (!pipe.empty()) {
      // GPU requests in flight: send what is done; take the next request
      // while one waits (its copies then overlap ours), else wait for the
      // oldest copy.
      s = pipe.progress();
      if (!s.ok()) break;
      if (!pipe.empty() && (pipe.full() || !ch.readable())) {
        s = pipe.completeFront();
        if (!s.ok()) break;
        continue;
      }
    }
    // About to wait for the next request: what is answered leaves first.
    if (!ch.headerBuffered() && !(s = ch.flush()).ok()) break;
    s = ch.recvHeader(h, pipe.empty());
    if (!s.ok()) break;
    Status v = checkRequest(h, max_frame);
    const bool frame = isRunsType(h.type);
    size_t n = 1;
    uint64_t seq = 0;  // the registration the request is bound to (version 2)
    if (v.ok() && bindingBytes(h) > 0) {
      s = ch.recvExact(&seq, sizeof(seq), false);
      if (!s.ok()) break;
    }
    if (v.ok() && frame) {
      n = h.addr;
      s = ch.recvExact(runs.get(), runTableBytes(n), false);
      if (!s.ok()) break;
      v = checkRunTable(h, runs.get());
    }
    if (!v.ok()) {
      served.refused_frames->add();
      HLOG_WARN("tcp target: closing data connection from {}: malformed frame: {}", who, v.message());
      s = v;
      break;
    }
    if (!frame) runs[0] = RunEntry{h.addr, h.size, 0};
    testing::call(runs[0].addr, h.size);
    int device = -1;
    Status ps = pinRuns(*this, h, seq, runs.get(), n, pins, device);
    auto countFrame = [&] {
      if (!frame) return;
      run_frames.fetch_add(1, std::memory_order_relaxed);
      framed_runs.fetch_add(n, std::memory_order_relaxed);
    };
    if (ps.ok() && device >= 0) {
      gpu::PinnedBuffers* pool = nullptr;
      ps = staging(pool);
      if (ps.ok()) {
        countFrame();
        s = pipe.intake(h, runs.get(), n, device, pool, pins);
        if (!s.ok()) break;
        continue;
      }
      pins.clear();
    }
    // Served outside the pipe: what is in it answers first.
    s = pipe.drain();
    if (!s.ok()) break;
    r = WireHeader{};
    r.id = h.id;
    r.type = responseTo(h.type);
    if (!ps.ok()) {
      served.refused->add();
      HLOG_DEBUG("tcp target: refused {} from {}: {}", typeName(h.type), who, ps.message());
    } else {
      countFrame();
    }
    if (!isReadRequest(h.type)) {
      if (ps.ok()) {
        for (size_t i = 0; i < n; ++i) pieces[i] = {reinterpret_cast<void*>(runs[i].addr), runs[i].len};
        s = ch.recvPayload(pieces.data(), n, /*then_header=*/true);
        pins.clear();
        if (!s.ok()) break;
        served.requests[1]->add(n);
        served.bytes[1]->add(h.size);
        r.size = h.size;
        s = ch.queue(r, nullptr, 0, pins);
      } else {
        s = ch.drain(h.size);
        if (!s.ok()) break;
        s = ch.sendError(r, ps);
      }
    } else {
      if (ps.ok()) {
        r.length = h.size;
        r.size = h.size;
        served.requests[0]->add(n);
        served.bytes[0]->add(h.size);
        s = ch.queue(r, runs.get(), n, pins);
      } else {
        s = ch.sendError(r, ps);
      }
    }
    if (!s.ok()) break;
  }
  pipe.abort();
  if (s.code() == Code::kTimeout) HLOG_WARN("tcp target: closing data connection from {}: {}", who, s.message());
  else HLOG_DEBUG("tcp target: data connection from {} ends: {}", who, s.toString());
  served.open->add(-1);
  std::lock_guard lk(mu_);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), raw), fds_.end());
  // fd closes here, after it left fds_ (stop() never shuts down a reused number).
}

void TargetState::stop() {
  std::lock_guard lk(mu_);
  stopping.store(true);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace hawser::tcp
