// Internals of the tcp transport shared by its .cpp files (not an interface
// for anyone else).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/posted_units.h"
#include "base/registry.h"
#include "base/transport_metrics.h"
#include "base/transport.h"
#include "gpu/copy_stream.h"
#include "gpu/pinned_buffers.h"
#include "rpc/socket.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace hawser::tcp {

using Clock = std::chrono::steady_clock;

inline constexpr size_t kMaxIoThreads = 16;  // tcp.io_threads upper bound
inline constexpr int kMaxIov = 1024;         // iovecs per sendmsg/readv (IOV_MAX)

// Socket buffers of a data connection, either end: `sock_buf` (tcp.sock_buf)
// sizes both when set; otherwise a connection whose peer is this host over
// loopback gets `loopback_send_buf` (tcp.loopback_send_buf) as its send
// buffer, and the rest is left to the kernel's autotuning.
void sizeBuffers(int fd, uint32_t sock_buf, uint32_t loopback_send_buf);

// ---- initiator ---------------------------------------------------------------

enum SliceState : uint8_t {
  kSlicePrepared = 0,   // cut by prepare(), not submitted
  kSliceQueued = 1,     // submitted, not yet handed to a socket (cancel() may take it)
  kSliceCommitted = 2,  // owned by the io thread until its response (or failure)
  kSliceCanceled = 3,   // completed CANCELED by cancel(); the io thread drops it
  kSliceDropped = 4,    // canceled and let go of by the io thread (a frame's other runs skip it)
};

class SubBatchImpl;
struct Conn;
class IoThread;

// One slice: at most tcp.slice_size bytes of one task. Lives in its
// sub-batch's slice array. A slice goes to the wire alone (one READ_REQ /
// WRITE_REQ) or as a run of a *frame*: consecutive slices of one post that
// post() grouped into one RUNS request (docs/tcp.md "Frames of many runs").
// The first slice of a frame carries it: its `runs` says how many slices
// (this[0..runs) in the array) the frame holds, and only it is linked into
// the lists (io thread inbox, a connection's unsent or inflight list, the
// staging lists); its other slices have `runs` 0. Which runs of a frame go
// out is fixed when the frame is committed (commitFrame): those canceled
// before are dropped (kSliceDropped) and skipped from then on. A frame's
// wire fields (hdr, table, flen, live, staging slot and copy ticket) are its
// first slice's, even where that slice's own run was dropped.
struct Slice {
  Slice* next = nullptr;
  Task* task = nullptr;
  SubBatchImpl* sb = nullptr;
  Conn* conn = nullptr;
  char* local = nullptr;  // the user's buffer for this slice
  char* buf = nullptr;    // what the socket reads/writes: `local`, or a staging slot (GPU memory)
  uint32_t len = 0;
  bool is_read = false;
  // GPU memory (docs/tcp.md "GPU memory"): the local buffer's GPU (-1: host
  // memory), the staging slot held (-1: none), the ticket of its copy on the
  // io thread's stream for that GPU.
  int16_t gpu = -1;
  bool staged = false;  // a write whose GPU->staging copy was issued: committed before the socket sees it
  bool waited = false;  // counted once in gpu_staging_waits
  int32_t slot = -1;
  uint64_t ticket = 0;
  std::atomic<uint8_t> state{kSlicePrepared};
  int16_t remote_gpu = -1;  // the remote buffer's GPU (-1: host memory, -2: unknown: never grouped)
  uint16_t runs = 1;        // slices of the frame this one carries (1: alone); 0: a run of another's frame
  uint16_t live = 1;        // runs of the frame committed to the wire
  uint32_t flen = 0;        // payload bytes of the request it carries (`len` alone; a frame's committed runs)
  RunEntry* table = nullptr;  // a frame's run table (sent after hdr), in its post's table array
  // The request header (and, version 2, the registration it is bound to),
  // sent from here (a run of a frame: its own range, in hdr.addr).
  RequestHeader hdr;

  bool frame() const { return runs > 1; }
  // A frame's payload lies packed in one staging slot (GPU memory).
  bool packed() const { return gpu >= 0; }
};

