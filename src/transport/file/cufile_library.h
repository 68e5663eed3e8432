// The cuFile (GPUDirect Storage) library for the file transport: loaded at
// run time (dlopen, no header or link-time dependency), its entry points
// resolved and its driver opened once per process and path
// (CufileLibrary::load), and the facts the transport and the doctor need:
// GPUDirect or compat mode and why, the largest batch, the version. Also
// what can be known without opening the driver (which takes about a
// second): probeCufile() for the doctor, forecastCufile() for routing.
// The batch I/O engine over it is cufile_engine.h.
#pragma once

#include <string>

#include "base/route.h"
#include "transport/file/cufile_api.h"

namespace hawser::file {

class CufileLibrary {
 public:
  // Loads `path` (dlopen) and opens the cuFile driver, once per path and
  // process (later calls return the loaded one). nullptr with `why` set
  // when it cannot be loaded or opened. Opening the driver takes half a
  // second to a second: the file transport calls this on a thread of its
  // own, at the first transfer that needs it.
  static const CufileLibrary* load(const std::string& path, std::string& why);

  const cufile::Api& api() const { return api_; }
  const std::string& path() const { return path_; }
  // GPUDirect (the nvidia-fs kernel driver serves I/O) or compat mode (the
  // library's own POSIX I/O through host bounce buffers); see mode().
  bool gds() const { return gds_; }
  // "gds (...)" or "compat (...)": the mode and the evidence it was decided on.
  const std::string& mode() const { return mode_; }
  // GPUDirect as a route (Transport::variantDeclines): kNone in gds mode,
  // else compat_mode and why.
  RouteDecline decline() const;
  unsigned maxBatch() const { return max_batch_; }
  int version() const { return version_; }

  // "cuFileX: <name of the error> (5027)" (+ the CUDA error for 5011).
  static std::string describe(const cufile::Error& e);

 private:
  CufileLibrary() = default;
  cufile::Api api_{};
  std::string path_;
  bool gds_ = false;
  std::string mode_;
  std::string compat_cause_;  // why compat mode ("" in gds mode)
  unsigned max_batch_ = 128;
  int version_ = 0;
};

// What the doctor says of cuFile without opening its driver (which takes
// about a second): whether `path` loads, whether nvidia-fs is there, and
// whether files under `dir` have the udev record cuFileHandleRegister needs.
struct CufileProbe {
  std::string library;  // "loads (...)" or "not loadable: ..."
  std::string nvidia_fs;
  std::string udev;
};
CufileProbe probeCufile(const std::string& path, const std::string& dir);

// Whether GPUDirect is to be expected of the library at `path`, without
// opening its driver (which takes a second): where it is open in this
// process, its decline(); else not_installed where it does not load, and
// compat_mode where it would run in compat mode whatever its driver reports
// (CUFILE_FORCE_COMPAT_MODE, no nvidia-fs kernel module). kNone: GPUDirect
// expected; the driver's open at the first transfer confirms it or not.
RouteDecline forecastCufile(const std::string& path);

}  // namespace hawser::file
