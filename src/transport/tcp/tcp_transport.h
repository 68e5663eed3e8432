// The tcp transport: memory segments of any peer reachable over TCP.
//
// Initiator: per peer, tcp.connections persistent data connections to the
// peer's rpc listener (kind kTcpDataChannel), opened lazily on the first
// submit (and again after a failure) by short-lived connector threads with a
// connect timeout. tcp.io_threads epoll threads own the sockets (edge-
// triggered, non-blocking): they batch many requests into one sendmsg
// (header + payload straight from the user's buffer), pipeline up to
// tcp.inflight slices per connection, and receive read data straight into the
// user's buffer (small reads: with their headers, then copied). A submitter
// that finds its io thread asleep sends its requests itself. A connection that sees EOF/RST, a malformed response or no
// progress for tcp.timeout_ms is closed and every slice on it FAILS.
// Slices whose local buffer is GPU memory go through pinned staging slots,
// their copies on CUDA streams overlapped with the network.
//
// Target: the rpc listener hands each data connection to a handler that
// serves it on that connection's thread: requests are checked against the
// registry (pinRemote: inside one remote-accessible region) and served by
// recv() into / sendmsg() out of the registered memory itself (headers and
// small write payloads are read ahead in bursts; the answers to a burst leave
// in one sendmsg); anything else
// gets an error response and is counted; a malformed or oversized frame
// closes that connection only. Requests for GPU memory are staged through
// pinned slots, a few in flight per connection (copies overlap the wire).
//
// Files: tcp_transport.cpp (install, peers, stats), tcp_sub_batch.cpp
// (prepare, post, cancel), tcp_conn_picker.cpp (a slice's connection),
// tcp_io.cpp (initiator io threads), tcp_stream.cpp (a connection's requests
// and responses), tcp_gpu.cpp (the initiator's GPU staging), tcp_target.cpp
// (the serving loop), tcp_target_channel.cpp (a served connection's I/O),
// tcp_target_gpu.cpp (the target's GPU staging). Wire format: tcp_wire.h.
// Tunables and figures: docs/tcp.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/transport.h"
#include "rpc/rpc.h"

