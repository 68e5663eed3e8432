// What the tcp transport's integration tests share: a target assembled from
// parts (rpc listener + registry + TcpTransport, publishing a descriptor of
// the test's choosing and exposing its counters), an initiator engine that
// uses only tcp, and a raw data-connection client that speaks the wire
// format by hand.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/config.h"
#include "base/registry.h"
#include "common/util.h"
#include "hawser/engine.h"
#include "metadata/descriptor.h"
#include "metadata/p2p_store.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace hawser::tcp_parts {

using Settings = std::map<std::string, std::string>;
using tcp::WireHeader;
using test::counter;
using test::eventually;

inline uint64_t addrOf(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Target assembled from parts. `mem` is remote-accessible; `priv` is
// registered but not remote-accessible; `extra` buffers are published in the
// descriptor without being registered (a stale descriptor).
struct PartsTarget {
  explicit PartsTarget(size_t bytes, const Settings& settings = {}) : mem(bytes), priv(1 << 16) {
    for (auto& [k, v] : settings) cfg.set(k, v);
    Region r;
    r.addr = addrOf(mem.p);
    r.length = mem.n;
    r.location = "cpu:0";
    status = reg.insert(r);
    Region p;
    p.addr = addrOf(priv.p);
    p.length = priv.n;
    p.location = "cpu:0";
    p.remote_accessible = false;
    if (status.ok()) status = reg.insert(p);
    (void)srv.onCall(kGetSegmentCall, [this](const std::string&, std::string& reply) {
      reply = encodeSegmentText(desc());
      return Status::OK();
    });
    if (status.ok()) status = srv.start("127.0.0.1", 0);
    TransportContext ctx;
    ctx.config = &cfg;
    ctx.registry = &reg;
    ctx.rpc = &srv;
    ctx.server_name = "parts";
    ctx.host = "127.0.0.1";
    ctx.rpc_port = srv.port();
    if (status.ok()) status = tcp.install(ctx);
  }
  ~PartsTarget() {
    srv.stop();
    tcp.shutdown();
  }

  SegmentDesc desc() const {
    SegmentDesc d;
    d.kind = SegmentDesc::Kind::kMemory;
    d.name = name();
    d.host = "127.0.0.1";
    d.rpc_port = srv.port();
    d.server_name = "parts";
    nlohmann::json a;
    tcp.describe(a);
    if (!publish_runs) a.erase("max_runs");  // as a peer of an older release
    if (const int v = publish_version.load()) a["version"] = v;
    d.transports["tcp"] = a;
    std::vector<BufferDesc> bufs;
    BufferDesc b;
    b.addr = addrOf(mem.p);
    b.length = mem.n;
    if (auto r = reg.find(b.addr); r && publish_seq) b.seq = r->seq;  // which registration of it
    bufs.push_back(b);
    for (auto [addr, len] : extra) {
      BufferDesc e;
      e.addr = addr;
      e.length = len;
      bufs.push_back(e);
    }
    std::sort(bufs.begin(), bufs.end(), [](auto& x, auto& y) { return x.addr < y.addr; });
    d.buffers = bufs;
    return d;
  }
  std::string name() const { return "127.0.0.1:" + std::to_string(srv.port()); }
  uint64_t remote(size_t off = 0) const { return addrOf(mem.p) + off; }

  Config cfg;
  MemoryRegistry reg;
  rpc::Server srv;
  TcpTransport tcp;
  test::Buffer mem, priv;
  std::vector<std::pair<uint64_t, uint64_t>> extra;
  bool publish_runs = true;  // false: the descriptor says nothing of frames of many runs
  std::atomic<int> publish_version{0};  // the tcp "version" published (0: what the transport describes)
  bool publish_seq = false;  // `mem`'s registration number in the descriptor (requests bound to it)
  Status status;
};

// An initiator engine that uses only tcp, with `settings` applied.
struct Initiator {
  explicit Initiator(size_t bytes, const Settings& settings = {}) : mem(bytes) {
    EngineOptions o;
    o.config = settings;
    o.config["transport"] = "tcp";
    status = engine.init("p2p", "initiator", "127.0.0.1", 0, o);
    if (status.ok()) status = engine.registerLocalMemory(mem.p, mem.n, "cpu:0", false);
  }
  Status open(const std::string& name) { return engine.openSegment(name, seg); }
  std::vector<TransferStatus> run(const std::vector<TransferRequest>& reqs, int timeout_ms = 30000) {
    return test::runBatch(engine, seg, reqs, timeout_ms);
  }
  TransferEngine engine;
  test::Buffer mem;
  SegmentID seg = kInvalidSegment;
  Status status;
};

// A raw kConnTcpData client.
struct RawClient {
  explicit RawClient(uint16_t port) {
    status = rpc::openStream("127.0.0.1", port, kTcpDataChannel.id, std::chrono::seconds(5), fd);
    if (status.ok()) net::setTimeouts(fd.get(), std::chrono::seconds(20));
  }
  Status send(const WireHeader& h, const void* payload = nullptr, size_t len = 0) {
    iovec iov[2] = {{const_cast<WireHeader*>(&h), sizeof(h)}, {const_cast<void*>(payload), len}};
    return net::sendAllv(fd.get(), iov, len ? 2 : 1);
  }
  Status recvHeader(WireHeader& h) { return net::recvAll(fd.get(), &h, sizeof(h)); }
  std::string recvText(size_t n) {
    std::string s(n, '\0');
    if (n && !net::recvAll(fd.get(), s.data(), n).ok()) return "<recv failed>";
    return s;
  }
  // True when the peer closed the connection (EOF or reset), not a timeout.
  bool closedByPeer() {
    char b;
    ssize_t n;
    do {
      n = ::recv(fd.get(), &b, 1, 0);
    } while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  net::Fd fd;
  Status status;
};

inline WireHeader request(uint8_t type, uint64_t addr, uint32_t size, uint64_t id) {
  WireHeader h;
  h.type = type;
  h.addr = addr;
  h.size = size;
  h.length = type == tcp::kWriteReq ? size : 0;
  h.id = id;
  return h;
}


// A listener that hands out a descriptor (one buffer at 0x10000000; its tcp
// attributes say `max_runs`, none when 0) and accepts data connections but
// never answers on them.
struct SilentPeer {
  explicit SilentPeer(int max_runs = 0) {
    (void)srv.onCall(kGetSegmentCall, [this, max_runs](const std::string&, std::string& reply) {
      SegmentDesc d;
      d.kind = SegmentDesc::Kind::kMemory;
      d.host = "127.0.0.1";
      d.rpc_port = srv.port();
      d.transports["tcp"] = nlohmann::json::object();
      if (max_runs) d.transports["tcp"]["max_runs"] = max_runs;
      BufferDesc b;
      b.addr = 0x10000000;
      b.length = 64 << 20;
      d.buffers.push_back(b);
      reply = encodeSegmentText(d);
      return Status::OK();
    });
    (void)srv.onStream(kTcpDataChannel, [this](net::Fd fd) {
      WireHeader h;
      // Read request headers (and a frame's run table; never payload: only
      // reads are sent here) and never answer; ends when the listener stops.
      std::vector<char> table;
      while (net::recvAll(fd.get(), &h, sizeof(h)).ok()) {
        headers.fetch_add(1);
        table.resize(h.length);
        if (h.type == tcp::kReadRunsReq && !net::recvAll(fd.get(), table.data(), table.size()).ok()) break;
      }
    });
    status = srv.start("127.0.0.1", 0);
  }
  ~SilentPeer() { srv.stop(); }
  std::string name() const { return "127.0.0.1:" + std::to_string(srv.port()); }
  rpc::Server srv;
  std::atomic<int> headers{0};
  Status status;
};

// Bytes this host's established IPv4 TCP sockets towards `port` have sent
// but not yet had acknowledged (tx_queue in /proc/net/tcp).
inline uint64_t bytesInFlightTo(uint16_t port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  uint64_t total = 0;
  while (std::getline(in, line)) {
    char rem[64] = {}, queues[64] = {};
    unsigned st = 0;
    if (std::sscanf(line.c_str(), "%*s %*s %63s %x %63s", rem, &st, queues) != 3 || st != 1) continue;
    const char* colon = std::strchr(rem, ':');
    if (!colon || std::strtoul(colon + 1, nullptr, 16) != port) continue;
    total += std::strtoull(queues, nullptr, 16);  // "tx_queue:rx_queue"
  }
  return total;
}

// The port of a "segment: host:port" line.
inline uint16_t portOf(const std::string& segment_line) {
  auto colon = segment_line.rfind(':');
  return colon == std::string::npos ? 0 : static_cast<uint16_t>(std::stoi(segment_line.substr(colon + 1)));
}

// Every task of batch `b` (`n` of them) ended `state`, with `code`.
inline void expectEnded(TransferEngine& e, BatchID b, size_t n, TransferState state, Code code) {
  for (size_t i = 0; i < n; ++i) {
    TransferStatus st;
    ASSERT_TRUE(e.getTransferStatus(b, i, st).ok()) << i;
    EXPECT_EQ(st.s, state) << i;
    EXPECT_EQ(st.error.code(), code) << i << ": " << st.error.toString();
  }
}

// A `hawser serve` child with 64 MiB of host memory, listening on `listen`
// (by default a port of its own choosing): `name` is its segment once it is
// ready (empty if it did not start).
struct ServeChild {
  explicit ServeChild(const std::string& listen = "127.0.0.1:0") {
    if (!child.start({"serve", "--listen", listen, "--memory", "64M"})) return;
    const std::string line = child.waitFor("segment:");
    if (line.empty() || child.waitFor("ready").empty()) return;
    port = portOf(line);
    name = "127.0.0.1:" + std::to_string(port);
  }
  test::Child child;
  uint16_t port = 0;
  std::string name;
};

// Opens the segment `name` in `in` (closing the one it had): where its first
// buffer starts, 0 when that fails.
inline uint64_t reopen(Initiator& in, const std::string& name) {
  if (in.seg != kInvalidSegment) (void)in.engine.closeSegment(in.seg);
  std::vector<SegmentBuffer> bufs;
  if (!in.open(name).ok() || !in.engine.segmentBuffers(in.seg, bufs).ok() || bufs.empty()) return 0;
  return bufs[0].addr;
}

// A peer dies with transfers on the wire: a `hawser serve` child is given
// work by `warm`, then stopped; `submit` puts `tasks` tasks into batch `b`,
// whose bytes then sit unacknowledged in the sockets towards it; it is
// killed. Every task must FAIL (kUnavailable) at once (the initiator's
// timeout is far beyond the test's patience: only the socket error can end
// them). Then a new child on the same port: `again` moves data to it (its
// memory at `base2`, the first child's at `base`).
inline void killPeerMidTransfer(size_t tasks, const std::function<void(Initiator& in, uint64_t base)>& warm,
                                const std::function<Status(Initiator& in, uint64_t base, BatchID b)>& submit,
                                const std::function<void(Initiator& in, uint64_t base, uint64_t base2)>& again) {
  ServeChild serve;
  ASSERT_FALSE(serve.name.empty()) << "hawser serve did not start";
  Initiator in(32 << 20, {{"tcp.timeout_ms", "600000"}});
  ASSERT_TRUE(in.status.ok());
  const uint64_t base = reopen(in, serve.name);
  ASSERT_NE(base, 0u);
  ASSERT_NO_FATAL_FAILURE(warm(in, base));
  ASSERT_TRUE(test::stopProcess(serve.child.pid)) << "hawser serve did not stop";  // nothing completes from here on
  BatchID b;
  ASSERT_TRUE(in.engine.allocateBatchID(tasks, b).ok());
  ASSERT_TRUE(submit(in, base, b).ok());
  ASSERT_TRUE(eventually([&] { return bytesInFlightTo(serve.port) > 0; })) << "nothing was sent to the stopped target";
  serve.child.kill(SIGKILL);
  serve.child.wait();
  ASSERT_TRUE(in.engine.waitTransfer(b, std::chrono::seconds(60)).ok());
  expectEnded(in.engine, b, tasks, TransferState::kFailed, Code::kUnavailable);
  ASSERT_TRUE(in.engine.freeBatchID(b).ok());
  // The next submit opens new connections.
  ServeChild next(serve.name);
  ASSERT_FALSE(next.name.empty()) << "second hawser serve did not start";
  const uint64_t base2 = reopen(in, serve.name);
  ASSERT_NE(base2, 0u);
  again(in, base, base2);
}

}  // namespace hawser::tcp_parts
