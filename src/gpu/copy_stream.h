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
  const CopySettings& settings() const { return settings_; }
  // Queues dst <- src (host or device memory, either end: unified addressing).
  Status copy(void* dst, const void* src, size_t len, uint64_t& ticket);
  // Queues every run of `runs` (a window: any number, any lengths and
  // alignments, none overlapping another's destination) with one driver
  // launch where the mechanism allows (gpu/batch_copy.h), and one ticket
  // for all of them. `peer` >= 0: some runs touch memory of that other GPU;
  // the kernel is used only when this GPU can reach it (peer access), else
  // the copy engines. `report`, when given, says how it was done. When it
  // fails, copies of the window already queued may still run: waitAll()
  // before the memory is given back.
  Status copyRuns(std::span<const CopyRun> runs, uint64_t& ticket, CopyReport* report = nullptr, int peer = -1);
  // A window's run list kept in device memory (a prepared plan's window,
  // posted again and again): made once by makePieces, launched by
  // copyPieces with no per-run work on the host. Freed with freePieces once
  // no launch of it is in flight.
  struct DevicePieces {
    int device = -1;
    cu::DevicePtr list = 0;
    uint64_t count = 0;  // pieces
    uint64_t runs = 0;
    uint64_t bytes = 0;
    uint64_t alloc = 0;  // device bytes it holds
  };
  // Cuts `runs` into the kernel's pieces and queues their copy into new
  // device memory (ordered before any later launch on this stream).
  Status makePieces(std::span<const CopyRun> runs, DevicePieces& out);
  // One launch of the copy kernel over `p` (within the CTA bound).
  Status copyPieces(const DevicePieces& p, uint64_t& ticket, CopyReport* report = nullptr);
  // Frees what makePieces allocated (no launch of it may be in flight).
  static void freePieces(DevicePieces& p);
  // Whether the kernel can run here (loads it the first time).
  bool kernelReady();
  // The mechanism copyRuns would take for `runs` runs of `bytes` in all
  // with no other GPU involved (never kAuto).
  CopyMechanism wouldUse(uint64_t runs, uint64_t bytes);
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
  // One run list of the kernel: page-locked host memory the list is written
  // to, and device memory it is copied to before the launch; reused once
  // the launch that read it is done (its ticket).
  struct PieceSlot {
    CopyRun* host = nullptr;
    cu::DevicePtr dev = 0;
    uint64_t ticket = 0;
  };
  static constexpr size_t kSlots = 4;
  static constexpr size_t kSlotPieces = 8192;

  Status bind() const;
  void recycle(cu::Event e);
  // Records an event after what is queued and hands out its ticket.
  Status mark(uint64_t& ticket);
  // The mechanism for `runs` (never kAuto), and why it is not the one asked for.
  CopyMechanism choose(std::span<const CopyRun> runs, int peer, const char*& fallback);
  Status viaKernel(std::span<const CopyRun> runs, CopyReport& rep);
  Status viaBatch(std::span<const CopyRun> runs, CopyReport& rep);
  Status perRun(std::span<const CopyRun> runs, CopyReport& rep);
  // Queues the copy of slot `s`'s first `count` pieces and the launch over them.
  Status launch(PieceSlot& s, uint64_t count, CopyReport& rep);
  // Queues the kernel over `count` pieces at `list` (device memory).
  Status launchList(cu::DevicePtr list, uint64_t count, CopyReport& rep);
  Status slots();

  const CudaDriver* d_;
  int device_;
  CopySettings settings_;
  cu::Stream stream_ = nullptr;
  uint64_t next_ = 1;
  uint64_t done_ = 0;       // every ticket <= done_ finished
  std::deque<Mark> marks_;  // recorded after copies, oldest first
  std::vector<cu::Event> spare_;
  // The kernel (null until first used, or when it cannot be loaded here).
  cu::Function kernel_ = nullptr;
  Status kernel_status_;
  bool kernel_tried_ = false;
  std::vector<PieceSlot> slots_;
  size_t slot_next_ = 0;
  void* slot_host_ = nullptr;
  cu::DevicePtr slot_dev_ = 0;
  // Peers this GPU's kernel may touch (1) or may not (-1), by device.
  std::vector<int8_t> peer_access_;
  // cuMemcpyBatchAsync's arrays, kept between calls.
  std::vector<cu::DevicePtr> batch_dst_, batch_src_;
  std::vector<size_t> batch_len_;
};

}  // namespace hawser::gpu
