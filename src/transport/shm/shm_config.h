// The shm transport's knobs: its rows of the one strict config system
// (base/knob.h has the machinery; `hawser config --prefix shm.` lists them).
// The generated list of built-in transports registers this table (its
// hawser_transport(... CONFIG kShmKnobs) call); the transport reads them
// through ShmConfig, whose keys are checked against this table when they
// compile.
//
// Adding a knob: a row below, then regenerate the docs' tables (docs/config.md):
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kShmKnobs[] = {
  {"shm.threads", "HAWSER_SHM_THREADS", KnobType::kInt, "0", 0, 64, {},
   "copy threads (memcpy through shared mappings, process_vm_readv/writev otherwise); 0: min(4, CPUs)"},
  {"shm.split_bytes", "HAWSER_SHM_SPLIT_BYTES", KnobType::kSize, "512K", 4 * knob_detail::K, knob_detail::G, {},
   "a task is cut into pieces of at most this many bytes, copied in parallel by the copy threads"},
  {"shm.inline_bytes", "HAWSER_SHM_INLINE_BYTES", KnobType::kSize, "1M", 0, knob_detail::G, {},
   "a submit (or a block request's first window) of at most this many bytes is copied by the submitting thread "
   "itself, whole (not cut, no hand-off to the copy threads); the submit returns once it is copied, so this "
   "bounds the time a submit takes. Larger ones go to the copy threads. 0: always the copy threads"},
  {"shm.max_iov", "HAWSER_SHM_MAX_IOV", KnobType::kInt, "1024", 1, 1024, {},
   "runs (slices of the tasks of one prepare, e.g. a block request's window) one process_vm_readv/writev call "
   "moves together, at most shm.split_bytes in all (1: a call per run)"},
  {"shm.socket_dir", "HAWSER_SHM_SOCKET_DIR", KnobType::kString, "", 0, 0, {},
   "where a target's local socket (fds passed to its peers of this host) lives: empty: the abstract namespace "
   "(peers must share the network namespace); else a directory both sides see (e.g. a volume two containers mount)"},
  {"shm.shared_mappings", "HAWSER_SHM_SHARED_MAPPINGS", KnobType::kBool, "true", 0, 0, {},
   "map a peer's shareable memory (memfd, shared files, hawser::allocateHostMemory) once and copy with memcpy; "
   "false: cross-memory attach (process_vm_readv/writev) for everything"},
};
// clang-format on

using ShmConfig = TableConfig<kShmKnobs>;

}  // namespace hawser
