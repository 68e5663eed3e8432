// cuFile (GPUDirect Storage) for the file transport: the library, loaded at
// run time and its driver opened once per process (CufileLibrary), and an
// IoEngine that runs slices between GPU memory and files through the batch
// API (makeCufileEngine).
//
// The engine's one thread owns every batch: it takes queued ops, fills
// batches of at most `batch` entries (file.cufile_batch, clamped to the
// library's max_batch_io_size) from a pool of handles set up once and reused
// (no cuFileBatchIOSetUp per batch), keeps at most `depth` entries
// (file.io_depth) in flight, and reaps completions with
// cuFileBatchIOGetStatus, matching each event by its cookie (the op's
// one-based cookie), never by position: the library returns them in any
// order. cancel() drops ops not yet submitted (-ECANCELED) and, once every
// unfinished entry of a submitted batch is asked to stop, cancels that batch
// (cuFileBatchIOCancel cancels a whole batch, never one entry); an entry the
// library does not stop completes however it ends, and the file transport's
// watchdog quarantines it meanwhile. A batch handle returns to the pool only
// when every entry has been reported.
//
// Files: addFile(fd) is not used; registerFile() registers a cuFile handle
// (cuFileHandleRegister) and says why when the library refuses (5027 for a
// file system without a udev record, tmpfs, ...). GPU buffers: addMemory()
// queues cuFileBufRegister and returns the buffer's CufileMemory, which ops
// in it carry (IoOp::memory): an entry names the registered buffer (base and
// offset) once it is registered, the address itself before; the op's
// IoOp::device is bound for the batch. removeMemory() returns once the
// buffer is deregistered (cufile_buffers.h: a registration thread of its
// own, and what I/O on a buffer still being registered does).
#pragma once

#include <memory>
#include <string>

#include "base/route.h"
#include "transport/file/cufile_api.h"
#include "transport/file/io_engine.h"

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

class CufileEngine : public IoEngine {
 public:
  // A cuFile handle for `fd` (token for IoOp::file_token), or why not.
  virtual Status registerFile(int fd, int& token) = 0;
  // removeFile(token) deregisters it (no op may use it any more).
  virtual const CufileLibrary& library() const = 0;
};

// `depth`: entries in flight at most; `batch`: entries per batch at most.
std::unique_ptr<CufileEngine> makeCufileEngine(const CufileLibrary& lib, uint32_t depth, uint32_t batch);

}  // namespace hawser::file
