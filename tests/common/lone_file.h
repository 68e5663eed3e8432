// The file transport on its own, without an engine: what registerRegion
// returns for a region, and requests and windows of runs handed to prepare
// and prepareRuns with the local region (and registration) each brings, as
// the engine hands them. For tests of what the transport does with what it
// is given, and of nothing else.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/registry.h"
#include "base/transport.h"
#include "metadata/descriptor.h"

namespace hawser::test {

class LoneFile {
 public:
  // A file transport installed with `config` (file.*, gpu.* keys), and the
  // file at `path` opened as a file:// segment; `status` says how it went.
  explicit LoneFile(const std::string& path, const std::map<std::string, std::string>& config = {});
  ~LoneFile();
  LoneFile(const LoneFile&) = delete;

  Transport& transport() { return *t_; }
  // registerRegion of [p, +n) at `location` ("cpu:0", "cuda:0"): `out` is
  // the region as the engine hands it with a task in it.
  Status registerRegion(void* p, size_t n, const std::string& location, LocalRegion& out);
  Status unregister(void* p, size_t n) { return t_->unregisterMemory(p, n); }

  // One request whose local memory lies in `region`: prepared, posted and
  // waited for. prepare's refusal, else the task's end (OK: COMPLETED).
  Status move(OpCode op, void* local, uint64_t offset, uint64_t len, const LocalRegion& region);
  // `runs` (RunRef: local, file offset, length, index into `regions`) as
  // one window: prepareRuns' refusal, else OK when every run COMPLETED.
  Status moveRuns(OpCode op, std::vector<RunRef> runs, std::span<const LocalRegion> regions);

  Status status;

 private:
  Config cfg_;
  MemoryRegistry registry_;
  std::unique_ptr<Transport> t_;
  std::shared_ptr<SegmentDesc> seg_;
  std::shared_ptr<PeerHandle> peer_;
  uint64_t seq_ = 0;
};

}  // namespace hawser::test
