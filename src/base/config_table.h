// The base rows of the config system: the engine's tunables and those of the
// layers under it that are no transport's (rpc, metadata and etcd, gpu,
// logging, notifications, signals) and of the Python binding. Each
// transport's rows live in its own folder (src/transport/<name>/<name>_config.h),
// the machinery (row, parser, typed keys) in base/knob.h, the registry of
// every table of the build in base/knob_registry.h. `hawser config --markdown`
// prints every table; docs/config.md and README.md hold its output, and the
// ctest docs.config_tables fails when they drift.
//
// Components read these knobs through Config's typed getters (base/config.h)
// with a key that is checked against this table at compile time (BaseKey):
// an unknown key, or a getter of the wrong type, does not build.
//
// Adding a knob: one line below, build `hawser`, then
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
// to regenerate the docs' tables (see cmake/config_docs.cmake; the ctest
// docs.config_tables, tests/config_docs.cmake, fails while they drift).
#pragma once

#include "base/knob.h"

namespace hawser {

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
  {"batch.recycle", "HAWSER_BATCH_RECYCLE", KnobType::kBool, "true", 0, 0, {},
   "freed batches of up to 1024 tasks (4 at most a submitting thread's shard) are kept and handed out again, with "
   "the segment views and local regions their submits resolved while those stay current: no allocation, lock or "
   "shared reference count a small batch (false: each batch made anew)"},
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
  {"host_memory.huge_pages", "HAWSER_HOST_MEMORY_HUGE_PAGES", KnobType::kBool, "true", 0, 0, {},
   "allocateHostMemory backs each whole 2 MiB of an allocation with a huge page at once (MADV_COLLAPSE, Linux 6.1; "
   "best effort, whatever transparent_hugepage/shmem_enabled says): copies through it, here and in shm peers, "
   "run on contiguous memory and miss the TLB less (false: 4 KiB pages, each backed at its first touch)"},
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
  // ---- python binding -----------------------------------------------------------------------------------------------
  {"python.sync_timeout_ms", "HAWSER_PYTHON_SYNC_TIMEOUT_MS", KnobType::kDurationMs, "30000", 1, 86400000, {},
   "base timeout of a sync call / async batch (unset: MC_TRANSFER_TIMEOUT seconds when that is set)"},
  {"python.sync_timeout_ns_per_byte", "HAWSER_PYTHON_SYNC_TIMEOUT_NS_PER_BYTE", KnobType::kInt, "1", 0, 1000000, {},
   "added to the timeout per byte of the batch (1 = 1 s per GB, as Mooncake)"},
  {"python.cancel_wait_ms", "HAWSER_PYTHON_CANCEL_WAIT_MS", KnobType::kDurationMs, "5000", 0, knob_detail::kHour, {},
   "after a cancel (a timeout's, cancel_transfer, a NIXL release in flight), how long to wait for the tasks to end "
   "before keeping the batch for later freeing (a release: raising nixlRepostActiveError)"},
  {"python.managed_pool_size", "HAWSER_PYTHON_MANAGED_POOL_SIZE", KnobType::kSize, "64M", knob_detail::M,
   knob_detail::T, {}, "bytes per managed-buffer pool"},
};
// clang-format on

// Keys of the base table, by the getter that reads them.
using IntKey = TableKey<kKnobs, kIntKnobs>;
using SizeKey = TableKey<kKnobs, kSizeKnobs>;
using BoolKey = TableKey<kKnobs, kBoolKnobs>;
using StringKey = TableKey<kKnobs, kStringKnobs>;

}  // namespace hawser
