// The tcp transport's knobs: its rows of the one strict config system
// (base/knob.h has the machinery; `hawser config --prefix tcp.` lists them).
// The generated list of built-in transports registers this table (its
// hawser_transport(... CONFIG kTcpKnobs) call); the transport reads them
// through TcpConfig, whose keys are checked against this table when they
// compile.
//
// Adding a knob: a row below, then regenerate the docs' tables (docs/config.md):
//   cmake -DHAWSER=build/bin/hawser -DSOURCE_DIR=. -DUPDATE=ON -P cmake/config_docs.cmake
#pragma once

#include "base/config.h"
#include "base/knob.h"

namespace hawser {

// clang-format off
inline constexpr Knob kTcpKnobs[] = {
  {"tcp.connections", "HAWSER_TCP_CONNECTIONS", KnobType::kInt, "2", 1, 64, {},
   "data connections per peer"},
  {"tcp.home_connections", "HAWSER_TCP_HOME_CONNECTIONS", KnobType::kBool, "true", 0, 0, {},
   "while several threads submit to one peer, each thread's slices go to a connection of its own, so a "
   "thread's batches stay with one io thread and one target thread; a lone thread spreads its slices over all "
   "connections (false: every thread spreads, round-robin)"},
  {"tcp.home_window_ms", "HAWSER_TCP_HOME_WINDOW_MS", KnobType::kDurationMs, "50", 1, knob_detail::kHour, {},
   "with tcp.home_connections: threads count as submitting to one peer at once while a thread other than the "
   "last one posted to it within this long"},
  {"tcp.home_slack", "HAWSER_TCP_HOME_SLACK", KnobType::kSize, "4M", 0, knob_detail::G, {},
   "with tcp.home_connections: a slice goes to the least loaded connection instead of its thread's own when "
   "that one carries more than this many bytes beyond it"},
  {"tcp.slice_size", "HAWSER_TCP_SLICE_SIZE", KnobType::kSize, "1M", 4 * knob_detail::K, knob_detail::G, {},
   "bytes per TCP slice (at most tcp.max_frame)"},
  {"tcp.group_bytes", "HAWSER_TCP_GROUP_BYTES", KnobType::kSize, "1M", 0, knob_detail::G, {},
   "consecutive slices of one post to one peer (one direction, one memory kind at each end) go as one frame of "
   "many runs of up to this many bytes (capped by the slice size), for a peer that serves such frames; 0 = every "
   "slice its own request"},
  {"tcp.inflight", "HAWSER_TCP_INFLIGHT", KnobType::kInt, "64", 1, 65536, {},
   "unanswered requests (slices or frames of many runs) per connection"},
  {"tcp.timeout_ms", "HAWSER_TCP_TIMEOUT_MS", KnobType::kDurationMs, "5000", 10, knob_detail::kHour, {},
   "no progress this long with slices outstanding: the connection's tasks FAIL (also the target's stall bound and "
   "the keepalive interval of data connections)"},
  {"tcp.connect_timeout_ms", "HAWSER_TCP_CONNECT_TIMEOUT_MS", KnobType::kDurationMs, "3000", 10, knob_detail::kHour,
   {}, "bound of one connect + Hello"},
  {"tcp.io_threads", "HAWSER_TCP_IO_THREADS", KnobType::kInt, "2", 1, 16, {},
   "initiator epoll threads (connections are shared out among them)"},
  {"tcp.sock_buf", "HAWSER_TCP_SOCK_BUF", KnobType::kSize, "0", 0, knob_detail::G, {},
   "SO_SNDBUF/SO_RCVBUF of data sockets; 0 = kernel autotuning (and tcp.loopback_send_buf)"},
  {"tcp.loopback_send_buf", "HAWSER_TCP_LOOPBACK_SEND_BUF", KnobType::kSize, "256K", 0, knob_detail::G, {},
   "SO_SNDBUF of data sockets whose peer is this host over loopback, while tcp.sock_buf is 0 (the kernel "
   "doubles it, capped by net.core.wmem_max): the receiver copies the bytes out while they are still in the CPU "
   "caches, where autotuning lets 4 MiB queue (docs/tcp.md); 0 = kernel autotuning"},
  {"tcp.max_frame", "HAWSER_TCP_MAX_FRAME", KnobType::kSize, "64M", 4 * knob_detail::K, knob_detail::G, {},
   "largest payload the target accepts; published to peers"},
  {"tcp.gpu_staging_buffers", "HAWSER_TCP_GPU_STAGING_BUFFERS", KnobType::kInt, "16", 2, 4096, {},
   "pinned staging slots of tcp.slice_size bytes for GPU memory, per side: the target's, and the initiator's "
   "(shared out among tcp.io_threads, at least 2 each)"},
  {"tcp.gpu_poll_copies", "HAWSER_TCP_GPU_POLL_COPIES", KnobType::kBool, "true", 0, 0, {},
   "while GPU staging copies are in flight and its sockets are quiet, an initiator io thread polls both, "
   "receiving the next payload while a copy runs (false: it waits for the oldest copy, the sockets unread "
   "meanwhile); either way the thread spins while copies run"},
};
// clang-format on

using TcpConfig = TableConfig<kTcpKnobs>;

}  // namespace hawser
