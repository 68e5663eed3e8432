// Internals of the tcp transport shared by its .cpp files (not an interface
// for anyone else).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/registry.h"
#include "base/transport.h"
#include "rpc/socket.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace hawser::tcp {

using Clock = std::chrono::steady_clock;

inline constexpr size_t kMaxIoThreads = 16;  // tcp.io_threads upper bound

// ---- initiator ---------------------------------------------------------------

enum SliceState : uint8_t {
  kSlicePrepared = 0,   // cut by prepare(), not submitted
  kSliceQueued = 1,     // submitted, not yet handed to a socket (cancel() may take it)
  kSliceCommitted = 2,  // owned by the io thread until its response (or failure)
  kSliceCanceled = 3,   // completed CANCELED by cancel(); the io thread drops it
};

class SubBatchImpl;
struct Conn;
class IoThread;

// One slice: at most tcp.slice_size bytes of one task, one request on one
// connection. Lives in its sub-batch's slice array; linked into exactly one
// list at a time (io thread inbox, a connection's unsent or inflight list).
struct Slice {
  Slice* next = nullptr;
  Task* task = nullptr;
  SubBatchImpl* sb = nullptr;
  Conn* conn = nullptr;
  char* local = nullptr;  // the user's buffer for this slice
  uint32_t len = 0;
  bool is_read = false;
  std::atomic<uint8_t> state{kSlicePrepared};
  WireHeader hdr;  // the request header, sent from here
};

struct SliceList {
  Slice* head = nullptr;
  Slice* tail = nullptr;
  size_t n = 0;
  bool empty() const { return head == nullptr; }
  void push(Slice* s) {
    s->next = nullptr;
    if (tail) tail->next = s;
    else head = s;
    tail = s;
    ++n;
  }
  Slice* pop() {
    Slice* s = head;
    if (!s) return nullptr;
    head = s->next;
    if (!head) tail = nullptr;
    --n;
    return s;
  }
};

// Slices cut by prepare(), one allocation per prepare.
struct Work final : PreparedWork {
  std::unique_ptr<Slice[]> chunk;
};

// A tcp sub-batch: the slices it posted, and how many an io thread still holds.
class SubBatchImpl final : public SubBatch {
 public:
  explicit SubBatchImpl(TcpTransport* owner) : owner_(owner) {}
  // Waits (bounded) until no io thread references its slices; leaks them
  // rather than free memory still in use.
  ~SubBatchImpl() override;
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override { return outstanding.load(std::memory_order_acquire) == 0; }

  // Slices an io thread still references (queued, on a socket, awaiting a
  // response). idle() <=> 0.
  std::atomic<int64_t> outstanding{0};

 private:
  TcpTransport* owner_;
  std::mutex mu_;  // the chunk lists below (post/cancel; not the data path)
  std::vector<std::unique_ptr<Slice[]>> chunks_;  // posted slices
  std::vector<size_t> chunk_sizes_;
};

struct Peer {
  std::string host;
  uint16_t port = 0;
  std::string name;  // "host:port" (for messages)
  std::vector<std::unique_ptr<Conn>> conns;
  std::atomic<uint32_t> rr{0};  // round-robin cursor over conns
  int handles = 0;              // PeerHandles open on it (under the transport's peers_mu_)
};

// The engine's handle on one peer: decoded once per descriptor.
class PeerRef final : public PeerHandle {
 public:
  PeerRef(TcpTransport* owner, Peer* peer, uint64_t slice) : owner(owner), peer(peer), slice(slice) {}
  ~PeerRef() override;
  TcpTransport* const owner;
  Peer* const peer;
  const uint64_t slice;  // slice size: ours, capped by the peer's max_frame
};

enum class ConnState : uint8_t { kDisconnected, kConnecting, kConnected };
enum class RxMode : uint8_t { kHeader, kPayload, kReason };

// One data connection to a peer. Everything below `io` is owned by that io
// thread alone.
struct Conn {
  Peer* peer = nullptr;
  IoThread* io = nullptr;
  uint32_t io_index = 0;
  uint32_t index = 0;
  std::atomic<bool> close_idle{false};  // last PeerHandle gone: close once nothing is outstanding

  ConnState state = ConnState::kDisconnected;
  int fd = -1;
  bool known = false;    // in io->conns_
  bool touched = false;  // in io->touched_ (this round)
  bool writable = false;
  std::thread connector;  // last connect attempt (joined before the next)

  SliceList unsent;    // queued, not yet committed to the socket
  SliceList inflight;  // committed, awaiting a response (in send order)
  Slice* tx = nullptr; // first inflight slice not fully written
  size_t tx_off = 0;   // bytes of tx already written (header + payload)
  uint64_t seq = 0;    // last request id used
  Clock::time_point last_progress{};

