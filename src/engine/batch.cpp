#include "engine/batch.h"

namespace hawser {

void Batch::taskFinished() {
  std::lock_guard lk(done_mu_);
  if (unfinished_.fetch_sub(1) == 1) done_cv_.notify_all();
}

TransferStatus Batch::aggregate() const {
  TransferStatus out;
  size_t n = taskCount();
  if (n == 0) {
    out.s = TransferState::kWaiting;
    return out;
  }
  bool pending = false;
  int worst = 0;
  for (size_t i = 0; i < n; ++i) {
    TransferStatus t = tasks_[i].status();
    out.transferred_bytes += t.transferred_bytes;
    if (!isTerminal(t.s)) {
      pending = true;
      continue;
    }
    int r = failureRank(t.s);
    if (r > worst) {
      worst = r;
      out.error = t.error;
    }
  }
  out.s = pending ? TransferState::kPending : stateOfRank(worst);
  return out;
}

}  // namespace hawser
