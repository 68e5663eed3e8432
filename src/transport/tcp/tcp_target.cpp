// Target side of the tcp transport: the serving loop of one data connection
// on the rpc listener thread that accepted it. Requests for host memory are
// served straight out of / into registered memory (no staging buffer; only
// the payload of small writes comes through the read-ahead buffer; a
// frame's runs move many per sendmsg / recvmsg); requests for GPU memory go
// through pinned staging slots, a few in flight at once so the copies of
// some overlap the wire of others (GpuPipe, tcp_target_gpu.h); anything
// outside the registered, remote-accessible regions is refused with an
// error response. The connection's I/O: TargetChannel (tcp_target_channel.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <fmt/format.h>

#include "base/log.h"
#include "transport/tcp/tcp_internal.h"
#include "transport/tcp/tcp_target_channel.h"
#include "transport/tcp/tcp_target_gpu.h"
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

  TargetChannel ch(*this, raw, tick);
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
