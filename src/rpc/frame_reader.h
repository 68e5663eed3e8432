// Receiving one control frame (rpc.h's Frame + its body) from bytes as they
// arrive, apart from the socket I/O (fuzzed on its own:
// tests/fuzz/rpc_partial_fuzz.cpp).
//
// Memory follows the bytes that came, not the length a header announces: the
// body buffer grows by at most kChunk beyond what arrived (a peer that
// announces 16 MiB and sends nothing costs kChunk, not 16 MiB). The reader
// asks only for the bytes of the frame it is in (never a byte of the next),
// so the socket may be handed on after a frame (a Hello, then a stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "hawser/status.h"
#include "rpc/rpc.h"

namespace hawser::rpc {

class FrameReader {
 public:
  // The most body bytes one want() offers: the growth ahead of the data.
  static constexpr size_t kChunk = 64 * 1024;

  explicit FrameReader(uint32_t max_body) : max_body_(max_body) {}

  // Where the next bytes go: the rest of the header, or up to kChunk of the
  // rest of the body (the buffer grown for it). Empty once ready().
  std::span<char> want();
  // `n` bytes (at most want().size()) arrived into want(). A complete header
  // is checked here (checkFrame against max_body): kRemoteError naming the
  // field when it fails, and the reader is then of no further use.
  Status got(size_t n);
  // A whole frame and its body arrived.
  bool ready() const { return have_ == sizeof(Frame) && pending_ == 0 && body_.size() == frame_.length; }
  // Some bytes of a frame arrived and it is not complete yet.
  bool started() const { return have_ > 0 && !ready(); }
  const Frame& frame() const { return frame_; }
  std::string& body() { return body_; }
  // Forgets the frame: the next want() asks for a new header. The body's
  // buffer is released when it is large (a 16 MiB call does not stay pinned
  // by an idle connection).
  void next();
  // Bytes of memory the body holds now (its capacity).
  size_t held() const { return body_.capacity(); }
  // Bytes of the current frame received so far (header and body).
  size_t received() const { return have_ + body_.size() - pending_; }

 private:
  const uint32_t max_body_;
  Frame frame_{};
  size_t have_ = 0;     // header bytes received
  size_t pending_ = 0;  // bytes of body_ offered by want() and not yet filled
  std::string body_;
};

}  // namespace hawser::rpc
