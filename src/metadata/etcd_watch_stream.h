// The body of a /v3/watch response: newline-delimited JSON messages, one per
// watch response ({"result":{...}} or {"error":{...}}). WatchStream cuts the
// bytes into messages, reports creation, event batches, cancellation
// (compaction included) and malformed input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "metadata/etcd_codec.h"

namespace hawser::etcd {

// One watch event (type PUT or DELETE).
struct WatchEvent {
  bool is_delete = false;
  KeyValue kv;  // for DELETE: key and mod_revision (the deletion's revision)
};

struct WatchStream {
  static constexpr size_t kMaxMessage = 64u << 20;  // bytes of one message
  std::string buffer;  // bytes of an incomplete message
  bool created = false;
  bool canceled = false;
  bool compacted = false;
  bool bad = false;
  std::string reason;
  const std::function<void()>* on_created = nullptr;
  const std::function<void(int64_t, const std::vector<WatchEvent>&)>* on_events = nullptr;

  // Appends bytes of the body and handles every complete message. False once
  // the stream should stop (canceled, or malformed: `bad`, with `reason`).
  bool feed(std::string_view data);
  // One message (a line without its newline).
  void handleLine(std::string_view line);
};

}  // namespace hawser::etcd
