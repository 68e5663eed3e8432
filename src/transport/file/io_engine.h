// I/O engines of the file transport: the part that moves bytes between
// memory and an open file descriptor, asynchronously.
//
// The file transport cuts requests into slices, decides alignment (bounce
// buffers) and tracks tasks; an engine only issues IoOps and reports each
// one's result, matched by the op's cookie. Engines:
//   - uring: io_uring (liburing), batched submits from one owner thread,
//     registered (fixed) buffers and files when the kernel allows them.
//   - posix: pread/pwrite on a small thread pool.
//   - cufile: cuFile batch I/O between GPU memory and files
//     (cufile_engine.h); needsAlignment() == false, device pointers.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "hawser/status.h"

namespace hawser {
class Config;
}

namespace hawser::file {

struct FileCounters;

// Memory an engine set up for I/O (IoEngine::addMemory): io_uring's fixed
// buffers of it, cuFile's registration of it. Every op in that memory
// carries it (IoOp::memory), so the engine uses what it set up without
// looking the address up; an op that carries none goes plain. Opaque to the
// caller, who keeps it (with its registration of the region) at least as
// long as any op in it is being submitted.
class IoEngine;
class EngineMemory {
 public:
  explicit EngineMemory(const IoEngine* owner) : engine(owner) {}
  virtual ~EngineMemory() = default;
  const IoEngine* const engine;  // the engine that set it up (another one ignores it)
};

// One I/O. `cookie` is the caller's one-based id of the op; it comes back
// unchanged in the completion (never matched by position).
struct IoOp {
  uint64_t cookie = 0;
  int fd = -1;
  int file_token = -1;  // from IoEngine::addFile (fixed-file slot), -1: use fd
  bool write = false;
  void* buf = nullptr;
  uint64_t len = 0;     // bytes (with iovecs: their total)
  uint64_t offset = 0;
  // A vectored op (preadv/pwritev, io_uring readv/writev): `iov_count`
  // iovecs in place of `buf`, kept alive by the caller until the op
  // completes. Not for the cuFile engine (it fails such an op with EINVAL).
  const ::iovec* iov = nullptr;
  uint32_t iov_count = 0;
  // What this engine's addMemory set up for the memory holding [buf, +len),
  // or null (plain I/O). Read during submit() only; ignored with iovecs and
  // when it belongs to another engine or does not hold the buffer.
  EngineMemory* memory = nullptr;
  int device = -1;  // the GPU of `buf` (the cuFile engine binds it), -1: host memory
};

// result >= 0: bytes moved (may be short); < 0: -errno (-ECANCELED when the
// op was cancelled before or while it ran).
struct IoCompletion {
  uint64_t cookie = 0;
  int64_t result = 0;
};

// Called from engine threads with one or more completions. Must not block
// for long; may call submit()/cancel() of the same engine.
using CompletionSink = std::function<void(std::span<const IoCompletion>)>;

struct IoEngineOptions {
  uint32_t io_depth = 32;        // ops in flight at once (uring); workers (posix) = posix_threads
  uint32_t posix_threads = 4;
  bool fixed_buffers = true;     // io_uring registered buffers for addMemory regions
  bool fixed_files = true;       // io_uring registered files
  bool sqpoll = false;           // io_uring SQPOLL kernel thread (burns a core)
  uint32_t sqpoll_idle_ms = 10;
  uint32_t max_fixed_buffers = 4096;
  uint32_t max_fixed_files = 4096;
};

struct IoEngineStats {
  uint64_t submitted = 0;        // ops handed to the kernel / a worker
  uint64_t submit_calls = 0;     // io_uring_submit calls (uring)
  uint64_t largest_submit = 0;   // most ops handed to the kernel by one call (uring)
  uint64_t fixed_buffer_ops = 0; // ops issued with a registered buffer
  uint64_t fixed_file_ops = 0;   // ops issued with a registered file
  uint64_t cancels = 0;          // cancel requests issued
  uint64_t registered_bytes = 0; // memory currently registered as fixed buffers
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  virtual const char* name() const = 0;
  // Starts the engine's threads. `sink` receives every completion.
  virtual Status start(CompletionSink sink) = 0;
  // Cancels what it can and waits up to `timeout` for every outstanding op.
  // Returns the number of ops still outstanding (0: stopped cleanly; the
  // object may be destroyed). With ops left, the engine must be leaked: the
  // kernel may still write into their buffers.
  virtual size_t stop(std::chrono::milliseconds timeout) = 0;

  // Registers an open fd for faster submission; returns a token for
  // IoOp::file_token (or -1: use the plain fd). The fd must stay open until
  // removeFile(token), which is called only when no op uses it.
  virtual int addFile(int fd) { return -1; }
  virtual void removeFile(int token) {}

  // Memory the engine may set up for I/O (every region registered with the
  // transfer engine, staging slots); `device`: its GPU, -1 for host memory.
  // Returns what ops in it then carry (IoOp::memory), or null when the
  // engine sets up nothing. Never blocks on the set-up (it may happen in
  // the background, or never: failure only means slower I/O).
  virtual std::shared_ptr<EngineMemory> addMemory(void* addr, size_t len, int device) { return nullptr; }
  // Tears down what addMemory set up before it returns (the caller may free
  // the memory then); ops submitted later that still carry `m` go plain.
  virtual void removeMemory(EngineMemory& m) {}

  // Queues ops; never fails: an op that cannot be issued completes with an
  // error through the sink. Many ops go out with one kernel submission.
  virtual void submit(std::span<const IoOp> ops) = 0;
  // Best effort: an op not yet issued completes with -ECANCELED; one in the
  // kernel gets a cancel request and completes however the kernel ends it.
  virtual void cancel(std::span<const uint64_t> cookies) = 0;

  // Whether buffers, lengths and offsets must respect O_DIRECT alignment
  // when the fd was opened with O_DIRECT (cuFile would say false).
  virtual bool needsAlignment() const { return true; }

  virtual IoEngineStats stats() const = 0;
};

// io_uring engine; kNotSupported when io_uring cannot be set up here
// (kernel.io_uring_disabled, seccomp, old kernel) or the build lacks it.
// `counters`: its transport's (fixed_buffer_ops, fixed_file_ops).
Status makeUringEngine(const IoEngineOptions& opts, std::shared_ptr<FileCounters> counters,
                       std::unique_ptr<IoEngine>& out);
std::unique_ptr<IoEngine> makePosixEngine(const IoEngineOptions& opts);
// True when this build has the io_uring engine.
bool uringCompiledIn();

}  // namespace hawser::file