// Calls f(slice) for each run of the frame `lead` carries (lead itself when
// alone) that is not kSliceDropped, in order. `f` may let go of its slice
// (the last call may end the frame and its sub-batch): the frame is not
// touched after the last call.
template <class F>
void forEachRun(Slice* lead, F&& f) {
  const uint32_t n = lead->runs;
  if (n <= 1) {
    f(lead);
    return;
  }
  uint32_t last = n;
  for (uint32_t j = 0; j < n; ++j)
    if (lead[j].state.load(std::memory_order_acquire) != kSliceDropped) last = j;
  if (last == n) return;
  for (uint32_t j = 0; j <= last; ++j)
    if (j == last || lead[j].state.load(std::memory_order_acquire) != kSliceDropped) f(&lead[j]);
}

// Bytes the request `s` carries puts on the wire: header, run table, payload.
inline size_t wireBytes(const Slice* s) {
  return kHeaderSize + bindingBytes(s->hdr) + (s->frame() ? runTableBytes(s->live) : 0) + (s->is_read ? 0 : s->flen);
}

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

// Slices cut by prepare(), one allocation per prepare; with them the space
// for the run tables of the frames post() may form (one entry per slice).
struct Work final : PreparedWork {
  std::unique_ptr<Slice[]> chunk;
  std::unique_ptr<RunEntry[]> tables;
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
  PostedUnits<Slice> slices_;      // posted slices, one array per prepare
  PostedUnits<RunEntry> tables_;  // their frames' run tables
};

inline constexpr uint32_t kNoPoster = UINT32_MAX;

struct Peer {
  std::string host;
  uint16_t port = 0;
  std::string name;  // "host:port" (for messages)
  std::vector<std::unique_ptr<Conn>> conns;
  std::atomic<uint32_t> rr{0};  // round-robin cursor over conns (slices not kept to a home connection)
  // Connection choice (tcp_conn_picker.h): the seat of the last thread that
  // posted slices here, and until when (steady clock, ns) several threads
  // count as submitting at once.
  std::atomic<uint32_t> last_poster{kNoPoster};
  std::atomic<int64_t> shared_until_ns{0};
  int handles = 0;              // PeerHandles open on it (under the transport's peers_mu_)
  metrics::ConnectionMetrics metrics;  // peer label: name
};

// The engine's handle on one peer: decoded once per descriptor.
class PeerRef final : public PeerHandle {
 public:
  PeerRef(TcpTransport* owner, Peer* peer, uint64_t slice, bool gpu, uint32_t runs, uint64_t group, bool bound,
          std::vector<int16_t> buffer_gpu)
      : owner(owner),
        peer(peer),
        slice(slice),
        gpu(gpu),
        runs(runs),
        group(group),
        bound(bound),
        buffer_gpu(std::move(buffer_gpu)) {}
  ~PeerRef() override;
  TcpTransport* const owner;
  Peer* const peer;
  const uint64_t slice;  // slice size: ours, capped by the peer's max_frame
  const bool gpu;        // the peer's target serves its GPU memory (descriptor "gpu": true)
  // Frames of many runs: at most `runs` runs (the peer's "max_runs", capped
  // by kMaxFrameRuns) and `group` bytes (tcp.group_bytes capped by `slice`)
  // each; runs < 2 or group 0: every slice goes alone.
  const uint32_t runs;
  const uint64_t group;
  // The peer takes requests bound to a registration (descriptor "version"
  // >= 2): each request carries the seq of the buffer it lies in.
  const bool bound;
  // The GPU of each of the segment's buffers (its location "cuda:N"), -1 for
  // host memory.
  const std::vector<int16_t> buffer_gpu;
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
  // Bytes of the slices posted to it and not yet finished (any thread).
  std::atomic<int64_t> load{0};

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
  // Bytes moved (or a request committed to an idle connection) bump
  // `progress`; checkTimeouts() notes when it last saw it change.
  uint64_t progress = 0, progress_seen = 0;
  Clock::time_point last_progress{};

