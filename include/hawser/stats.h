// hawser — what an engine reports about itself: counters per transport,
// and a diagnosis per transport (why it is or is not installed, what it
// moves, what it found on this host).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hawser {

// Named monotonic counters (or gauges, where the name says "open"/"inflight").
using Counters = std::vector<std::pair<std::string, uint64_t>>;

struct TransportStats {
  std::string transport;  // "tcp", "file", ...
  Counters counters;
};

// Metrics in the shape of the Prometheus data model (docs/metrics.md lists
// every family). Names follow Prometheus conventions: a "hawser_" prefix,
// base units (bytes, seconds), counters ending in "_total".
enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

// One labelled series of a family.
struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;  // in the family's label order
  double value = 0;  // counter, gauge
  // Histogram: cumulative counts, one per bound of the family and a last one
  // for +Inf (== count); the sum of the observed values.
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  double sum = 0;
};

struct MetricFamily {
  std::string name;  // "hawser_bytes_total", "hawser_task_duration_seconds"
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<double> bounds;  // histogram: upper bounds of the finite buckets, ascending
  std::vector<MetricSample> samples;  // sorted by label values
};

struct EngineStats {
  Counters engine;                         // batches, tasks, bytes by outcome
  std::vector<TransportStats> transports;  // one per installed transport
  std::vector<MetricFamily> metrics;       // sorted by name (docs/metrics.md)
};

// The Prometheus text exposition format (version 0.0.4) of `families`:
// "# HELP" and "# TYPE" lines, then one line per sample (histograms as
// _bucket{le=...}, _sum, _count), label values escaped. Serve it with
// Content-Type kPrometheusContentType.
std::string prometheusText(const std::vector<MetricFamily>& families);
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// A device or I/O facility a transport found on this host, as fields that
// programs read without parsing words (the diagnosis's facts say the same
// for people; `hawser doctor --json` prints both). Which fields a kind fills
// is said per field; the others keep their defaults.
struct DeviceRecord {
  enum class Kind : uint8_t {
    kNic,      // an RDMA NIC (transport rdma)
    kGpu,      // a CUDA GPU (transport nvlink)
    kIoUring,  // the kernel's io_uring (transport file)
    kCuFile,   // NVIDIA's cuFile library, GPUDirect Storage (transport file)
  };
  Kind kind = Kind::kNic;
  // NIC: the ibverbs device ("mlx5_0"); GPU: "cuda:<ordinal>"; io_uring:
  // "io_uring"; cuFile: the library's path or name (file.cufile_lib).
  std::string name;
  // NIC: the engine's index of a NIC in use (the "nic<i>" of its counters),
  // -1 when not used; GPU: the CUDA ordinal; else -1.
  int index = -1;
  // NIC, GPU: the NUMA node the device hangs off (sysfs); -1 unknown.
  int numa_node = -1;
  // GPU: the PCI bus id, lower case ("0000:3b:00.0"); "" when the driver
  // does not say. Others: "".
  std::string pci_bus_id;
  // NIC: the port chosen (1-based); 0 when it has no active port. Others: 0.
  int port = 0;
  // NIC: the link layer, "InfiniBand" | "Ethernet".
  // io_uring: "usable" | "unavailable" (the kernel refuses it; reason says
  //   how) | "off" (file.engine=posix) | "absent" (not in this build).
  // cuFile: "gds" (GPUDirect expected or running) | "compat" (compatibility
  //   mode only: its own POSIX I/O and bounce buffers) | "absent" (the
  //   library does not load) | "off" (file.cufile=off).
  // GPU: "".
  std::string mode;
  // Whether the transport uses it: a NIC it opened; a GPU it moves memory
  // of; io_uring as the file engine; cuFile for GPU memory <-> files.
  bool used = false;
  std::string reason;  // why not used ("" when used)
};

// "nic", "gpu", "io_uring", "cufile": the kind's name in `hawser doctor --json`.
inline const char* deviceKindName(DeviceRecord::Kind k) {
  switch (k) {
    case DeviceRecord::Kind::kNic: return "nic";
    case DeviceRecord::Kind::kGpu: return "gpu";
    case DeviceRecord::Kind::kIoUring: return "io_uring";
    case DeviceRecord::Kind::kCuFile: return "cufile";
  }
  return "unknown";
}

struct TransportDiagnosis {
  std::string transport;
  bool installed = false;
  std::string reason;  // why not installed ("" when installed)
  int cost_rank = 0;   // lower is preferred when several can serve a request
  std::string moves;   // what it can move, e.g. "memory segments; local host memory; remote host memory"
  std::vector<std::pair<std::string, std::string>> facts;  // what it found (NICs, io_uring, ...), in words
  std::vector<DeviceRecord> devices;  // what it found, typed: rdma's NICs, nvlink's GPUs, file's io_uring and cuFile
};

// Which transport the engine picks for one kind of request, and why.
struct RouteExplanation {
  std::string transport;  // "" when none can serve it
  std::string why;        // the rule that decided, and each candidate refused with its reason
  // A fallback (docs/routes.md): the cheaper transport that declined the
  // peer, the reason's name ("other_pid_namespace", ...: the `reason` label
  // of hawser_route_fallbacks_total) and its words. Empty when none.
  std::string fallback_from;
  std::string fallback_reason;
  std::string fallback_detail;
};

}  // namespace hawser
