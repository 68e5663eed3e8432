// The wire form of signals (signal_wire.h): little-endian integers,
// strings as a u32 length then the bytes.
#include "engine/signal_wire.h"

#include <fmt/format.h>

namespace hawser {

namespace {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool u8(uint8_t& v) {
    uint64_t x;
    if (!get(x, 1)) return false;
    v = static_cast<uint8_t>(x);
    return true;
  }
  bool u16(uint16_t& v) {
    uint64_t x;
    if (!get(x, 2)) return false;
    v = static_cast<uint16_t>(x);
    return true;
  }
  bool u32(uint32_t& v) {
    uint64_t x;
    if (!get(x, 4)) return false;
    v = static_cast<uint32_t>(x);
    return true;
  }
  bool u64(uint64_t& v) { return get(v, 8); }
  bool str(std::string& s) {
    uint32_t n;
    if (!u32(n) || in_.size() - at_ < n) return false;
    s.assign(in_, at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == in_.size(); }
  size_t left() const { return in_.size() - at_; }

 private:
  bool get(uint64_t& v, int n) {
    if (in_.size() - at_ < static_cast<size_t>(n)) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(in_[at_ + i])) << (8 * i);
    at_ += n;
    return true;
  }
  const std::string& in_;
  size_t at_ = 0;
};

constexpr uint8_t kWireVersion = 1;
// The smallest record: kind, id, requests, flags, code, reason and 4 empty strings.
constexpr size_t kMinRecord = 1 + 8 + 4 + 1 + 4 + 1 + 4 * 4;

}  // namespace

std::string encodeSignalFrame(const SignalFrame& f) {
  Writer w;
  w.u8(kWireVersion);
  w.str(f.from);
  w.str(f.host);
  w.u16(f.port);
  w.u64(f.incarnation);
  w.u64(f.seq);
  w.u32(static_cast<uint32_t>(f.records.size()));
  for (auto& r : f.records) {
    w.u8(r.kind);
    w.u64(r.id);
    w.str(r.signal);
    w.u32(r.requests);
    w.u8(r.has_notify ? 1 : 0);
    w.str(r.notify_name);
    w.str(r.notify_message);
    w.u32(static_cast<uint32_t>(r.code));
    w.u8(static_cast<uint8_t>(r.reason));
    w.str(r.error);
  }
  return w.take();
}

Status decodeSignalFrame(const std::string& body, SignalFrame& out) {
  Reader rd(body);
  auto bad = [&](const char* what) {
    return Status(Code::kInvalidArgument, fmt::format("malformed signal frame ({} bytes): {}", body.size(), what));
  };
  uint8_t version = 0;
  uint32_t n = 0;
  if (!rd.u8(version)) return bad("no version");
  if (version != kWireVersion) return bad("unknown version");
  if (!rd.str(out.from) || !rd.str(out.host) || !rd.u16(out.port) || !rd.u64(out.incarnation) || !rd.u64(out.seq) ||
      !rd.u32(n))
    return bad("short header");
  if (n > rd.left() / kMinRecord) return bad("more records than bytes");
  out.records.assign(n, {});
  for (auto& r : out.records) {
    uint8_t flags = 0, reason = 0;
    uint32_t code = 0;
    if (!rd.u8(r.kind) || !rd.u64(r.id) || !rd.str(r.signal) || !rd.u32(r.requests) || !rd.u8(flags) ||
        !rd.str(r.notify_name) || !rd.str(r.notify_message) || !rd.u32(code) || !rd.u8(reason) || !rd.str(r.error))
      return bad("short record");
    if (r.kind != SignalRecord::kOpen && r.kind != SignalRecord::kDone) return bad("unknown record kind");
    if (flags > 1 || reason > static_cast<uint8_t>(SignalReason::kOverflow)) return bad("bad flags or reason");
    r.has_notify = flags == 1;
    r.code = static_cast<int32_t>(code);
    if (r.code < 0 || r.code > static_cast<int32_t>(Code::kInternal)) return bad("bad code");
    r.reason = static_cast<SignalReason>(reason);
  }
  if (!rd.done()) return bad("trailing bytes");
  return Status::OK();
}

std::string encodeOutcomes(const std::vector<Status>& outcomes) {
  Writer w;
  w.u32(static_cast<uint32_t>(outcomes.size()));
  for (auto& s : outcomes) {
    w.u32(static_cast<uint32_t>(s.code()));
    w.str(s.message());
  }
  return w.take();
}

Status decodeOutcomes(const std::string& body, std::vector<Status>& out) {
  Reader rd(body);
  uint32_t n = 0;
  auto bad = [&] { return Status(Code::kRemoteError, fmt::format("malformed signal outcomes ({} bytes)", body.size())); };
  if (!rd.u32(n) || n > rd.left() / 8) return bad();
  out.clear();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t code = 0;
    std::string msg;
    if (!rd.u32(code) || !rd.str(msg) || code > static_cast<uint32_t>(Code::kInternal)) return bad();
    out.push_back(code == 0 ? Status::OK() : Status(static_cast<Code>(code), std::move(msg)));
  }
  if (!rd.done()) return bad();
  return Status::OK();
}

std::string encodeAlive(const AliveReply& r) {
  Writer w;
  w.u64(r.incarnation);
  w.u64(r.abandoned);
  return w.take();
}

Status decodeAlive(const std::string& body, AliveReply& out) {
  Reader rd(body);
  if (!rd.u64(out.incarnation) || !rd.u64(out.abandoned) || !rd.done())
    return {Code::kRemoteError, fmt::format("malformed alive reply ({} bytes)", body.size())};
  return Status::OK();
}

}  // namespace hawser