  RxMode rx_mode = RxMode::kHeader;
  char* rx_dst = nullptr;  // payload destination (user buffer) in kPayload
  size_t rx_left = 0;      // payload bytes still expected there / reason bytes still expected
  // A frame's payload in host memory is received run by run: the run
  // `rx_dst` lies in (null: the payload is one piece).
  Slice* rx_run = nullptr;
  uint8_t err_code = 0;
  std::string reason;
  // Response headers, and the payload of reads of at most kSmallRead bytes,
  // are received here (one recvmsg takes many small responses; their
  // payload is copied out); larger payloads go straight to their buffer.
  static constexpr size_t kRxBuf = 64 * 1024;
  static constexpr uint32_t kSmallRead = 16 * 1024;
  uint32_t rx_begin = 0, rx_end = 0;  // unparsed bytes in rxbuf
  alignas(16) char rxbuf[kRxBuf];
};

// Counters shared by the io threads (relaxed atomics).
struct InitiatorCounters {
  std::atomic<uint64_t> connects{0};
  std::atomic<uint64_t> connect_failures{0};
  std::atomic<uint64_t> connection_failures{0};
  std::atomic<uint64_t> slices_completed{0};
  std::atomic<uint64_t> slices_failed{0};
  std::atomic<uint64_t> run_frames{0};    // RUNS requests committed to the wire
  std::atomic<uint64_t> framed_runs{0};   // slices sent as runs of those
  std::atomic<uint64_t> inline_submits{0};   // submit() calls that ran the loop's work themselves
  std::atomic<uint64_t> polled_events{0};    // connection events handled by waiting callers (poll())
  std::atomic<uint64_t> gpu_to_device{0};    // read bytes copied staging -> GPU
  std::atomic<uint64_t> gpu_from_device{0};  // write bytes copied GPU -> staging
  std::atomic<uint64_t> staging_waits{0};    // GPU slices that found no free staging slot
  std::atomic<uint64_t> staging_copies{0};   // copy calls queued (one per request: a slice, or a frame's copyRuns)
  gpu::CopyCounters copy;                    // those copies as windows (gpu_copy_*: the mechanism, CTAs)
  std::atomic<int64_t> staging_in_use{0};    // staging slots held now
};

// One epoll thread driving a set of connections.
class IoThread {
 public:
  // `staging_slots`: this thread's share of tcp.gpu_staging_buffers;
  // `copy`: how windows of GPU runs are copied (gpu.copy_*).
  IoThread(const TcpSettings& settings, const gpu::CopySettings& copy, InitiatorCounters* counters,
           size_t staging_slots);
  ~IoThread();
  Status start();
  // Stops the loop, joins connector threads, fails every slice still held.
  void stop();

  // Hands over a chain of slices linked through `next`, newest first
  // (first..last); thread-safe, lock-free.
  void post(Slice* first, Slice* last);
  // The submitting thread's way in: when the loop is asleep (in epoll_wait,
  // or between rounds), takes it and queues and sends the slices itself, so
  // a request to an idle connection leaves without waking this thread;
  // otherwise post(). Thread-safe.
  void submit(Slice* first, Slice* last);
  // A caller waiting for a batch: when the loop is asleep, receives and sends
  // on its connections from the calling thread (the response to a small
  // transfer then needs no wake-up on this side). Never blocks.
  void poll();
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
  // Epoll events for the connections; `loop`: called by the loop itself
  // (which alone consumes the eventfd).
  void handleEvents(const epoll_event* evs, int n, bool loop);
  void relock(std::unique_lock<std::mutex>& lk);  // takes loop_mu_ back after epoll_wait
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
  // Bytes that may be received into rxbuf from the response to `s` on.
  size_t bufferedBytesFrom(const Slice* s) const;
  // Payload: `k` bytes arrived at rx_dst (run by run for a frame); returns
  // how many of them were payload, and ends the payload when it is complete.
  size_t tookPayload(Conn* c, size_t k);
  void completeFront(Conn* c, bool ok, const Status& why);
  // Closes the connection and fails what it held; `failure` counts it in
  // connection_failures (not for an idle connection released on purpose).
  void failConn(Conn* c, const Status& why, bool failure = true);
  void failList(SliceList& l, bool committed, const Status& why);
  // The request `s` carries goes to the wire: its runs still queued become
  // the io thread's, the canceled ones are dropped; a frame's run table,
  // header and (GPU memory) places in its staging slot are laid out for the
  // runs that remain. False (and the request is gone) when none remains.
  bool commitFrame(Slice* s);
  // Every run of the request `s` carries was canceled before it was sent.
  static bool allCanceled(Slice* s);
  // Lets go of the request `s` carries, all of whose runs were canceled.
  void dropFrame(Slice* s);
  void dropCanceled(Slice* s);
  // Last touch of the request `s` carries: frees its staging slot,
  // completes each of its runs.
  void endFrame(Slice* s, bool ok, const Status& why);
  // Last touch of one slice: completes it.
  void finishSlice(Slice* s, bool ok, const Status& why);
  // epoll timeout to use (ms, -1 = none): a tick while any connection is
  // open, since a submitter may put slices on one while the loop sleeps.
  int checkTimeouts();

