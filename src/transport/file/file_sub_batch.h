// A file sub-batch: the SubBatch verbs of the file transport. prepare()
// validates and cuts (no I/O), post() hands the slices to the in-flight
// table (file_inflight.h), cancel() asks them to stop; destroying it frees
// its slices, or quarantines them while the kernel still holds any.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "base/transport.h"
#include "transport/file/file_handles.h"
#include "transport/file/file_inflight.h"

namespace hawser::file {

class FileTransport;

// Slices cut by prepare(), not yet posted; dropping them posts nothing.
struct FileWork final : PreparedWork {
  std::vector<CutTask> tasks;
};

class FileSubBatch final : public SubBatch {
 public:
  explicit FileSubBatch(FileTransport* owner);
  ~FileSubBatch() override;

  // For each task: intersect its range with the segment's files
  // (kOutOfRange unless fully covered), open every file it touches (cached
  // in the task's FilePeer; path, existence, permission, declared length:
  // each a distinct code naming the file), then cut slices at file
  // boundaries and at file.max_io_size, deciding per slice how it reaches the
  // file:
  //   direct   - user memory <-> O_DIRECT fd (address, offset, length aligned)
  //   bounce   - through an aligned bounce buffer (reads round out to the
  //              alignment and copy the asked bytes out; writes copy in)
  //   buffered - through a page-cache fd (file systems without O_DIRECT, and
  //              the unaligned head/tail of an O_DIRECT write, so a write never
  //              has to read-modify-write a block it only partly covers)
  // Slices of GPU memory never bounce (host code never touches GPU memory):
  // each goes through cuFile (any alignment; write heads/tails on the page
  // cache descriptor) or is staged through a pinned slot (reads take the
  // aligned superset into the slot), as FileTransport::gpuRoute decides.
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  // Issues every slice (one engine submission for all of them).
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override;

 private:
  FileTransport* owner_;
  OpenPolicy open_;
  std::unique_ptr<BatchSlices> slices_;
};

}  // namespace hawser::file
