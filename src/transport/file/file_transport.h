// The file transport ("file", alias "nvmeof"): file segments (backing files
// concatenated into one logical space) read and written through an I/O
// engine (io_uring or POSIX; a cuFile engine can slot in behind IoEngine).
// The engine reaches the transport through makeFileTransport().
//
// Process-wide counters, for tests and `hawser doctor`-style reports.
#pragma once

#include <atomic>
#include <cstdint>

namespace hawser::file {

struct FileStats {
  uint64_t uring_ops = 0;          // ops issued through an io_uring engine
  uint64_t posix_ops = 0;          // ops issued through a POSIX engine
  uint64_t direct_slices = 0;      // slices straight between user memory and an O_DIRECT fd
  uint64_t bounce_slices = 0;      // slices through a bounce buffer (unaligned address/offset/length)
  uint64_t buffered_slices = 0;    // slices through the page cache (no O_DIRECT on that fs, or write head/tail)
  uint64_t fixed_buffer_ops = 0;   // io_uring ops that used a registered buffer
  uint64_t fixed_file_ops = 0;     // io_uring ops that used a registered file
  uint64_t short_continuations = 0;  // short reads/writes resumed for the remainder
  uint64_t cancel_requests = 0;    // in-flight slices asked to cancel
  uint64_t quarantined = 0;        // slices reported CANCELED while their I/O had not stopped
  uint64_t quarantine_released = 0;  // of those, I/O that has since ended
  uint64_t files_opened = 0;       // open() calls that succeeded
  uint64_t files_open = 0;         // descriptors open now
};

FileStats globalStats();

namespace detail {
struct Counters {
  std::atomic<uint64_t> uring_ops{0}, posix_ops{0}, direct_slices{0}, bounce_slices{0}, buffered_slices{0},
      fixed_buffer_ops{0}, fixed_file_ops{0}, short_continuations{0}, cancel_requests{0}, quarantined{0},
      quarantine_released{0}, files_opened{0}, files_open{0};
};
Counters& counters();
}  // namespace detail

}  // namespace hawser::file