  // GPU memory (tcp_gpu.cpp): slices whose local buffer is GPU memory wait
  // in slot_wait_ for a staging slot; a write then copies GPU -> slot and
  // joins its connection's unsent list once that copy is done; a read is
  // sent at once, receives into its slot, and completes once its
  // slot -> GPU copy is done.
  struct Lane {
    int device = 0;
    std::unique_ptr<gpu::CopyStream> stream;
    SliceList copying;  // copies in flight on `stream`, in issue order
  };
  void pumpStaging();                 // finished copies on; free slots to waiting slices
  void finishPayload(Conn* c);        // the front read's payload has arrived
  bool copiesPending() const;
  void waitOneCopy();                 // blocks until the oldest copy of one GPU is done
  Lane* lane(int device, Status& why);
  void releaseStaging(Slice* s);
  void failWaiting(Conn* c, const Status& why);  // the slices of `c` still waiting for a slot FAIL
  void failStaging(const Status& why);  // shutdown: everything staged FAILS
  void markReady(Conn* c);

  // Queues the copies of the request `s` carries on `l`'s stream: to the
  // staging slot (a write) or out of it (a read): one copyRuns for a frame.
  Status queueCopy(Lane* l, Slice* s, bool to_slot);

  const size_t staging_slots_;
  const gpu::CopySettings copy_settings_;
  std::vector<gpu::CopyRun> copy_runs_;  // scratch of queueCopy
  std::unique_ptr<gpu::PinnedBuffers> staging_;  // created at the first GPU slice
  std::vector<std::unique_ptr<Lane>> lanes_;      // destroyed first: their streams sync
  SliceList slot_wait_;
  std::vector<Conn*> ready_;  // scratch of pumpStaging

  const TcpSettings& settings_;
  InitiatorCounters* counters_;
  // Held by whoever runs the loop's work: this thread except while it waits
  // in epoll_wait, or a submitter (submit()) meanwhile. Everything the loop
  // owns (connections, lists, scratch) is touched only under it.
  std::mutex loop_mu_;
  bool exited_ = false;  // under loop_mu_: the loop has ended
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
  uint32_t loopback_send_buf = 0;
  std::atomic<bool> stopping{false};

  // What it serves, refuses and accepts (base/transport_metrics.h); the
  // registry lives as long as this state.
  std::shared_ptr<metrics::Registry> registry_ref;
  metrics::ServedMetrics served;
  std::atomic<uint64_t> abandoned_writes{0};  // writes not applied: the initiator had closed the connection
  std::atomic<uint64_t> run_frames{0};        // RUNS requests served
  std::atomic<uint64_t> framed_runs{0};       // runs of those

  // GPU memory (a region whose registry entry says "cuda:N"): requests for
  // it go through pinned staging slots shared by every data connection
  // (docs/tcp.md "GPU memory").
  gpu::CopySettings copy;      // gpu.copy_*
  uint64_t slot_size = 0;      // tcp.slice_size
  size_t staging_count = 0;    // tcp.gpu_staging_buffers
  std::atomic<uint64_t> gpu_to_device{0};    // written bytes copied staging -> GPU
  std::atomic<uint64_t> gpu_from_device{0};  // read bytes copied GPU -> staging
  std::atomic<uint64_t> staging_waits{0};
  std::atomic<int64_t> staging_in_use{0};
  // The staging slots, created at the first GPU request.
  Status staging(gpu::PinnedBuffers*& out);

  void serve(net::Fd fd);
  void stop();

 private:
  std::mutex staging_mu_;
  std::unique_ptr<gpu::PinnedBuffers> staging_;

  std::mutex mu_;
  std::vector<int> fds_;  // connections being served (shut down by stop())
};

}  // namespace hawser::tcp
