#include "rpc/frame_reader.h"

#include <algorithm>

namespace hawser::rpc {

std::span<char> FrameReader::want() {
  if (have_ < sizeof(Frame)) return {reinterpret_cast<char*>(&frame_) + have_, sizeof(Frame) - have_};
  const size_t done = body_.size() - pending_;
  if (pending_ == 0) {
    const size_t more = std::min<size_t>(kChunk, frame_.length - done);
    if (more == 0) return {};
    body_.resize(done + more);  // grows with what arrives: at most kChunk ahead
    pending_ = more;
  }
  return {body_.data() + done, pending_};
}

Status FrameReader::got(size_t n) {
  if (have_ < sizeof(Frame)) {
    have_ += std::min(n, sizeof(Frame) - have_);
    if (have_ < sizeof(Frame)) return Status::OK();
    Status s = checkFrame(frame_, max_body_);
    if (!s.ok()) have_ = 0;  // nothing of it is kept
    return s;
  }
  pending_ -= std::min(n, pending_);
  return Status::OK();
}

void FrameReader::next() {
  have_ = 0;
  pending_ = 0;
  frame_ = Frame{};
  if (body_.capacity() > kChunk) std::string().swap(body_);
  else body_.clear();
}

}  // namespace hawser::rpc
