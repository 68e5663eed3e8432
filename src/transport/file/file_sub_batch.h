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

// I/Os made by prepare(), not yet posted; dropping them posts nothing.
struct FileWork final : PreparedWork {
  PreparedIos ios;
};

class FileSubBatch final : public SubBatch {
 public:
  explicit FileSubBatch(FileTransport* owner);
  ~FileSubBatch() override;

  // For each task: intersect its range with the segment's files
  // (kOutOfRange unless fully covered). The tasks' parts are grouped by file,
  // direction and memory (host, or one GPU); each group opens its file once
  // (cached in the FilePeer; path, existence, permission, declared length:
  // each a distinct code naming the file) and becomes I/Os by the rule of
  // file_coalesce.h (file.coalesce, file.coalesce_gap, file.max_io_size).
  // How each I/O reaches the file:
  //   direct   - user memory <-> O_DIRECT fd: every slice's address, offset
  //              and length aligned; several slices (or a read's gaps) go
  //              as one vectored I/O (an iovec each)
  //   bounce   - through an aligned bounce buffer (reads round out to the
  //              alignment and copy each slice's bytes out; writes copy
  //              them in): unaligned memory, or more than kMaxIovecs iovecs
  //   buffered - through a page-cache fd (file systems without O_DIRECT, and
  //              the unaligned head/tail of an O_DIRECT write, so a write never
  //              has to read-modify-write a block it only partly covers),
  //              vectored as direct I/O is
  // I/O of GPU memory never bounces (host code never touches GPU memory): it
  // goes through cuFile (one slice per I/O: any alignment; write heads/tails
  // on the page cache descriptor) or is staged through a pinned slot (reads
  // take the aligned superset into the slot; one batched GPU copy per I/O),
  // as FileTransport::gpuRoute decides per file.
  Status prepare(std::span<Task* const> tasks, std::unique_ptr<PreparedWork>& out) override;
  // A block request's window of runs (caps().run_windows): the same as
  // prepare() with a run in place of each task and no task per run; each
  // run ends through w.sink once its last slice has (runs that complete
  // together are told together).
  //
  // Each task's local region (Task::region()) and each run's
  // (RunWindow::regions) comes with this transport's registration of it
  // (FileRegistration: the GPU, io_uring's fixed buffers, cuFile's
  // registration), found when the request was checked; nothing is looked up
  // here. A registration unregisterMemory tore down since is refused
  // (kNotRegistered, saying so), never used.
  Status prepareRuns(const RunWindow& w, std::unique_ptr<PreparedWork>& out) override;
  // Issues every I/O (one engine submission for all of them).
  void post(std::unique_ptr<PreparedWork> work) override;
  void cancel() override;
  bool idle() const override;

 private:
  struct Group;
  struct Parts;
  // The parts of one unit (a task, or a run: `unit` is its index in the
  // window): [offset, +length) of the segment <-> [mem, +length).
  Status addParts(Parts& p, FilePeer* peer, bool write, uint64_t offset, uint64_t length, uint64_t mem, int device,
                  uint32_t unit);
  // Each group's descriptors and route, then its I/Os (file_coalesce.h).
  Status makeIos(Parts& parts, PreparedIos& pw);

  FileTransport* owner_;
  OpenPolicy open_;
  std::unique_ptr<BatchSlices> slices_;
};

}  // namespace hawser::file
