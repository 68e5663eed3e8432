// The cuFile library loaded at run time, its driver opened once per
// process, and what is known of it without opening the driver. See
// cufile_library.h.
#include "transport/file/cufile_library.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "base/log.h"

namespace hawser::file {

namespace {

std::mutex g_lib_mu;
// Loaded, by path; never unloaded (nor is the map destroyed: engines may
// use a library during static destruction).
std::map<std::string, const CufileLibrary*>& g_libs = *new std::map<std::string, const CufileLibrary*>;

const char* errorName(int e) {
  switch (e) {
    case cufile::kSuccess: return "success";
    case cufile::kDriverNotInitialized: return "driver not initialized";
    case cufile::kPlatformNotSupported: return "platform not supported";
    case cufile::kIoNotSupported: return "I/O not supported on this file";
    case cufile::kCudaDriverError: return "CUDA driver error";
    case cufile::kInvalidFileOpenFlag: return "invalid file open flag";
    case cufile::kDioNotSet: return "O_DIRECT not set";
    case cufile::kInvalidValue: return "invalid value";
    case cufile::kMemoryAlreadyRegistered: return "memory already registered";
    case cufile::kMemoryNotRegistered: return "memory not registered";
    case cufile::kPermissionDenied: return "permission denied";
    case cufile::kDriverAlreadyOpen: return "driver already open";
    case cufile::kHandleNotRegistered: return "file handle not registered";
    case cufile::kHandleAlreadyRegistered: return "file handle already registered";
    case cufile::kInternalError: return "internal error";
    default: return "cuFile error";
  }
}

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

bool envTrue(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

constexpr const char* kNvidiaFs = "/proc/driver/nvidia-fs";

// What puts cuFile in compat mode whatever its driver reports ("" when
// nothing does): known without opening the driver.
std::string compatCause() {
  if (envTrue("CUFILE_FORCE_COMPAT_MODE")) return "CUFILE_FORCE_COMPAT_MODE is set";
  if (::access(kNvidiaFs, F_OK) != 0)
    return fmt::format("{} absent: the nvidia-fs kernel module is not loaded", kNvidiaFs);
  return "";
}

// Whether `path` loads ("" when it does; else why not), tried once per
// process and path without opening the driver, and never unloaded.
std::string loadProbe(const std::string& path) {
  static std::mutex mu;
  static auto& probed = *new std::map<std::string, std::string>;
  std::lock_guard lk(mu);
  auto it = probed.find(path);
  if (it == probed.end()) {
    std::string why;
    if (void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE)) {
      dlclose(h);
    } else {
      const char* e = dlerror();
      why = e ? e : "?";
    }
    it = probed.emplace(path, std::move(why)).first;
  }
  return it->second;
}

}  // namespace

std::string CufileLibrary::describe(const cufile::Error& e) {
  if (e.err == cufile::kCudaDriverError)
    return fmt::format("{} ({}; CUresult {})", errorName(e.err), e.err, e.cu_err);
  return fmt::format("{} ({})", errorName(e.err), e.err);
}

const CufileLibrary* CufileLibrary::load(const std::string& path, std::string& why) {
  std::lock_guard lk(g_lib_mu);
  if (auto it = g_libs.find(path); it != g_libs.end()) return it->second;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    why = fmt::format("cuFile library '{}' not loaded: {}", path, e ? e : "?");
    return nullptr;
  }
  auto lib = std::unique_ptr<CufileLibrary>(new CufileLibrary());
  lib->path_ = path;
  cufile::Api& a = lib->api_;
  std::string missing;
  auto need = [&](const char* name, auto& fn) {
    if (!resolve(h, name, fn)) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need("cuFileDriverOpen", a.DriverOpen);
  need("cuFileDriverGetProperties", a.DriverGetProperties);
  need("cuFileHandleRegister", a.HandleRegister);
  need("cuFileHandleDeregister", a.HandleDeregister);
  need("cuFileBufRegister", a.BufRegister);
  need("cuFileBufDeregister", a.BufDeregister);
  need("cuFileBatchIOSetUp", a.BatchIOSetUp);
  need("cuFileBatchIOSubmit", a.BatchIOSubmit);
  need("cuFileBatchIOGetStatus", a.BatchIOGetStatus);
  need("cuFileBatchIOCancel", a.BatchIOCancel);
  need("cuFileBatchIODestroy", a.BatchIODestroy);
  resolve(h, "cuFileGetVersion", a.GetVersion);
  if (!missing.empty()) {
    why = fmt::format("cuFile library '{}' lacks entry points: {}", path, missing);
    return nullptr;  // the handle stays open: harmless, and a later dlopen would find it anyway
  }
  // Once per process and library; it stays open (closing it would pull the
  // driver from under every other engine of the process).
  cufile::Error e = a.DriverOpen();
  if (e.err != cufile::kSuccess && e.err != cufile::kDriverAlreadyOpen) {
    why = fmt::format("cuFile library '{}': cuFileDriverOpen failed: {}", path, describe(e));
    return nullptr;
  }
  if (a.GetVersion) (void)a.GetVersion(&lib->version_);
  cufile::DrvProps props{};
  const bool have_props = a.DriverGetProperties(&props).err == cufile::kSuccess;
  if (have_props && props.max_batch_io_size > 0) lib->max_batch_ = props.max_batch_io_size;
  // Direct (GDS) or compat: the nvidia-fs kernel driver must be loaded and
  // the library must report its version; forced compat mode overrides both.
  const bool nvfs_props = have_props && props.nvfs.major_version > 0;
  lib->compat_cause_ = compatCause();
  if (lib->compat_cause_.empty() && !nvfs_props) lib->compat_cause_ = "the library reports no nvidia-fs driver version";
  if (!lib->compat_cause_.empty()) {
    lib->mode_ = "compat (" + lib->compat_cause_ + ")";
  } else {
    lib->gds_ = true;
    lib->mode_ = fmt::format("gds (nvidia-fs {}.{})", props.nvfs.major_version, props.nvfs.minor_version);
  }
  HLOG_INFO("file: cuFile library '{}' opened (version {}): {}, batches of at most {}", path, lib->version_,
            lib->mode_, lib->max_batch_);
  const CufileLibrary* out = lib.release();
  g_libs[path] = out;
  return out;
}

CufileProbe probeCufile(const std::string& path, const std::string& dir) {
  CufileProbe p;
  {
    std::lock_guard lk(g_lib_mu);
    if (auto it = g_libs.find(path); it != g_libs.end())
      p.library = fmt::format("'{}' open in this process: {}", path, it->second->mode());
  }
  if (p.library.empty()) {
    // Every engine's init asks (the doctor reads what init found).
    const std::string why = loadProbe(path);
    p.library = why.empty()
                    ? fmt::format("'{}' loads (its driver opens at the first transfer between GPU memory and a file)", path)
                    : fmt::format("'{}' not loadable: {}; GPU memory <-> files goes through staging", path, why);
  }
  p.nvidia_fs = ::access(kNvidiaFs, F_OK) == 0
                    ? fmt::format("{} present: GPUDirect possible", kNvidiaFs)
                    : fmt::format("{} absent: cuFile runs in compat mode (POSIX I/O through its host bounce "
                                  "buffers)",
                                  kNvidiaFs);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    p.udev = fmt::format("{}: not probed ({})", dir, std::strerror(errno));
    return p;
  }
  const unsigned maj = major(st.st_dev), min = minor(st.st_dev);
  const std::string rec = fmt::format("/run/udev/data/b{}:{}", maj, min);
  std::ifstream f(rec);
  std::string line;
  bool usage = false;
  while (f && std::getline(f, line)) usage |= line.rfind("E:ID_FS_USAGE=", 0) == 0;
  if (maj == 0) {
    p.udev = fmt::format("{} is on device {}:{} (no block device: tmpfs or similar); cuFile refuses such files "
                         "(5027) and they go through staging",
                         dir, maj, min);
  } else if (usage) {
    p.udev = fmt::format("{} (device {}:{}): udev record {} has ID_FS_USAGE", dir, maj, min, rec);
  } else {
    p.udev = fmt::format(
        "{} (device {}:{}): no udev record {} with E:ID_FS_USAGE=filesystem, so cuFileHandleRegister refuses its "
        "files (5027) and they go through staging (file.cufile=auto) or fail (on). Containers and VMs without udev "
        "need that record (lines I:1, E:ID_FS_USAGE=filesystem, E:ID_FS_TYPE=<fs>, E:DEVTYPE=disk) written by "
        "the administrator before the process starts; hawser never writes it",
        dir, maj, min, rec);
  }
  return p;
}

RouteDecline forecastCufile(const std::string& path) {
  {
    std::lock_guard lk(g_lib_mu);
    if (auto it = g_libs.find(path); it != g_libs.end()) return it->second->decline();
  }
  if (std::string why = loadProbe(path); !why.empty())
    return {RouteReason::kNotInstalled, fmt::format("cuFile library '{}' not loadable: {}", path, why)};
  if (std::string cause = compatCause(); !cause.empty())
    return {RouteReason::kCompatMode, fmt::format("cuFile '{}' would run in compatibility mode ({})", path, cause)};
  return {};
}

RouteDecline CufileLibrary::decline() const {
  if (gds_) return {};
  return {RouteReason::kCompatMode, fmt::format("cuFile '{}' runs in compatibility mode ({})", path_, compat_cause_)};
}

}  // namespace hawser::file
