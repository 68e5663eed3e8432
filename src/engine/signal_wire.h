// The wire form of signals and tracked notifications (docs/signals.md).
//
// A sender's notify outbox tells each receiving engine, over its ordered
// control connection, about every submit that carries a signal or a
// notification: an OPEN record when the submit is made (many per frame),
// and a DONE record once its requests ended (completed, or why not, with
// the notification when it completed). Frames carry the sender's
// incarnation (new at every init) and a sequence number per receiver, so a
// frame sent again after a lost reply is applied once, and a frame the
// sender gave up on shows as a gap. The receiver probes a sender it has
// signals from (method engine.alive): the reply names the sender's
// incarnation and the last frame it gave up on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hawser/types.h"
#include "rpc/rpc.h"

namespace hawser {

inline const rpc::Channel kSignalCall = rpc::channel("engine.signal");
inline const rpc::Channel kAliveCall = rpc::channel("engine.alive");

struct SignalRecord {
  enum Kind : uint8_t { kOpen = 1, kDone = 2 };
  uint8_t kind = kOpen;
  uint64_t id = 0;          // the submit, unique per sender incarnation
  std::string signal;       // empty: none
  uint32_t requests = 0;    // requests of the submit (a block request counts one)
  bool has_notify = false;  // carries a notification
  std::string notify_name;
  std::string notify_message;  // DONE and completed only
  int32_t code = 0;            // DONE: 0 completed, else the first failed request's Code
  SignalReason reason = SignalReason::kNone;
  std::string error;  // DONE and failed: the message
};

struct SignalFrame {
  std::string from;  // the sender's segment name
  std::string host;  // its rpc listener
  uint16_t port = 0;
  uint64_t incarnation = 0;
  uint64_t seq = 0;  // per (sender incarnation, receiver), from 1, consecutive
  std::vector<SignalRecord> records;
};

std::string encodeSignalFrame(const SignalFrame& f);
Status decodeSignalFrame(const std::string& body, SignalFrame& out);

// The reply to a frame: the outcome of each of its DONE records, in order
// (Ok, or why the receiver refused it: its notification queue full, the
// submit already ended there as failed, ...).
std::string encodeOutcomes(const std::vector<Status>& outcomes);
Status decodeOutcomes(const std::string& body, std::vector<Status>& out);

// engine.alive: asked with the asker's segment name; answered with the
// sender's incarnation and the last sequence number it gave up sending to
// the asker (0: none).
struct AliveReply {
  uint64_t incarnation = 0;
  uint64_t abandoned = 0;
};
std::string encodeAlive(const AliveReply& r);
Status decodeAlive(const std::string& body, AliveReply& out);

}  // namespace hawser
