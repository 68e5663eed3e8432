// Thin, checked wrappers over BSD sockets used by the rpc layer and the tcp
// transport. All functions return Status; none throws.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "base/fd.h"
#include "hawser/status.h"

namespace hawser::net {

// Non-blocking connect with a timeout; returns a blocking socket with
// TCP_NODELAY set. kUnavailable (refused/unreachable) or kTimeout.
// `refused`, when given, is set when every address of `host` refused the
// connection (ECONNREFUSED): nothing listens there, so the peer process is
// gone or not started, which no retry over another path changes.
Status connectTo(const std::string& host, uint16_t port, std::chrono::milliseconds timeout, Fd& out,
                 bool* refused = nullptr);
// Listening socket on host:port (port 0 = any); `bound` gets the real port.
Status listenOn(const std::string& host, uint16_t port, int backlog, Fd& out, uint16_t& bound);

// Blocking full send/recv. kUnavailable on EOF/reset, kTimeout on SO_*TIMEO expiry.
Status sendAll(int fd, const void* data, size_t len);
Status sendAllv(int fd, struct iovec* iov, int iovcnt);  // modifies iov
// Consumes `n` bytes (what one sendmsg/writev moved) from the front of the
// `cnt` pieces at `iov`: the pieces it covered are skipped (iov and cnt move
// past them) and a piece it cut keeps its tail.
void advanceIov(struct iovec*& iov, int& cnt, size_t n);
Status recvAll(int fd, void* data, size_t len);
// Drop `len` incoming bytes.
Status discard(int fd, size_t len);
// Waits until `fd` is readable (at most `wait_ms`; -1: no limit), then takes
// what is there, at most `len` bytes: `got` of them (0 when the wait ran
// out: then kTimeout). kUnavailable on EOF (or a reset).
Status recvSome(int fd, void* data, size_t len, int wait_ms, size_t& got);

void setNoDelay(int fd);
void setTimeouts(int fd, std::chrono::milliseconds timeout);  // SO_RCVTIMEO/SO_SNDTIMEO; 0 = none
void setBufferSizes(int fd, int bytes);  // SO_SNDBUF/SO_RCVBUF; 0 = leave
void setSendBuffer(int fd, int bytes);   // SO_SNDBUF alone; 0 = leave
// True when a connected socket's peer is this host over the loopback
// interface: a 127/8 or ::1 peer (IPv4-mapped too), or a peer address equal
// to the socket's own (a connection to one of this host's addresses).
bool isLoopback(int fd);
// TCP keepalive: a connection silent for `interval` is probed, once per
// `interval`; after 3 unanswered probes the kernel ends it (ETIMEDOUT), and a
// peer whose host no longer knows the connection answers a probe with a
// reset. So a peer that vanished without a word (a partition, a host gone)
// does not hold a socket and its thread forever. Whole seconds, at least 1;
// 0 leaves keepalive off.
void setKeepAlive(int fd, std::chrono::milliseconds interval);
// close() then resets the connection and drops unsent bytes (SO_LINGER 0),
// instead of handing them to the kernel to deliver after the socket is gone.
void setResetOnClose(int fd);
// Splits "host:port". kInvalidArgument naming the text when malformed.
Status splitHostPort(const std::string& text, std::string& host, uint16_t& port);

}  // namespace hawser::net
