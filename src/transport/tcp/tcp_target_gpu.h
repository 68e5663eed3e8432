// The target's GPU requests of one data connection (internal to the tcp
// transport; docs/tcp.md "GPU memory", Target): in flight, oldest first, as
// chunks of at most one staging slot. A request's runs (one for
// READ_REQ/WRITE_REQ, its table's for a RUNS request) are cut into chunks as
// one stream of bytes, each chunk's pieces copied with one call (copyRuns
// for several). A write's chunk is received into its slot, then copied
// slot -> GPU; its response goes out once the last chunk's copy is done. A
// read's chunk is copied GPU -> slot, then sent (the response header with
// the first chunk). Responses leave in request order. The runs' pins ride
// with the request's last chunk, so unregistering waits for its copies.
//
// Deadlock-free slot use: a connection that holds slots never blocks for
// another one; it completes its own oldest chunk instead (which needs only
// its copy and the socket). Only a connection that holds none waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "transport/tcp/tcp_internal.h"
#include "transport/tcp/tcp_target_channel.h"

namespace hawser::tcp {

class GpuPipe {
 public:
  static constexpr size_t kMaxAhead = 64;  // chunks in flight per connection

  GpuPipe(TargetState& st, TargetChannel& ch) : st_(st), ch_(ch) {}
  ~GpuPipe() { abort(); }

  bool empty() const { return q_.empty(); }
  bool full() const { return q_.size() >= kMaxAhead; }

  // Takes the request `h` for the `n` runs (checked and pinned: `pins`,
  // emptied here) in GPU memory of `device`: a write's payload is received
  // here, chunk by chunk.
  Status intake(const WireHeader& h, const RunEntry* runs, size_t n, int device, gpu::PinnedBuffers* pool,
                std::vector<MemoryRegistry::Pin>& pins);

  // Completes the oldest chunks whose copies are done; never waits for a copy.
  Status progress();

  // Waits for the oldest chunk's copy, then sends it / its response.
  Status completeFront(bool wait = true);

  // Completes everything in flight (before a request served outside the pipe).
  Status drain();

  // The connection ends: waits until no copy runs, then frees slots and pins.
  void abort();

 private:
  struct Entry {
    gpu::CopyStream* stream = nullptr;
    gpu::PinnedBuffers* pool = nullptr;
    uint64_t ticket = 0;
    long slot = -1;
    char* data = nullptr;
    uint32_t len = 0;
    uint32_t runs = 1;  // runs of its request
    bool is_read = false, first = false, last = false;
    WireHeader resp;
    std::vector<MemoryRegistry::Pin> pins;  // the request's (its last chunk)
  };

  Status fail(const Status& s) {
    abort();
    return s;
  }

  void release(Entry& e);
  Status acquire(gpu::PinnedBuffers* pool, long& slot);
  Status streamFor(int device, gpu::CopyStream*& out);

  TargetState& st_;
  TargetChannel& ch_;
  std::deque<Entry> q_;
  std::vector<std::pair<int, std::unique_ptr<gpu::CopyStream>>> streams_;
  std::vector<gpu::CopyRun> pieces_;  // scratch of intake
};

}  // namespace hawser::tcp
