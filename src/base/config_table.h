// The config table: every tunable of hawser, declared once.
//
// A knob has a key ("tcp.connections"), the environment variable that sets
// it (HAWSER_TCP_CONNECTIONS), a type, a default (written as a user would
// write it, and parsed by the same parser), a range (numeric types) or the
// allowed values (enums), and a one-line doc. `hawser config --markdown`
// prints this table; docs/config.md and README.md hold its output and a test
// fails when they drift.
//
// Components read knobs through Config's typed getters (base/config.h) with
// a key that is checked against this table at compile time (KnobKey): an
// unknown key, or a getter of the wrong type, does not build.
//
// Adding a knob: one line below, build `hawser`, then
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
// to regenerate the docs' tables (see that file; ctest docs.config_tables
// fails while they drift).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "hawser/status.h"

namespace hawser {

enum class KnobType : uint8_t {
  kInt,         // decimal integer
  kSize,        // bytes: "4096", "64K", "1M", "2G", "1T" (binary units; "64KB", "1MiB" too)
  kBool,        // true/false, 1/0, yes/no, on/off (any case)
  kString,      // any text, "" included
  kEnum,        // one of `choices` (exact, lower case)
  kDurationMs,  // milliseconds, a decimal integer
};

struct Knob {
  std::string_view key;
  std::string_view env;
  KnobType type;
  std::string_view def;      // the default, as text
  int64_t lo = 0, hi = 0;    // kInt, kSize, kDurationMs: inclusive range
  std::string_view choices;  // kEnum: "a|b|c"
  std::string_view doc;
  bool secret = false;  // a password or token: `hawser config KEY` shows it masked
};

namespace knob_detail {
inline constexpr int64_t K = 1ll << 10, M = 1ll << 20, G = 1ll << 30, T = 1ll << 40;
inline constexpr int64_t kHour = 3600000;
}  // namespace knob_detail

// clang-format off
inline constexpr Knob kKnobs[] = {
  // ---- engine -------------------------------------------------------------------------------------------------------
  // A string: the transports are the build's (src/CMakeLists.txt); init checks the name against them.
  {"transport", "HAWSER_TRANSPORT", KnobType::kString, "auto", 0, 0, {},
   "force one transport of this build for memory segments (tcp, rdma, ...; nvmeof = file); auto or empty: "
   "the cheapest that can serve each request"},
  {"route.transports", "HAWSER_ROUTE_TRANSPORTS", KnobType::kString, "", 0, 0, {},
   "route contract (docs/routes.md): the transports a request may take, comma-separated (tcp, shm, rdma, nvlink, "
   "file); empty: any. A request it forbids fails at submit with no_transport"},
  {"route.require", "HAWSER_ROUTE_REQUIRE", KnobType::kString, "", 0, 0, {},
   "route contract (docs/routes.md): properties every route must give, comma-separated (zero_copy, no_staging, "
   "same_host); empty: none"},
  {"batch.slices_per_task", "HAWSER_BATCH_SLICES_PER_TASK", KnobType::kSize, "16384", 1, 16 * knob_detail::M, {},
   "a batch of capacity N holds at most N x this many slices"},
  {"batch.max_capacity", "HAWSER_BATCH_MAX_CAPACITY", KnobType::kSize, "1M", 1, knob_detail::G, {},
   "largest capacity allocateBatchID accepts"},
  {"block.max_run", "HAWSER_BLOCK_MAX_RUN", KnobType::kSize, "64M", 4 * knob_detail::K, knob_detail::G, {},
   "block requests: blocks contiguous on both sides are merged into runs of at most this many bytes"},
  {"block.window", "HAWSER_BLOCK_WINDOW", KnobType::kSize, "1024", 1, knob_detail::M, {},
   "block requests: runs one lane hands its transport at once (a block request's engine memory is bounded by "
   "2 x (block.lanes + 1) windows)"},
  {"block.run_window", "HAWSER_BLOCK_RUN_WINDOW", KnobType::kSize, "8192", 1, knob_detail::M, {},
   "block requests through a transport that moves windows of runs (nvlink, shm): runs one lane hands it at once; "
   "an nvlink window is one launch of the GPU copy kernel, so larger windows amortize a launch over more bytes (32 "
   "bytes of engine memory a run)"},
  {"block.first_run_window", "HAWSER_BLOCK_FIRST_RUN_WINDOW", KnobType::kSize, "8192", 1, knob_detail::M, {},
   "block requests through a transport that moves windows of runs: runs of a one-shot request's first window, "
   "which the caller's thread hands over itself (at most block.run_window); the pump cuts the rest. The default "
   "sends a request of up to 8192 runs in one piece, with no wait for the pump thread to wake"},
  {"block.lanes", "HAWSER_BLOCK_LANES", KnobType::kInt, "4", 1, 64, {},
   "block requests: windows of runs of one task in flight at once"},
  {"batch.wait_spin_us", "HAWSER_BATCH_WAIT_SPIN_US", KnobType::kInt, "50", 0, 1000000, {},
   "waitTransfer and transferSync poll the batch (and tcp's sockets) this many microseconds before they sleep: "
   "a transfer that ends by then needs no wake-up; while waits keep outlasting it they sleep at once, probing "
   "every 16th (0: always sleep at once)"},
  {"auth.token", "HAWSER_AUTH_TOKEN", KnobType::kString, "", 0, 0, {},
   "shared secret every peer connection must present (empty: none)", true},
  {"rpc.timeout_ms", "HAWSER_RPC_TIMEOUT_MS", KnobType::kDurationMs, "5000", 10, knob_detail::kHour, {},
   "control-plane calls (descriptor fetch); also the keepalive interval of control connections"},
  {"rpc.frame_timeout_ms", "HAWSER_RPC_FRAME_TIMEOUT_MS", KnobType::kDurationMs, "10000", 10, knob_detail::kHour, {},
   "rpc listener: a connection's Hello, and each control frame once its first byte came, must arrive whole "
   "within this long, or the connection is closed (also the send deadline of a reply)"},
  {"rpc.max_connections", "HAWSER_RPC_MAX_CONNECTIONS", KnobType::kInt, "4096", 1, 1 << 20, {},
   "rpc listener: connections of every kind (control and data) open at once; more are refused at accept, with "
   "a logged reason"},
  {"rpc.max_control_connections", "HAWSER_RPC_MAX_CONTROL_CONNECTIONS", KnobType::kInt, "1024", 1, 1 << 20, {},
   "rpc listener: control connections (and connections still sending their Hello) open at once; more are "
   "refused at accept, with a logged reason"},
  {"rpc.max_control_per_peer", "HAWSER_RPC_MAX_CONTROL_PER_PEER", KnobType::kInt, "256", 1, 1 << 20, {},
   "rpc listener: control connections (and unfinished Hellos) open at once from one peer address; more are "
   "refused at accept, with a logged reason"},
  {"metrics.max_peers", "HAWSER_METRICS_MAX_PEERS", KnobType::kInt, "1024", 1, 1 << 20, {},
   "(transport, peer) pairs counted under their own peer label; later peers share the series of peer \"_other\""},
  {"log.level", "HAWSER_LOG_LEVEL", KnobType::kEnum, "warn", 0, 0, "trace|debug|info|warn|error|off",
   "log level of the process, applied at engine init (the last engine initialized wins)"},
  {"notify.queue_depth", "HAWSER_NOTIFY_QUEUE_DEPTH", KnobType::kInt, "4096", 1, 1 << 20, {},
   "notifications received and not yet drained (getNotifies) this engine holds; a sender whose notification "
   "finds the queue full gets kCapacityExceeded"},
  {"notify.max_message_bytes", "HAWSER_NOTIFY_MAX_MESSAGE_BYTES", KnobType::kSize, "64K", 1, 8 * knob_detail::M, {},
   "largest notification (name + message) this engine sends or accepts"},
  {"signal.probe_interval_ms", "HAWSER_SIGNAL_PROBE_INTERVAL_MS", KnobType::kDurationMs, "200", 10, 60000, {},
   "receiver: how often it asks a sender it waits on, or has a signal or notifying submit in flight from, "
   "whether it is alive (engine.alive); a sender that died is found within this"},
  {"signal.peer_timeout_ms", "HAWSER_SIGNAL_PEER_TIMEOUT_MS", KnobType::kDurationMs, "3000", 100,
   knob_detail::kHour, {},
   "receiver: a sender that does not answer for this long (partition, host gone, frozen) is lost, and what it "
   "had in flight here fails; sender: how long it sends a signal frame again before it gives up"},
  {"signal.expire_ms", "HAWSER_SIGNAL_EXPIRE_MS", KnobType::kDurationMs, "120000", 10, 7 * 24 * knob_detail::kHour,
   {}, "receiver: a signal nobody waits for, with nothing in flight, is dropped this long after it last changed"},
  {"signal.submit_deadline_ms", "HAWSER_SIGNAL_SUBMIT_DEADLINE_MS", KnobType::kDurationMs, "300000", 10,
   7 * 24 * knob_detail::kHour, {},
   "receiver: a submit with a signal or notification whose outcome has not come this long after it was "
   "announced ends here as failed (kTimeout)"},
  {"signal.max_signals", "HAWSER_SIGNAL_MAX_SIGNALS", KnobType::kSize, "65536", 1, 1 << 24, {},
   "receiver: signals held at once (from every sender); when full, the oldest one nobody waits for goes, "
   "and a new one is refused (its waiter fails with reason OVERFLOW) when none can"},
  // ---- metadata -----------------------------------------------------------------------------------------------------
  {"file_segments", "HAWSER_FILE_SEGMENTS", KnobType::kString, "", 0, 0, {},
   "p2p: JSON file holding named file segments (hawser segment --file-segments); empty: none"},
  {"metadata.prefix", "HAWSER_METADATA_PREFIX", KnobType::kString, "hawser", 0, 0, {},
   "etcd and http:// metadata key prefix, no trailing '/' (several clusters can share one store)"},
  {"metadata.http_timeout_ms", "HAWSER_METADATA_HTTP_TIMEOUT_MS", KnobType::kDurationMs, "3000", 10, 600000, {},
   "http:// metadata (Mooncake's HTTP metadata server): deadline of one request"},
  {"metadata.http_poll_ms", "HAWSER_METADATA_HTTP_POLL_MS", KnobType::kDurationMs, "1000", 10, knob_detail::kHour,
   {}, "http:// metadata: how often descriptors this engine fetched are re-read to notice changes"},
  {"etcd.lease_ttl_s", "HAWSER_ETCD_LEASE_TTL_S", KnobType::kInt, "10", 2, 86400, {},
   "lease TTL in seconds: a dead engine's segment vanishes within it"},
  {"etcd.timeout_ms", "HAWSER_ETCD_TIMEOUT_MS", KnobType::kDurationMs, "3000", 10, 600000, {},
   "deadline of one foreground etcd call, retries included"},
  {"etcd.connect_timeout_ms", "HAWSER_ETCD_CONNECT_TIMEOUT_MS", KnobType::kDurationMs, "1000", 10, 600000, {},
   "TCP connect timeout per etcd endpoint attempt"},
  {"etcd.retries", "HAWSER_ETCD_RETRIES", KnobType::kInt, "2", 0, 10, {},
   "extra rounds over all etcd endpoints after the first"},
  {"etcd.backoff_max_ms", "HAWSER_ETCD_BACKOFF_MAX_MS", KnobType::kDurationMs, "2000", 10, 600000, {},
   "cap of the background retry backoff (keepalive, watch)"},
  {"etcd.ca_file", "HAWSER_ETCD_CA_FILE", KnobType::kString, "", 0, 0, {},
   "etcds://: PEM CA bundle that signed etcd's certificate (empty: the system's CAs)"},
  {"etcd.cert_file", "HAWSER_ETCD_CERT_FILE", KnobType::kString, "", 0, 0, {},
   "etcds://: PEM client certificate, for an etcd that checks them (--client-cert-auth)"},
  {"etcd.key_file", "HAWSER_ETCD_KEY_FILE", KnobType::kString, "", 0, 0, {},
   "etcds://: PEM private key of etcd.cert_file"},
  {"etcd.user", "HAWSER_ETCD_USER", KnobType::kString, "", 0, 0, {},
   "etcd user to authenticate as (etcd auth enabled); empty: none"},
  {"etcd.password", "HAWSER_ETCD_PASSWORD", KnobType::kString, "", 0, 0, {},
   "password of etcd.user (never logged; prefer the environment variable or etcd.password_file)", true},
  {"etcd.password_file", "HAWSER_ETCD_PASSWORD_FILE", KnobType::kString, "", 0, 0, {},
   "file whose first line is the password of etcd.user"},
  // ---- gpu ----------------------------------------------------------------------------------------------------------
  {"gpu.cuda_driver", "HAWSER_GPU_CUDA_DRIVER", KnobType::kString, "libcuda.so.1", 0, 0, {},
   "CUDA driver library loaded at init (once per process) to find and move GPU memory; absent: host memory only"},
  {"gpu.copy_mechanism", "HAWSER_GPU_COPY_MECHANISM", KnobType::kEnum, "auto", 0, 0, "auto|kernel|copy_engine|per_run",
   "how a window of GPU runs is copied (nvlink, tcp and file staging): hawser's gather/scatter kernel (one launch, "
   "SMs), the driver's batched copy (cuMemcpyBatchAsync, copy engines), one cuMemcpyAsync per run, or auto: the "
   "kernel when the window's runs average under gpu.copy_kernel_below, else per run"},
  {"gpu.copy_max_ctas", "HAWSER_GPU_COPY_MAX_CTAS", KnobType::kInt, "32", 0, 65535, {},
   "most CTAs (thread blocks, at most one SM each) one launch of the copy kernel uses, leaving the rest of the GPU "
   "to inference; 0: as many as the window has pieces"},
  {"gpu.copy_kernel_below", "HAWSER_GPU_COPY_KERNEL_BELOW", KnobType::kSize, "1M", 0, 16 * knob_detail::G, {},
   "gpu.copy_mechanism=auto: windows whose runs average fewer bytes than this go to the copy kernel, others to "
   "per-run copies on the copy engines"},
  // ---- nvlink -------------------------------------------------------------------------------------------------------
  {"nvlink.streams", "HAWSER_NVLINK_STREAMS", KnobType::kInt, "4", 1, 32, {},
   "CUDA streams (each with its own thread) per local GPU that nvlink copies run on"},
  {"nvlink.stripe_size", "HAWSER_NVLINK_STRIPE_SIZE", KnobType::kSize, "64M", 64 * knob_detail::K, knob_detail::G, {},
   "bytes per nvlink copy: a larger request is striped over the streams in pieces of this size (smaller pieces "
   "cost a wake-up each: on an H200 8M stripes ran at 0.33-0.85 of one cuMemcpyAsync, 64M at 0.99-1.10)"},
  {"nvlink.stream_depth", "HAWSER_NVLINK_STREAM_DEPTH", KnobType::kInt, "4", 1, 1024, {},
   "copies (windows of runs) queued on one stream before its thread waits for the oldest"},
  {"nvlink.plan_cache", "HAWSER_NVLINK_PLAN_CACHE", KnobType::kSize, "64M", 0, 16 * knob_detail::G, {},
   "device memory per engine for prepared plans' run lists kept on the GPU: a window of a plan posted again is "
   "launched from its kept list with no per-block work on the host (24 bytes a block of up to 64 KiB); 0: none kept"},
  {"nvlink.spin_wait", "HAWSER_NVLINK_SPIN_WAIT", KnobType::kBool, "true", 0, 0, {},
   "a stream's thread polls for its copies' ends, issuing what arrives meanwhile (a CPU core busy while copies "
   "are in flight, none when idle); false: it sleeps in the driver until the oldest is done (on an H200 a 32 KiB "
   "KV request ran at 0.43 of a contiguous copy sleeping, 0.50 polling)"},
  {"nvlink.issue_inline", "HAWSER_NVLINK_ISSUE_INLINE", KnobType::kBool, "true", 0, 0, {},
   "a group of copies posted while its stream is idle is issued (checked and launched) by the posting thread, its "
   "GPU context restored after; the stream's thread is woken only to see it end, while the GPU copies. false: "
   "every group is handed to the stream's thread (on an H200 the hand-over cost 40-400 us a request)"},
  {"nvlink.socket_dir", "HAWSER_NVLINK_SOCKET_DIR", KnobType::kString, "", 0, 0, {},
   "where an owner's local socket lives (its region table, a pidfd and the file descriptors of its CUDA virtual "
   "memory passed to peers of this host): empty: the abstract namespace (peers must share the network namespace); "
   "else a directory both sides see (e.g. a volume two containers mount)"},
  // ---- tcp ----------------------------------------------------------------------------------------------------------
  {"tcp.connections", "HAWSER_TCP_CONNECTIONS", KnobType::kInt, "2", 1, 64, {},
   "data connections per peer"},
  {"tcp.home_connections", "HAWSER_TCP_HOME_CONNECTIONS", KnobType::kBool, "true", 0, 0, {},
   "while several threads submit to one peer, each thread's slices go to a connection of its own, so a "
   "thread's batches stay with one io thread and one target thread; a lone thread spreads its slices over all "
   "connections (false: every thread spreads, round-robin)"},
  {"tcp.home_window_ms", "HAWSER_TCP_HOME_WINDOW_MS", KnobType::kDurationMs, "50", 1, knob_detail::kHour, {},
   "with tcp.home_connections: threads count as submitting to one peer at once while a thread other than the "
   "last one posted to it within this long"},
  {"tcp.home_slack", "HAWSER_TCP_HOME_SLACK", KnobType::kSize, "4M", 0, knob_detail::G, {},
   "with tcp.home_connections: a slice goes to the least loaded connection instead of its thread's own when "
   "that one carries more than this many bytes beyond it"},
  {"tcp.slice_size", "HAWSER_TCP_SLICE_SIZE", KnobType::kSize, "1M", 4 * knob_detail::K, knob_detail::G, {},
   "bytes per TCP slice (at most tcp.max_frame)"},
  {"tcp.group_bytes", "HAWSER_TCP_GROUP_BYTES", KnobType::kSize, "1M", 0, knob_detail::G, {},
   "consecutive slices of one post to one peer (one direction, one memory kind at each end) go as one frame of "
   "many runs of up to this many bytes (capped by the slice size), for a peer that serves such frames; 0 = every "
   "slice its own request"},
  {"tcp.inflight", "HAWSER_TCP_INFLIGHT", KnobType::kInt, "64", 1, 65536, {},
   "unanswered requests (slices or frames of many runs) per connection"},
  {"tcp.timeout_ms", "HAWSER_TCP_TIMEOUT_MS", KnobType::kDurationMs, "5000", 10, knob_detail::kHour, {},
   "no progress this long with slices outstanding: the connection's tasks FAIL (also the target's stall bound and "
   "the keepalive interval of data connections)"},
  {"tcp.connect_timeout_ms", "HAWSER_TCP_CONNECT_TIMEOUT_MS", KnobType::kDurationMs, "3000", 10, knob_detail::kHour,
   {}, "bound of one connect + Hello"},
  {"tcp.io_threads", "HAWSER_TCP_IO_THREADS", KnobType::kInt, "2", 1, 16, {},
   "initiator epoll threads (connections are shared out among them)"},
  {"tcp.sock_buf", "HAWSER_TCP_SOCK_BUF", KnobType::kSize, "0", 0, knob_detail::G, {},
   "SO_SNDBUF/SO_RCVBUF of data sockets; 0 = kernel autotuning (and tcp.loopback_send_buf)"},
  {"tcp.loopback_send_buf", "HAWSER_TCP_LOOPBACK_SEND_BUF", KnobType::kSize, "256K", 0, knob_detail::G, {},
   "SO_SNDBUF of data sockets whose peer is this host over loopback, while tcp.sock_buf is 0 (the kernel "
   "doubles it, capped by net.core.wmem_max): the receiver copies the bytes out while they are still in the CPU "
   "caches, where autotuning lets 4 MiB queue (docs/tcp.md); 0 = kernel autotuning"},
  {"tcp.max_frame", "HAWSER_TCP_MAX_FRAME", KnobType::kSize, "64M", 4 * knob_detail::K, knob_detail::G, {},
   "largest payload the target accepts; published to peers"},
  {"tcp.gpu_staging_buffers", "HAWSER_TCP_GPU_STAGING_BUFFERS", KnobType::kInt, "16", 2, 4096, {},
   "pinned staging slots of tcp.slice_size bytes for GPU memory, per side: the target's, and the initiator's "
   "(shared out among tcp.io_threads, at least 2 each)"},
  {"tcp.gpu_poll_copies", "HAWSER_TCP_GPU_POLL_COPIES", KnobType::kBool, "true", 0, 0, {},
   "while GPU staging copies are in flight and its sockets are quiet, an initiator io thread polls both, "
   "receiving the next payload while a copy runs (false: it waits for the oldest copy, the sockets unread "
   "meanwhile); either way the thread spins while copies run"},
  // ---- shm ----------------------------------------------------------------------------------------------------------
  {"shm.threads", "HAWSER_SHM_THREADS", KnobType::kInt, "0", 0, 64, {},
   "copy threads (memcpy through shared mappings, process_vm_readv/writev otherwise); 0: min(4, CPUs)"},
  {"shm.split_bytes", "HAWSER_SHM_SPLIT_BYTES", KnobType::kSize, "512K", 4 * knob_detail::K, knob_detail::G, {},
   "a task is cut into pieces of at most this many bytes, copied in parallel by the copy threads"},
  {"shm.inline_bytes", "HAWSER_SHM_INLINE_BYTES", KnobType::kSize, "4M", 0, knob_detail::G, {},
   "a submit (or a block request's first window) of at most this many bytes is copied by the submitting thread "
   "itself, whole (not cut, no hand-off to the copy threads); the submit returns once it is copied, so this "
   "bounds the time a submit takes. Larger ones go to the copy threads. 0: always the copy threads"},
  {"shm.max_iov", "HAWSER_SHM_MAX_IOV", KnobType::kInt, "1024", 1, 1024, {},
   "runs (slices of the tasks of one prepare, e.g. a block request's window) one process_vm_readv/writev call "
   "moves together, at most shm.split_bytes in all (1: a call per run)"},
  {"shm.socket_dir", "HAWSER_SHM_SOCKET_DIR", KnobType::kString, "", 0, 0, {},
   "where a target's local socket (fds passed to its peers of this host) lives: empty: the abstract namespace "
   "(peers must share the network namespace); else a directory both sides see (e.g. a volume two containers mount)"},
  {"shm.shared_mappings", "HAWSER_SHM_SHARED_MAPPINGS", KnobType::kBool, "true", 0, 0, {},
   "map a peer's shareable memory (memfd, shared files, hawser::allocateHostMemory) once and copy with memcpy; "
   "false: cross-memory attach (process_vm_readv/writev) for everything"},
  // ---- rdma ---------------------------------------------------------------------------------------------------------
  {"rdma.verbs_lib", "HAWSER_RDMA_VERBS_LIB", KnobType::kString, "libibverbs.so.1", 0, 0, {},
   "verbs library loaded at run time"},
  {"rdma.devices", "HAWSER_RDMA_DEVICES", KnobType::kString, "", 0, 0, {},
   "comma-separated NIC names to use (empty: all)"},
  {"rdma.gid_index", "HAWSER_RDMA_GID_INDEX", KnobType::kInt, "-1", -1, 255, {},
   "RoCE GID index override (-1: auto, RoCE v2 IPv4-mapped first)"},
  {"rdma.qps_per_peer", "HAWSER_RDMA_QPS_PER_PEER", KnobType::kInt, "2", 1, 64, {},
   "RC QPs per (local NIC, peer NIC)"},
  {"rdma.max_wr", "HAWSER_RDMA_MAX_WR", KnobType::kInt, "256", 1, 65536, {},
   "outstanding work requests per QP (capped by the device)"},
  {"rdma.slice_size", "HAWSER_RDMA_SLICE_SIZE", KnobType::kSize, "64K", 1, knob_detail::G, {},
   "bytes per work request"},
  {"rdma.retry_limit", "HAWSER_RDMA_RETRY_LIMIT", KnobType::kInt, "8", 0, 1000, {},
   "retries of a failed slice on other QPs/NICs before FAILED"},
  {"rdma.workers", "HAWSER_RDMA_WORKERS", KnobType::kInt, "0", 0, 64, {},
   "CQ-polling threads (0: min(NICs, 4))"},
  {"rdma.cq_entries", "HAWSER_RDMA_CQ_ENTRIES", KnobType::kInt, "16384", 16, 1 << 22, {},
   "CQ size per NIC (capped by the device)"},
  {"rdma.mtu", "HAWSER_RDMA_MTU", KnobType::kInt, "4096", 256, 4096, {},
   "upper bound on the path MTU"},
  {"rdma.qp_timeout", "HAWSER_RDMA_QP_TIMEOUT", KnobType::kInt, "14", 0, 31, {},
   "local ACK timeout exponent (4.096 us x 2^n)"},
  {"rdma.qp_retry_cnt", "HAWSER_RDMA_QP_RETRY_CNT", KnobType::kInt, "7", 0, 7, {},
   "transport retries"},
  {"rdma.qp_rnr_retry", "HAWSER_RDMA_QP_RNR_RETRY", KnobType::kInt, "7", 0, 7, {},
   "RNR retries (7 = infinite)"},
  {"rdma.qp_min_rnr_timer", "HAWSER_RDMA_QP_MIN_RNR_TIMER", KnobType::kInt, "12", 0, 31, {},
   "minimal RNR NAK timer (12 = 0.64 ms)"},
  {"rdma.traffic_class", "HAWSER_RDMA_TRAFFIC_CLASS", KnobType::kInt, "0", 0, 255, {},
   "RoCE GRH traffic class (DSCP << 2)"},
  {"rdma.service_level", "HAWSER_RDMA_SERVICE_LEVEL", KnobType::kInt, "0", 0, 15, {},
   "IB service level / RoCE priority"},
  {"rdma.hop_limit", "HAWSER_RDMA_HOP_LIMIT", KnobType::kInt, "64", 1, 255, {},
   "RoCE v2 GRH hop limit"},
  {"rdma.pretouch_threshold", "HAWSER_RDMA_PRETOUCH_THRESHOLD", KnobType::kSize, "4G", 0, 64 * knob_detail::T, {},
   "regions this large are pre-faulted before registration"},
  {"rdma.pretouch_threads", "HAWSER_RDMA_PRETOUCH_THREADS", KnobType::kInt, "8", 1, 256, {},
   "threads that pre-fault (capped by the CPU count)"},
  {"rdma.relaxed_ordering", "HAWSER_RDMA_RELAXED_ORDERING", KnobType::kBool, "true", 0, 0, {},
   "register memory with IBV_ACCESS_RELAXED_ORDERING when available"},
  {"rdma.connect_timeout_ms", "HAWSER_RDMA_CONNECT_TIMEOUT_MS", KnobType::kDurationMs, "5000", 1, 600000, {},
   "QP handshake RPC timeout"},
  {"rdma.poll_spin_us", "HAWSER_RDMA_POLL_SPIN_US", KnobType::kInt, "50", 0, 1000000, {},
   "microseconds a CQ worker busy-polls before it sleeps on the channel"},
  {"rdma.flush_timeout_ms", "HAWSER_RDMA_FLUSH_TIMEOUT_MS", KnobType::kDurationMs, "2000", 1, 600000, {},
   "after a NIC's fatal or CQ error: wait this long for its flushes, then retry its slices elsewhere"},
  // ---- file ---------------------------------------------------------------------------------------------------------
  {"file.engine", "HAWSER_FILE_ENGINE", KnobType::kEnum, "auto", 0, 0, "auto|uring|posix",
   "file I/O engine: auto (io_uring when available), uring (required) or posix"},
  {"file.io_depth", "HAWSER_FILE_IO_DEPTH", KnobType::kInt, "32", 1, 4096, {},
   "io_uring operations in flight at once; more wait in the engine's queue"},
  {"file.max_io_size", "HAWSER_FILE_MAX_IO_SIZE", KnobType::kSize, "1M", 4 * knob_detail::K, knob_detail::G, {},
   "largest file I/O (a multiple of 4096); runs of one window are coalesced up to this size"},
  {"file.coalesce", "HAWSER_FILE_COALESCE", KnobType::kBool, "true", 0, 0, {},
   "runs of one window (a block request's, or one submit's) that lie next to each other in a file share large "
   "I/Os (vectored, bounced or staged); false: one I/O per run"},
  {"file.coalesce_gap", "HAWSER_FILE_COALESCE_GAP", KnobType::kSize, "16K", 0, 64 * knob_detail::M, {},
   "reads: runs up to this many bytes apart share an I/O, which reads the gap and drops it (writes coalesce only "
   "runs that touch, and never write a gap)"},
  {"file.direct", "HAWSER_FILE_DIRECT", KnobType::kBool, "true", 0, 0, {},
   "open with O_DIRECT where the file system does it"},
  {"file.fixed_buffers", "HAWSER_FILE_FIXED_BUFFERS", KnobType::kBool, "true", 0, 0, {},
   "io_uring fixed buffers for registered memory: each 64 MiB piece that I/O touches is faulted in and pinned in "
   "the background, then used (registration itself pins nothing)"},
  {"file.fixed_files", "HAWSER_FILE_FIXED_FILES", KnobType::kBool, "true", 0, 0, {},
   "register fds as io_uring fixed files"},
  {"file.sqpoll", "HAWSER_FILE_SQPOLL", KnobType::kBool, "false", 0, 0, {},
   "io_uring SQPOLL kernel thread (burns a core)"},
  {"file.posix_threads", "HAWSER_FILE_POSIX_THREADS", KnobType::kInt, "4", 1, 256, {},
   "pread/pwrite workers"},
  {"file.bounce_buffers", "HAWSER_FILE_BOUNCE_BUFFERS", KnobType::kInt, "0", 0, 4096, {},
   "bounce buffers in the pool (0: file.io_depth)"},
  {"file.cancel_grace_ms", "HAWSER_FILE_CANCEL_GRACE_MS", KnobType::kDurationMs, "1000", 0, knob_detail::kHour, {},
   "a cancelled I/O not ended by then is quarantined"},
  {"file.cufile", "HAWSER_FILE_CUFILE", KnobType::kEnum, "auto", 0, 0, "auto|on|off",
   "GPU memory <-> files through cuFile: auto = when libcufile loads and registers the file, on = cuFile or fail, "
   "off = io_uring/POSIX into pinned staging buffers"},
  {"file.cufile_lib", "HAWSER_FILE_CUFILE_LIB", KnobType::kString, "libcufile.so.0", 0, 0, {},
   "cuFile library loaded at run time"},
  {"file.cufile_batch", "HAWSER_FILE_CUFILE_BATCH", KnobType::kInt, "128", 1, 256, {},
   "entries per cuFile batch, at most the library's limit (properties.io_batchsize, 128 by default)"},
  {"file.gpu_staging_buffers", "HAWSER_FILE_GPU_STAGING_BUFFERS", KnobType::kInt, "16", 2, 4096, {},
   "pinned staging slots (file.max_io_size + 8K each) for GPU memory when cuFile is not used"},
  // ---- python binding -----------------------------------------------------------------------------------------------
  {"python.sync_timeout_ms", "HAWSER_PYTHON_SYNC_TIMEOUT_MS", KnobType::kDurationMs, "30000", 1, 86400000, {},
   "base timeout of a sync call / async batch (unset: MC_TRANSFER_TIMEOUT seconds when that is set)"},
  {"python.sync_timeout_ns_per_byte", "HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", KnobType::kInt, "1", 0, 1000000, {},
   "added to the timeout per byte of the batch (1 = 1 s per GB, as Mooncake)"},
  {"python.cancel_wait_ms", "HAWSER_PYTHON_CANCEL_WAIT_MS", KnobType::kDurationMs, "5000", 0, knob_detail::kHour, {},
   "after a timeout's cancel, how long to wait for the tasks to end before keeping the batch for later freeing"},
  {"python.managed_pool_size", "HAWSER_PYTHON_MANAGED_POOL_SIZE", KnobType::kSize, "64M", knob_detail::M,
   knob_detail::T, {}, "bytes per managed-buffer pool"},
};
// clang-format on

inline constexpr std::span<const Knob> knobs() { return kKnobs; }

constexpr const Knob* findKnob(std::string_view key) {
  for (const Knob& k : kKnobs)
    if (k.key == key) return &k;
  return nullptr;
}

constexpr const Knob* findKnobByEnv(std::string_view env) {
  for (const Knob& k : kKnobs)
    if (k.env == env) return &k;
  return nullptr;
}

// A key of the table, checked when it is compiled: KnobKey k = "tcp.connections".
// `Types` is a bit set of the KnobTypes the reader accepts (the getter's).
// (It keeps the row's index, not a pointer: GCC's UBSan instrumentation makes
// a pointer comparison inside a consteval constructor non-constant.)
constexpr size_t knobIndex(std::string_view key) {
  for (size_t i = 0; i < std::size(kKnobs); ++i)
    if (kKnobs[i].key == key) return i;
  return std::size(kKnobs);
}

template <unsigned Types>
struct TypedKnobKey {
  consteval TypedKnobKey(const char* key) : index(knobIndex(key)) {  // NOLINT: implicit by design
    if (index == std::size(kKnobs)) throw "config key is not in the config table (src/base/config_table.h)";
    if ((Types & (1u << static_cast<unsigned>(kKnobs[index].type))) == 0)
      throw "config key read with a getter of the wrong type (see its KnobType in src/base/config_table.h)";
  }
  const Knob& row() const { return kKnobs[index]; }
  size_t index;
};

constexpr unsigned knobBit(KnobType t) { return 1u << static_cast<unsigned>(t); }
using IntKey = TypedKnobKey<knobBit(KnobType::kInt) | knobBit(KnobType::kDurationMs)>;
using SizeKey = TypedKnobKey<knobBit(KnobType::kSize)>;
using BoolKey = TypedKnobKey<knobBit(KnobType::kBool)>;
using StringKey = TypedKnobKey<knobBit(KnobType::kString) | knobBit(KnobType::kEnum)>;

// "int", "size", "bool", "string", "enum", "duration_ms".
std::string_view knobTypeName(KnobType t);
// The default / range as `hawser config` prints them ("64M", "4K..1G",
// "auto|uring|posix"; "" for bool and string).
std::string knobDefaultText(const Knob& k);
std::string knobRangeText(const Knob& k);
// What a value must be: "an integer in [1, 64]", "one of auto, uring, posix".
std::string knobExpected(const Knob& k);

// The value of a knob after parsing.
struct KnobValue {
  int64_t number = 0;  // kInt, kSize, kDurationMs, kBool (0/1)
  std::string text;    // kString, kEnum: the value
};

// Parses `text` as `k` says and checks its range. kInvalidArgument names the
// key, its environment variable, the value, where it came from (`origin`:
// "the environment", "EngineOptions::config") and what was expected.
Status parseKnob(const Knob& k, std::string_view text, std::string_view origin, KnobValue& out);

}  // namespace hawser
