// Signals (hawser/engine.h, docs/signals.md): submits that carry one, and
// waitSignal; the receiver's state is the SignalBoard (signal_board.h).
#include <fmt/format.h>

#include "engine/engine_impl.h"

namespace hawser {

std::string_view signalStateName(SignalState s) {
  switch (s) {
    case SignalState::kCompleted: return "COMPLETED";
    case SignalState::kFailed: return "FAILED";
    case SignalState::kTimeout: return "TIMEOUT";
  }
  return "UNKNOWN";
}

std::string_view signalReasonName(SignalReason r) {
  switch (r) {
    case SignalReason::kNone: return "NONE";
    case SignalReason::kTransferFailed: return "TRANSFER_FAILED";
    case SignalReason::kCanceled: return "CANCELED";
    case SignalReason::kRefused: return "REFUSED";
    case SignalReason::kPeerLost: return "PEER_LOST";
    case SignalReason::kOverflow: return "OVERFLOW";
  }
  return "UNKNOWN";
}

Status EngineImpl::signalTarget(const SegmentView& view, const std::string& others, const Signal& signal,
                                std::string& host, uint16_t& port) const {
  if (signal.name.empty()) return {Code::kInvalidArgument, "signal: the name is empty"};
  if (!others.empty())
    return {Code::kInvalidArgument,
            fmt::format("signal '{}': its requests must all target one segment (the receiver that counts them); "
                        "they target '{}' and '{}'",
                        signal.name.substr(0, 64), view.desc->name, others)};
  return listenerOf(view, fmt::format("signal '{}'", signal.name.substr(0, 64)), signal.name.size(), host, port);
}

Status EngineImpl::resolveListener(const std::string& name, std::string& host, uint16_t& port) {
  SegmentDesc d;
  Status s = store_->getSegment(name, d);
  if (!s.ok()) return s;
  if (d.kind != SegmentDesc::Kind::kMemory || d.host.empty() || d.rpc_port == 0)
    return {Code::kMetadataError, fmt::format("segment '{}': its descriptor names no rpc listener", name)};
  host = d.host;
  port = d.rpc_port;
  return Status::OK();
}

Status EngineImpl::startSignals() {
  SignalBoard::Settings settings;
  Status s = SignalBoard::Settings::fromConfig(config_, settings);
  if (!s.ok()) return {s.code(), "init: " + s.message()};
  return signals_.start(
      rpc_, settings, segment_name_, &inbox_,
      [this](const std::string& name, std::string& host, uint16_t& port) { return resolveListener(name, host, port); },
      [this](const std::string& asker) { return outbox_.aliveFor(asker); });
}

Status EngineImpl::waitSignal(const std::string& peer, const std::string& name, uint64_t expected,
                              std::chrono::milliseconds timeout, SignalResult& out) {
  out = SignalResult{};
  Status s = checkInit();
  if (!s.ok()) return s;
  if (peer.empty()) return {Code::kInvalidArgument, "waitSignal: peer (the sender's segment name) is empty"};
  if (name.empty()) return {Code::kInvalidArgument, "waitSignal: the signal name is empty"};
  if (expected == 0) return {Code::kInvalidArgument, fmt::format("waitSignal '{}': expected is 0", name)};
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = timeout >= std::chrono::hours(24 * 365) ? std::chrono::steady_clock::time_point::max()
                                                                : now + std::max(timeout, std::chrono::milliseconds(0));
  out = signals_.wait(peer, name, expected, deadline);
  return Status::OK();
}

}  // namespace hawser
