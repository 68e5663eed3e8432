// cuFile (GPUDirect Storage) for the file transport: an IoEngine that runs
// slices between GPU memory and files through the batch API of a loaded
// CufileLibrary (cufile_library.h) (makeCufileEngine).
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

#include "transport/file/cufile_library.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

class CufileEngine : public IoEngine {
 public:
  // A cuFile handle for `fd` (token for IoOp::file_token), or why not.
  virtual Status registerFile(int fd, int& token) = 0;
  // removeFile(token) deregisters it (no op may use it any more).
  virtual const CufileLibrary& library() const = 0;
};

// `depth`: entries in flight at most; `batch`: entries per batch at most;
// `counters`: its transport's (cufile_batches).
std::unique_ptr<CufileEngine> makeCufileEngine(const CufileLibrary& lib, uint32_t depth, uint32_t batch,
                                               std::shared_ptr<FileCounters> counters);

}  // namespace hawser::file