  RxMode rx_mode = RxMode::kHeader;
  char* rx_dst = nullptr;  // payload destination (user buffer) in kPayload
  size_t rx_left = 0;      // payload / reason bytes still expected
  uint8_t err_code = 0;
  std::string reason;
  static constexpr size_t kRxBuf = 4096;
  uint32_t rx_begin = 0, rx_end = 0;  // unparsed control bytes in rxbuf
  alignas(16) char rxbuf[kRxBuf];
};

// Counters shared by the io threads (relaxed atomics).
struct InitiatorCounters {
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> connect_failures{0};
  std::atomic<uint64_t> connection_failures{0};
  std::atomic<uint64_t> slices_completed{0};
  std::atomic<uint64_t> slices_failed{0};
};

// One epoll thread driving a set of connections.
class IoThread {
 public:
  IoThread(const TcpSettings& settings, InitiatorCounters* counters);
  ~IoThread();
  Status start();
  // Stops the loop, joins connector threads, fails every slice still held.
  void stop();

  // Hands over a chain of slices linked through `next`, newest first
  // (first..last); thread-safe, lock-free.
  void post(Slice* first, Slice* last);
  // Drop canceled slices from the unsent queues; returns a ticket for
  // waitPurged().
  uint64_t requestPurge();
  // Waits (at most `limit`) until the purge of `ticket` has run.
  void waitPurged(uint64_t ticket, std::chrono::milliseconds limit);
  // Close connections flagged close_idle that have nothing outstanding.
  void requestCloseIdle();

 private:
  struct ConnectResult {
    Conn* conn;
    net::Fd fd;
    Status status;
  };

  void run();
  void wake();
  void drainInbox();
  void drainConnectResults();
  void purge();
  void closeIdle();
  void startConnect(Conn* c);
  void doSend(Conn* c);
  void doRecv(Conn* c);
  bool parse(Conn* c);  // false when the connection failed
  Slice* commitNext(Conn* c);
  void advanceTx(Conn* c, size_t n);
  size_t controlBytesFrom(const Slice* s) const;
  void completeFront(Conn* c, bool ok, const Status& why);
  // Closes the connection and fails what it held; `failure` counts it in
  // connection_failures (not for an idle connection released on purpose).
  void failConn(Conn* c, const Status& why, bool failure = true);
  void failList(SliceList& l, bool committed, const Status& why);
  void dropCanceled(Slice* s);
  int checkTimeouts();  // epoll timeout to use (ms, -1 = none)

  const TcpSettings& settings_;
  InitiatorCounters* counters_;
  int epfd_ = -1;
  int evfd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> events_{false};  // connect results / purge requests pending
  std::atomic<Slice*> inbox_{nullptr};
  std::atomic<uint64_t> purge_epoch_{0};
  uint64_t purge_seen_ = 0;
  std::mutex purge_mu_;
  std::condition_variable purge_cv_;
  uint64_t purge_done_ = 0;  // under purge_mu_
  std::mutex results_mu_;
  std::vector<ConnectResult> results_;
  std::vector<Conn*> conns_;    // every connection this thread has driven
  std::vector<Conn*> touched_;  // scratch
};

// ---- target ------------------------------------------------------------------

// Serves data connections (one per rpc-listener thread). Shared with the
// stream handler so a late connection never sees a destroyed transport.
struct TargetState {
  MemoryRegistry* registry = nullptr;
  uint64_t max_frame = 0;
  uint32_t timeout_ms = 0;
  uint32_t sock_buf = 0;
  std::atomic<bool> stopping{false};

  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> malformed{0};
  std::atomic<uint64_t> served_reads{0};
  std::atomic<uint64_t> served_writes{0};
  std::atomic<uint64_t> served_bytes{0};
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> open_connections{0};

  void serve(net::Fd fd);
  void stop();

  // Regions registered with a non-host location (GPU memory): never served,
  // since the target would hand a device pointer to the socket.
  void addNonHost(uint64_t addr, uint64_t len, const std::string& location);
  void removeNonHost(uint64_t addr);
  // OK, or kNotSupported naming the region when [addr, addr+len) touches one.
  Status checkHost(uint64_t addr, uint64_t len);

 private:
  struct NonHost {
    uint64_t addr, len;
    std::string location;
  };
  std::atomic<size_t> non_host_count_{0};
  std::mutex non_host_mu_;
  std::vector<NonHost> non_host_;

  std::mutex mu_;
  std::vector<int> fds_;  // connections being served (shut down by stop())
};

}  // namespace hawser::tcp
