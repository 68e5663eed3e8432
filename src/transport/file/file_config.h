// The file transport's knobs: its rows of the one strict config system
// (base/knob.h has the machinery; `hawser config --prefix file.` lists them).
// The generated list of built-in transports registers this table (its
// hawser_transport(... CONFIG kFileKnobs) call); the transport reads them
// through FileConfig, whose keys are checked against this table when they
// compile.
//
// Adding a knob: a row below, then regenerate the docs' tables (docs/config.md):
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kFileKnobs[] = {
  {"file.engine", "HAWSER_FILE_ENGINE", KnobType::kEnum, "auto", 0, 0, "auto|uring|posix",
   "file I/O engine: auto (io_uring when available), uring (required) or posix"},
  {"file.io_depth", "HAWSER_FILE_IO_DEPTH", KnobType::kInt, "32", 1, 4096, {},
   "io_uring operations in flight at once; more wait in the engine's queue"},
  {"file.max_io_size", "HAWSER_FILE_MAX_IO_SIZE", KnobType::kSize, "1M", 4 * knob_detail::K, knob_detail::G, {},
   "largest file I/O (a multiple of 4096); runs of one window are coalesced up to this size"},
  {"file.coalesce", "HAWSER_FILE_COALESCE", KnobType::kBool, "true", 0, 0, {},
   "runs of one window (a block request's, or one submit's) that lie next to each other in a file share large "
   "I/Os (vectored, bounced or staged); false: one I/O per run"},
  {"file.coalesce_gap", "HAWSER_FILE_COALESCE_GAP", KnobType::kSize, "16K", 0, 64 * knob_detail::M, {},
   "reads: runs up to this many bytes apart share an I/O, which reads the gap and drops it (writes coalesce only "
   "runs that touch, and never write a gap)"},
  {"file.direct", "HAWSER_FILE_DIRECT", KnobType::kBool, "true", 0, 0, {},
   "open with O_DIRECT where the file system does it"},
  {"file.fixed_buffers", "HAWSER_FILE_FIXED_BUFFERS", KnobType::kBool, "true", 0, 0, {},
   "io_uring fixed buffers for registered memory: each 64 MiB piece that I/O touches is faulted in and pinned in "
   "the background, then used (registration itself pins nothing)"},
  {"file.fixed_files", "HAWSER_FILE_FIXED_FILES", KnobType::kBool, "true", 0, 0, {},
   "register fds as io_uring fixed files"},
  {"file.sqpoll", "HAWSER_FILE_SQPOLL", KnobType::kBool, "false", 0, 0, {},
   "io_uring SQPOLL kernel thread (burns a core)"},
  {"file.posix_threads", "HAWSER_FILE_POSIX_THREADS", KnobType::kInt, "4", 1, 256, {},
   "pread/pwrite workers"},
  {"file.bounce_buffers", "HAWSER_FILE_BOUNCE_BUFFERS", KnobType::kInt, "0", 0, 4096, {},
   "bounce buffers in the pool (0: file.io_depth)"},
  {"file.cancel_grace_ms", "HAWSER_FILE_CANCEL_GRACE_MS", KnobType::kDurationMs, "1000", 0, knob_detail::kHour, {},
   "a cancelled I/O not ended by then is quarantined"},
  {"file.cufile", "HAWSER_FILE_CUFILE", KnobType::kEnum, "auto", 0, 0, "auto|on|off",
   "GPU memory <-> files through cuFile: auto = when libcufile loads and registers the file, on = cuFile or fail, "
   "off = io_uring/POSIX into pinned staging buffers"},
  {"file.cufile_lib", "HAWSER_FILE_CUFILE_LIB", KnobType::kString, "libcufile.so.0", 0, 0, {},
   "cuFile library loaded at run time"},
  {"file.cufile_batch", "HAWSER_FILE_CUFILE_BATCH", KnobType::kInt, "128", 1, 256, {},
   "entries per cuFile batch, at most the library's limit (properties.io_batchsize, 128 by default)"},
  {"file.gpu_staging_buffers", "HAWSER_FILE_GPU_STAGING_BUFFERS", KnobType::kInt, "16", 2, 4096, {},
   "pinned staging slots (file.max_io_size + 8K each) for GPU memory when cuFile is not used"},
};
// clang-format on

using FileConfig = TableConfig<kFileKnobs>;

}  // namespace hawser
