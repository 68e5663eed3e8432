// One CUDA stream of one GPU and the copies queued on it, with completion
// through events: copy() returns a ticket, poll()/wait() say when every
// copy up to that ticket is done. Copies on a stream finish in order, so
// the finished tickets are always a prefix.
//
// Not thread-safe: one thread at a time uses a stream (each call makes the
// stream's GPU context current on the calling thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <span>

#include "gpu/batch_copy.h"
#include "gpu/cuda_api.h"
#include "hawser/status.h"

namespace hawser::gpu {

class CudaDriver;

class CopyStream {
 public:
  // A stream on GPU `device` of the loaded driver (kNotSupported without
  // one); `settings` say how copyRuns executes a window.
  static Status open(int device, std::unique_ptr<CopyStream>& out, const CopySettings& settings = {});
  ~CopyStream();  // waits for the queued copies

  int device() const { return device_; }
  // Queues dst <- src (host or device memory, either end: unified addressing).
  Status copy(void* dst, const void* src, size_t len, uint64_t& ticket);
  // Queues every run of `runs` (a window: any number, any lengths and
  // alignments, none overlapping another's destination) with one driver
  // launch where the mechanism allows (gpu/batch_copy.h), and one ticket
  // for all of them. `report`, when given, says how it was done. When it
  // fails, copies of the window already queued may still run: waitAll()
  // before the memory is given back.
  Status copyRuns(std::span<const CopyRun> runs, uint64_t& ticket, CopyReport* report = nullptr);
  // done = every copy up to `ticket` finished. An error is the stream's.
  Status poll(uint64_t ticket, bool& done);
  Status wait(uint64_t ticket);
  Status waitAll();
  // Tickets handed out so far (the last one).
  uint64_t last() const { return next_ - 1; }

 private:
  CopyStream(const CudaDriver* d, int device, const CopySettings& settings)
      : d_(d), device_(device), settings_(settings) {}
  struct Mark {
    uint64_t ticket;
    cu::Event event;
  };
  Status bind() const;
  void recycle(cu::Event e);
  // Records an event after what is queued and hands out its ticket.
  Status mark(uint64_t& ticket);

  const CudaDriver* d_;
  int device_;
  CopySettings settings_;
  cu::Stream stream_ = nullptr;
  uint64_t next_ = 1;
  uint64_t done_ = 0;       // every ticket <= done_ finished
  std::deque<Mark> marks_;  // recorded after copies, oldest first
  std::vector<cu::Event> spare_;
};

}  // namespace hawser::gpu