namespace hawser {

namespace tcp {
class IoThread;
class PeerRef;
class SubBatchImpl;
struct InitiatorCounters;
struct Peer;
struct TargetState;
}  // namespace tcp

namespace tcp {
// A peer's tcp part of its descriptor (transports.tcp, its host and port),
// as decodePeerDesc reads it. Its optional limits are lenient, as an older
// release publishes them: one absent, not an integer or out of range is
// taken as unpublished.
struct PeerDesc {
  std::string host;
  uint16_t port = 0;
  uint64_t max_frame = 0;  // the target's payload bound (>= 4096); 0: none published
  bool gpu = false;        // it serves requests for its GPU memory
  uint32_t max_runs = 0;   // runs it takes per RUNS frame (2..kMaxFrameRuns); 0: one request per slice
  bool bound = false;      // it takes requests bound to a registration (version >= kBoundVersion)
};
// The descriptor decoder: kNotSupported (base/peer_entry.h) for a segment
// that is not a memory segment or publishes no tcp transport, or no host
// and port (reason kPeerIncompatible).
Status decodePeerDesc(const SegmentDesc& seg, PeerDesc& out, RouteDecline& why);
}  // namespace tcp

// decodePeerDesc as the engine's list of transports names it (beside the
// factory, makeTcpTransport; engine/transport_list.h).
Status decodeTcpPeer(const SegmentDesc& seg, RouteDecline& why);

// The data connections' kind on the rpc listener.
inline const rpc::Channel kTcpDataChannel = rpc::channel("tcp.data");

struct TcpSettings {
  uint32_t connections = 2;           // tcp.connections
  bool home_connections = true;       // tcp.home_connections
  uint64_t home_slack = 4ull << 20;   // tcp.home_slack
  uint32_t home_window_ms = 50;       // tcp.home_window_ms
  uint64_t slice_size = 1ull << 20;   // tcp.slice_size
  uint64_t group_bytes = 1ull << 20;  // tcp.group_bytes (0: no frames of many runs)
  uint32_t timeout_ms = 5000;         // tcp.timeout_ms
  uint32_t connect_timeout_ms = 3000; // tcp.connect_timeout_ms
  uint32_t io_threads = 2;            // tcp.io_threads
  uint32_t inflight = 64;             // tcp.inflight (requests per connection)
  uint32_t sock_buf = 0;              // tcp.sock_buf (0 = kernel autotuning)
  uint32_t loopback_send_buf = 256u << 10;  // tcp.loopback_send_buf (0 = kernel autotuning)
  uint64_t max_frame = 64ull << 20;   // tcp.max_frame (target's payload bound)
  uint32_t gpu_staging_buffers = 16;  // tcp.gpu_staging_buffers (slots of slice_size, per side)
  bool gpu_poll_copies = true;        // tcp.gpu_poll_copies
};

struct TcpStats {
  // Target side.
  uint64_t refused_requests = 0;  // out-of-range / not remote-accessible requests
  uint64_t malformed_frames = 0;  // connections closed for a bad frame
  uint64_t abandoned_writes = 0;  // writes not applied: their initiator had closed the connection (gave up on them)
  uint64_t served_reads = 0;
  uint64_t served_writes = 0;
  uint64_t served_bytes = 0;
  uint64_t served_run_frames = 0;   // RUNS requests (frames of many runs) served
  uint64_t served_framed_runs = 0;  // runs of those
  uint64_t data_connections = 0;  // data connections accepted (total)
  uint64_t open_data_connections = 0;  // being served now
  // Initiator side.
  uint64_t connects = 0;          // data connections opened
  uint64_t connect_failures = 0;
  uint64_t connection_failures = 0;  // established connections lost (EOF/RST/timeout/protocol)
  uint64_t slices_completed = 0;
  uint64_t slices_failed = 0;
  uint64_t run_frames = 0;    // frames of many runs sent (RUNS requests)
  uint64_t framed_runs = 0;   // slices sent as runs of those (framed_runs / run_frames: runs per frame)
  uint64_t inline_submits = 0;  // submissions sent by the submitting thread (the io thread slept)
  uint64_t polled_events = 0;   // connection events handled by a waiting caller's thread (poll())
  // GPU memory through pinned staging (docs/tcp.md "GPU memory").
  uint64_t gpu_staged_to_device_bytes = 0;    // initiator: read bytes copied staging -> GPU
  uint64_t gpu_staged_from_device_bytes = 0;  // initiator: write bytes copied GPU -> staging
  uint64_t gpu_staging_waits = 0;             // initiator: GPU slices that waited for a free slot
  uint64_t gpu_staging_copies = 0;            // initiator: copies queued, one per request (a slice, or a frame)
  uint64_t gpu_staging_inflight = 0;            // initiator: staging slots held now (gauge)
  uint64_t served_gpu_to_device_bytes = 0;    // target: written bytes copied staging -> GPU
  uint64_t served_gpu_from_device_bytes = 0;  // target: read bytes copied GPU -> staging
  uint64_t served_gpu_staging_waits = 0;      // target: GPU requests that waited for a free slot
  uint64_t served_gpu_staging_inflight = 0;     // target: staging slots held now (gauge)
};

class TcpTransport final : public Transport {
 public:
  TcpTransport();
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  TransportCaps caps() const override;
  Status install(const TransportContext& ctx) override;
  void shutdown() override;
  void describe(nlohmann::json& attrs) const override;
  // GPU memory ("cuda:N"), which both sides stage, is refused
  // (kNotSupported) when no CUDA driver is loaded. Keeps nothing: a task's
  // region (Task::region().gpu) and, at the target, the registry's entry
  // say which GPU memory lies on.
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override;
  // The peer's host, port, max_frame, max_runs and whether it serves GPU memory, decoded once. Its data connections
  // are released once the last handle on that host:port goes and nothing is
  // outstanding on them.
  Status openPeer(const SegmentDesc& seg, std::shared_ptr<PeerHandle>& out) override;
  Status newSubBatch(size_t task_capacity, std::unique_ptr<SubBatch>& out) override;
  // Receives (and sends) on the io threads' connections from a waiting
  // caller's thread while those threads sleep.
  void poll() override;
  void diagnose(TransportDiagnosis& out) const override;
  Counters stats() const override;

  const TcpSettings& settings() const { return settings_; }
  TcpStats counters() const;

  // Reads and validates every tcp.* key of `config`.
  static Status loadSettings(const Config& config, TcpSettings& out);

 private:
  friend class tcp::SubBatchImpl;
  friend class tcp::PeerRef;
  void releasePeer(tcp::Peer* peer);

  TcpSettings settings_;
  bool installed_ = false;
  std::atomic<bool> stopping_{false};
  std::shared_ptr<metrics::Registry> metrics_;  // the engine's (base/transport_metrics.h)
  std::shared_ptr<tcp::TargetState> target_;
  std::unique_ptr<tcp::InitiatorCounters> counters_;
  std::vector<std::unique_ptr<tcp::IoThread>> io_;
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::unique_ptr<tcp::Peer>> peers_;
  uint32_t next_conn_ = 0;  // under peers_mu_: spreads connections over io threads
};

}  // namespace hawser
