// What the file transport set up when a region was registered
// (FileTransport::registerRegion). The engine hands it back with every task
// (Task::region().registration) and window of runs
// (RunWindow::regions[i].registration) whose memory lies in the region, so
// prepare and the I/O path read it there and never look a region up: which
// GPU the memory is on, io_uring's fixed buffers of it, cuFile's
// registration of it. The transport's own map of registrations
// (file_transport.h) serves teardown only: unregisterMemory, cuFile
// opening, shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "base/registry.h"
#include "transport/file/io_engine.h"

namespace hawser::file {

struct FileRegistration final : Registration {
  uint64_t addr = 0;
  uint64_t length = 0;
  // The region's GPU (Region::gpu: the registry parsed "cuda:N" once): its
  // I/O goes through cuFile or pinned staging slots, never straight to the
  // file or through a bounce buffer (host code never touches GPU memory).
  // -1: host memory.
  int gpu = -1;
  // io_uring's fixed buffers of host memory (the slot of each 64 MiB piece,
  // filled once I/O has touched it: uring_buffers.cpp); null without
  // io_uring, with file.fixed_buffers=false, and for GPU memory.
  std::shared_ptr<EngineMemory> fixed;
  // cuFile's registration of GPU memory (whether cuFileBufRegister took it:
  // cufile_buffers.h). Set once, when cuFile opens (or at registration when
  // it is open already); null until then and for host memory.
  std::atomic<EngineMemory*> cufile{nullptr};
  // Set before unregisterMemory (or shutdown) tears the above down: a task
  // or window that still holds the registration is refused at prepare
  // rather than moved with what is gone.
  std::atomic<bool> deregistered{false};

  // Publishes cuFile's registration; once, under the transport's lock.
  void setCufile(std::shared_ptr<EngineMemory> m) {
    cufile_owner_ = std::move(m);
    cufile.store(cufile_owner_.get(), std::memory_order_release);
  }

 private:
  std::shared_ptr<EngineMemory> cufile_owner_;  // keeps `cufile` alive while this lives
};

}  // namespace hawser::file
