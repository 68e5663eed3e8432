// `hawser doctor`: what this host has — transports that install here, RDMA
// NICs (and why each is or is not used), GPUs, GPUDirect Storage, io_uring,
// CMA, and whether the metadata service answers.
#include <dlfcn.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "hawser/engine.h"
#include "metadata/store.h"
#include "tools/commands.h"
#if HAWSER_HAVE_RDMA
#include "transport/rdma/rdma_probe.h"
#endif

namespace hawser::tools {

namespace {

using json = nlohmann::json;

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

json probeUring() {
  json j;
  io_uring_params p{};
  long fd = ::syscall(__NR_io_uring_setup, 4, &p);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    j["available"] = true;
  } else {
    j["available"] = false;
    j["reason"] = fmt::format("io_uring_setup: {}", std::strerror(errno));
  }
  std::string dis = readFirstLine("/proc/sys/kernel/io_uring_disabled");
  if (!dis.empty()) j["kernel.io_uring_disabled"] = dis;
  return j;
}

json probeGpus() {
  json j;
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    j["count"] = 0;
    j["reason"] = "libcuda.so.1 not found (no NVIDIA driver)";
    return j;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(h, "cuDeviceGetCount"));
  int n = 0;
  if (!init || !count) {
    j["reason"] = "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
  } else if (int rc = init(0); rc != 0) {
    j["reason"] = fmt::format("cuInit failed with CUresult {}", rc);
  } else if (count(&n) != 0) {
    j["reason"] = "cuDeviceGetCount failed";
  }
  j["count"] = n;
  return j;
}

json probeGds() {
  json j;
  void* h = ::dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  j["libcufile"] = h != nullptr;
  std::ifstream nvfs("/proc/driver/nvidia-fs/version");
  j["nvidia_fs_driver"] = static_cast<bool>(nvfs);
  if (!h) j["reason"] = "libcufile.so.0 not found: file I/O uses io_uring / POSIX";
  else if (!nvfs) j["reason"] = "no nvidia-fs driver: cuFile would run in compatibility mode";
  return j;
}

int runDoctor(const std::string& metadata, bool as_json) {
  json out;
  out["version"] = "0.1.0";
  out["io_uring"] = probeUring();
  out["gpus"] = probeGpus();
  out["gds"] = probeGds();
  std::string ptrace = readFirstLine("/proc/sys/kernel/yama/ptrace_scope");
  out["cma"] = {{"ptrace_scope", ptrace.empty() ? "absent (no Yama: allowed)" : ptrace}};
  {
    TransferEngine e;
    Status s = e.init("p2p", "doctor", "127.0.0.1", 0);
    out["transports"] = s.ok() ? json(e.transports()) : json(s.toString());
  }
#if HAWSER_HAVE_RDMA
  {
    Config cfg = Config::fromEnv();
    std::string err;
    json nics = json::array();
    for (auto& n : rdma::probeNics(cfg, &err)) {
      nics.push_back({{"name", n.name}, {"used", n.used}, {"reason", n.reason}, {"numa_node", n.numa_node},
                      {"port", n.port}, {"port_state", n.port_state}, {"link_layer", n.link_layer},
                      {"gid_index", n.gid_index}, {"gid", n.gid}, {"gid_type", n.gid_type}, {"lid", n.lid},
                      {"active_mtu", n.active_mtu}});
    }
    out["rdma"] = {{"nics", nics}};
    if (!err.empty()) out["rdma"]["reason"] = err;
    else if (nics.empty()) out["rdma"]["reason"] = "no RDMA device listed by ibverbs";
  }
#else
  out["rdma"] = {{"reason", "this build has no RDMA transport"}};
#endif
  {
    Config cfg = Config::fromEnv();
    std::unique_ptr<MetadataStore> store;
    Status s = makeMetadataStore(metadata, cfg, nullptr, store);
    std::vector<SegmentDesc> segs;
    if (s.ok()) s = store->start("doctor-probe", nullptr);
    if (s.ok()) s = store->listSegments(segs);
    if (store) store->stop();
    out["metadata"] = {{"uri", metadata}, {"reachable", s.ok()}};
    if (!s.ok()) out["metadata"]["error"] = s.toString();
    else out["metadata"]["segments"] = segs.size();
  }
  if (as_json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("hawser {}\n", out["version"].get<std::string>());
  fmt::print("transports installed: {}\n", out["transports"].dump());
  fmt::print("io_uring: {}\n", out["io_uring"]["available"].get<bool>() ? "available" : out["io_uring"]["reason"].get<std::string>());
  fmt::print("GPUs: {}{}\n", out["gpus"]["count"].get<int>(),
             out["gpus"].contains("reason") ? " (" + out["gpus"]["reason"].get<std::string>() + ")" : "");
  fmt::print("GPUDirect Storage: {}\n", out["gds"].contains("reason") ? out["gds"]["reason"].get<std::string>() : "available");
  fmt::print("CMA (process_vm_*): ptrace_scope {}\n", out["cma"]["ptrace_scope"].get<std::string>());
  if (out["rdma"].contains("nics")) {
    for (auto& n : out["rdma"]["nics"])
      fmt::print("RDMA NIC {}: {} (port {} {}, {}, numa {}, gid[{}] {} {})\n", n["name"].get<std::string>(),
                 n["used"].get<bool>() ? "used" : "not used: " + n["reason"].get<std::string>(), n["port"].get<int>(),
                 n["port_state"].get<std::string>(), n["link_layer"].get<std::string>(), n["numa_node"].get<int>(),
                 n["gid_index"].get<int>(), n["gid"].get<std::string>(), n["gid_type"].get<std::string>());
  }
  if (out["rdma"].contains("reason")) fmt::print("RDMA: {}\n", out["rdma"]["reason"].get<std::string>());
  fmt::print("metadata {}: {}\n", metadata,
             out["metadata"]["reachable"].get<bool>() ? "reachable" : out["metadata"]["error"].get<std::string>());
  return 0;
}

}  // namespace

void addDoctor(CLI::App& app, Commands& cmds) {
  auto metadata = std::make_shared<std::string>("p2p");
  auto as_json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("doctor", "Report what this host has: transports, NICs, GPUs, io_uring, metadata");
  sub->add_option("--metadata", *metadata, "metadata URI to check")->capture_default_str();
  sub->add_flag("--json", *as_json, "print one JSON object");
  sub->callback([&cmds, metadata, as_json] { cmds.run = [metadata, as_json] { return runDoctor(*metadata, *as_json); }; });
}

}  // namespace hawser::tools
