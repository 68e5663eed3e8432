// The batches the Python engine keeps between calls: async ones until their
// caller collects them, and ones whose I/O outlived their call until it ends
// (then freed). Also how a batch ended, said as one Status.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hawser/engine.h"
#include "py_support.h"

namespace hawser::pymod {

// A submitted batch and what its outcome needs.
struct Submitted {
  BatchID id = 0;
  size_t tasks = 0;
  uint64_t bytes = 0;
  Clock::time_point deadline;
  std::string what;    // the call that submitted it
  std::string target;  // segment name
};

// python.sync_timeout_ms, python.sync_timeout_ns_per_byte, python.cancel_wait_ms.
struct Limits {
  int64_t sync_timeout_ms = 30000;
  int64_t ns_per_byte = 1;
  int64_t cancel_wait_ms = 5000;
};

// How a finished (or timed-out) transfer ended, from its tasks' statuses.
Status outcome(const Limits& limits, const Submitted& sub, const std::vector<TransferStatus>& st, bool timed_out,
               const std::string& where);

class BatchTable {
 public:
  void track(const Submitted& sub);
  // Finds an async batch without taking it.
  Status peek(int64_t id, const char* what, Submitted& out);
  // Takes an async batch: this caller now owns finishing and freeing it.
  Status take(int64_t id, const char* what, Submitted& out);
  // Waits for the batch until its deadline (cancels it past that, then waits
  // up to cancel_wait_ms for every task to end), frees it, and says how it ended.
  Status finish(TransferEngine& e, const Limits& limits, const Submitted& sub);
  // Frees a batch whose tasks all ended; one whose I/O still references
  // memory is kept and freed by a later reap().
  void freeOrKeep(TransferEngine& e, BatchID id);
  void reap(TransferEngine& e);
  size_t unreclaimed();

 private:
  std::mutex mu_;
  std::unordered_map<BatchID, Submitted> async_;
  std::vector<BatchID> unreclaimed_;
};

}  // namespace hawser::pymod
